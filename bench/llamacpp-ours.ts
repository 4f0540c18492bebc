import { createBackend } from "../gpu-backend/server/backend";
import { executorLabel, type ExecutorKind, type ExecutorProvider } from "../gpu-backend/model/executors/executor";
import type { Engine } from "../gpu-backend/engine/engine";
import type { WeightPrecision } from "../gpu-backend/engine/weight-precision";
import { llamaCppTrials, type LlamaCppWorkloads, type TokenTrajectory } from "./llamacpp-workload";
import { greedy } from "./kit/engine";
import { residentMemory, startCpuMeter, type CpuShare, type ResidentMemory } from "./kit/machine";
import { note } from "./kit/progress";
import { round } from "./kit/report";

export interface OurSideOptions {
  /** Model folder; undefined: the embedded demo model. */
  modelDir: string | undefined;
  weights: WeightPrecision;
  executor: ExecutorKind;
  /** The executor's provider (default: its first; BackendOptions.provider). */
  provider?: ExecutorProvider | undefined;
  /** onnxruntime intra-op threads (default every core, as the backend's default). */
  threads?: number;
  workloads: LlamaCppWorkloads;
  /** The quick workloads; with `smoke`, one run a measurement: as many as llama.cpp's side tries (`llamaCppTrials`). */
  quick: boolean;
  smoke?: boolean | undefined;
  onProgress?: (line: string) => void;
}

/** The figures both sides report (llamacpp-side.ts gives llama.cpp's in the same shape). */
export interface EngineFigures {
  setup: string;
  decode: { contextTokens: number; generatedTokens: number; tokensPerS: number; msPerToken: number };
  prefill: { promptTokens: number; ms: number; tokensPerS: number };
  trajectory: { turns: number; generatePerTurn: number; lastPromptTokens: number; evaluatedPromptTokens: number; wallMs: number; lastTurnTtftMs: number; ttftMs: number[] };
  concurrent: { trajectories: number; turnsEach: number; promptTokens: number; evaluatedPromptTokens: number; generatedTokens: number; wallMs: number; tokensPerS: number };
  /** Resident memory after loading and its peak over the run; the KV pool's size where the engine has one (llama.cpp: a context per workload, null). */
  memory: ResidentMemory & { kvPoolBytes: number | null };
  /** Cores busy during the measured runs: this process's and other processes' (above ~0.1 on this 2-core machine, every figure is low). */
  cpu: { during: CpuShare | null };
}

/** The backend's own defaults (gpu-backend/server/main.ts): 1 GiB of KV, 16-token blocks, 512-token steps. */
const KV_MEMORY_BYTES = 2 ** 30;
const BLOCK_SIZE = 16;
const MAX_BATCH_TOKENS = 512;

/**
 * Agent Edge's half of `npm run bench -- llamacpp`: the same token workloads on our engine
 * in-process (`createBackend`, the backend's defaults; no HTTP), through `Engine.generateTokens`:
 * greedy, EOS ignored, prefix cache on.
 *
 *   decode      after the ~1k-token prompt: (generated - 1) / decode time (first to last token),
 *               best of as many runs as llama.cpp's side tries (`llamaCppTrials`: 6, quick 4,
 *               smoke 1); the first run also warms the prompt's blocks
 *   prefill     the ~2k-token prompt under a fresh cache salt each run (no block reused): its TTFT,
 *               best of as many runs as llama.cpp's side tries (16, quick 4, smoke 1)
 *   trajectory  20 turns one after the other: each turn's prompt reuses the earlier turns' cached
 *               blocks (block-hash prefix reuse; only whole 16-token blocks) and prefills the rest
 *   concurrent  8 trajectories at once, 5 turns each: continuous batching, and the shared system
 *               prompt's blocks are computed once and shared by all 8
 *
 * @example
 * const r = await runOurSide({ modelDir: undefined, weights: "int4", executor: "cpu", workloads, quick: true });
 * r.decode.tokensPerS;
 */
export async function runOurSide(o: OurSideOptions): Promise<EngineFigures> {
  const log = o.onProgress ?? ((line: string) => note("ours", line));
  const w = o.workloads;
  const backend = await createBackend({
    modelDir: o.modelDir,
    kvMemoryBytes: KV_MEMORY_BYTES,
    blockSize: BLOCK_SIZE,
    maxBatchTokens: MAX_BATCH_TOKENS,
    enablePrefixCache: true,
    threads: o.threads,
    executor: o.executor,
    provider: o.provider,
    weights: o.weights,
    backendId: "llamacpp-bench",
    log,
  });
  try {
    const { engine, executor } = backend;
    const loaded = residentMemory();
    const stopMeter = startCpuMeter();
    await engine.generateTokens({ tokenIds: w.decode.prompt.slice(0, 8), sampling: greedy(2), cacheSalt: "warm-up" });

    // As many runs as llama.cpp's side has tries at each (its setups x its repeats), the best kept.
    const trials = llamaCppTrials(o).trials;
    let prefillMs = Infinity;
    for (let i = 0; i < trials.prefill; i++) {
      const r = await engine.generateTokens({ tokenIds: w.prefill.prompt, sampling: greedy(1), cacheSalt: `prefill-${i}` });
      prefillMs = Math.min(prefillMs, r.timings.ttftMs);
      log(`prefill ${w.prefill.prompt.length} tokens: ${((w.prefill.prompt.length / r.timings.ttftMs) * 1000).toFixed(0)} tokens/s`);
    }

    let decodeTokensPerS = 0;
    for (let i = 0; i < trials.decode; i++) {
      const r = await engine.generateTokens({ tokenIds: w.decode.prompt, sampling: greedy(w.decode.generate) });
      const tokensPerS = ((r.tokenIds.length - 1) / r.timings.decodeMs) * 1000;
      log(`decode ${w.decode.generate} tokens after ${w.decode.prompt.length}: ${tokensPerS.toFixed(1)} tokens/s`);
      decodeTokensPerS = Math.max(decodeTokensPerS, tokensPerS);
    }

    const trajectory = await runTrajectory(engine, w.trajectory, (k, line) => (k + 1) % 5 === 0 && log(`trajectory: turn ${k + 1}/${w.trajectory.prompts.length}, ${line}`));
    log(`trajectory (${w.trajectory.prompts.length} turns): ${(trajectory.wallMs / 1000).toFixed(2)} s, last-turn TTFT ${trajectory.ttftMs.at(-1)!.toFixed(0)} ms`);

    let turnsDone = 0;
    const turnsTotal = w.concurrent.trajectories.reduce((a, t) => a + t.prompts.length, 0);
    const t0 = performance.now();
    const runs = await Promise.all(
      w.concurrent.trajectories.map((t) =>
        runTrajectory(engine, t, () => {
          if (++turnsDone % 10 === 0) log(`concurrent: ${turnsDone}/${turnsTotal} turns, ${((performance.now() - t0) / 1000).toFixed(1)} s`);
        }),
      ),
    );
    const concurrentMs = performance.now() - t0;
    log(`concurrent (${w.concurrent.trajectories.length} x ${w.concurrent.trajectories[0]!.prompts.length} turns): ${(concurrentMs / 1000).toFixed(2)} s`);
    const promptTokens = w.concurrent.trajectories.reduce((a, t) => a + t.prompts.reduce((b, p) => b + p.length, 0), 0);
    const generatedTokens = w.concurrent.trajectories.reduce((a, t) => a + t.prompts.length * t.generate, 0);
    const peak = residentMemory();
    const during = stopMeter();
    if (during && during.otherCores > 0.1) log(`WARNING: other processes kept ${during.otherCores} cores busy during the run: our figures are low`);
    return {
      setup: `Agent Edge engine in-process on ${executorLabel(executor)}, ${o.weights} weights, ${o.threads ?? "all"} threads, ${MAX_BATCH_TOKENS}-token steps, ${BLOCK_SIZE}-token KV blocks (${(executor.kvBytes / 2 ** 20).toFixed(0)} MiB pool), prefix cache on`,
      decode: { contextTokens: w.decode.prompt.length, generatedTokens: w.decode.generate, tokensPerS: round(decodeTokensPerS, 1), msPerToken: round(1000 / decodeTokensPerS, 2) },
      prefill: { promptTokens: w.prefill.prompt.length, ms: round(prefillMs, 1), tokensPerS: round((w.prefill.prompt.length / prefillMs) * 1000, 1) },
      trajectory: {
        turns: w.trajectory.prompts.length,
        generatePerTurn: w.trajectory.generate,
        lastPromptTokens: w.trajectory.prompts.at(-1)!.length,
        evaluatedPromptTokens: trajectory.evaluatedPromptTokens,
        wallMs: round(trajectory.wallMs, 1),
        lastTurnTtftMs: round(trajectory.ttftMs.at(-1)!, 1),
        ttftMs: trajectory.ttftMs.map((x) => round(x, 1)),
      },
      concurrent: {
        trajectories: w.concurrent.trajectories.length,
        turnsEach: w.concurrent.trajectories[0]!.prompts.length,
        promptTokens,
        evaluatedPromptTokens: runs.reduce((a, r) => a + r.evaluatedPromptTokens, 0),
        generatedTokens,
        wallMs: round(concurrentMs, 1),
        tokensPerS: round(((promptTokens + generatedTokens) / concurrentMs) * 1000, 1),
      },
      memory: { rssBytes: loaded.rssBytes, peakRssBytes: peak.peakRssBytes, kvPoolBytes: executor.kvBytes },
      cpu: { during },
    };
  } finally {
    await backend.close();
  }
}

/** Runs a trajectory's turns in order, counting the prompt tokens each turn computed (not served from cache). */
async function runTrajectory(engine: Engine, t: TokenTrajectory, onTurn: (k: number, line: string) => void) {
  const ttftMs: number[] = [];
  let evaluatedPromptTokens = 0;
  const t0 = performance.now();
  for (const [k, prompt] of t.prompts.entries()) {
    const r = await engine.generateTokens({ tokenIds: prompt, sampling: greedy(t.generate) });
    ttftMs.push(r.timings.ttftMs);
    const evaluated = r.usage.computedTokens;
    evaluatedPromptTokens += evaluated;
    onTurn(k, `prompt ${prompt.length} tokens, ${evaluated} evaluated, TTFT ${r.timings.ttftMs.toFixed(0)} ms`);
  }
  return { wallMs: performance.now() - t0, ttftMs, evaluatedPromptTokens };
}
