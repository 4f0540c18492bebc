import { availableParallelism } from "node:os";
import { getLlama, LlamaLogLevel, type LlamaContextSequence, type LlamaModel } from "node-llama-cpp";
import { measureCpu, residentMemory, startCpuMeter, type CpuShare } from "./kit/machine";
import type { EngineFigures } from "./llamacpp-ours";
import { generateGreedy, runTurn } from "./llamacpp-turns";
import { llamaCppTrials, type LlamaCppWorkloads, type TokenTrajectory } from "./llamacpp-workload";
import { note } from "./kit/progress";
import { round } from "./kit/report";

export interface LlamaCppSideOptions {
  ggufPath: string;
  /** CPU threads, the same count our engine uses (default: every core, `os.availableParallelism()`). */
  threads?: number;
  workloads: LlamaCppWorkloads;
  /** llama.cpp's GPU build (node-llama-cpp's prebuilt cuda or vulkan package), all layers offloaded; default false: the CPU build. */
  gpu?: false | "cuda" | "vulkan";
  /** Fewer tuning trials (QUICK_BATCH_SIZES, one run each instead of the best of two). */
  quick: boolean;
  /** No tuning: n_batch 512, flash attention off, one run of each workload (the test's check that every workload runs; not a measurement). */
  smoke?: boolean;
  /** Progress lines (default: stderr, `[llamacpp] ...`). */
  onProgress?: (line: string) => void;
}

/** `setup`: the setup llama.cpp ran with, in words (threads, batch sizes, flash attention, KV, sharing). */
export interface LlamaCppSideResult extends EngineFigures {
  threads: number;
  /** n_batch = n_ubatch used for every run after the prefill trials. */
  batchSize: number;
  flashAttention: { prefill: boolean; decode: boolean; trajectory: boolean; concurrent: boolean };
  /** tokensPerS = 1000 / msPerToken: the mean over the generated tokens after the first (stalls included). */
  decode: EngineFigures["decode"] & { medianMsPerToken: number };
  /** Cores busy before the run (1 s sample) and during it; null where /proc/stat is unreadable. */
  cpu: { before: CpuShare | null; during: CpuShare | null };
  /** Every tuning trial, for the record. */
  trials: {
    prefill: { batchSize: number; flashAttention: boolean; tokensPerS: number }[];
    decode: { flashAttention: boolean; tokensPerS: number; medianMsPerToken: number }[];
    trajectoryWallMs: { flashAttention: boolean; wallMs: number }[];
    concurrentWallMs: { flashAttention: boolean; wallMs: number }[];
  };
}

/**
 * The llama.cpp half of `npm run bench -- llamacpp`: the workloads of llamacpp-workload.ts run by
 * llama.cpp through node-llama-cpp's prebuilt CPU binary (`gpu: false`, `build: "never"`: never
 * built or downloaded), in its best setup found here:
 *
 *   threads           the count our engine uses (`threads`, default every core)
 *   n_batch/n_ubatch  node-llama-cpp sets both to `batchSize`; the prefill prompt is timed at each of
 *                     BATCH_SIZES (quick: QUICK_BATCH_SIZES; `llamaCppTrials`, llamacpp-workload.ts) with flash attention on and off, the best kept
 *   flash attention   per workload: prefill's from those trials; decode's from a decode trial with
 *                     each; the trajectory and concurrent runs take decode's unless prefill's
 *                     differs, then both are run and the faster kept
 *   KV cache          F16 (llama.cpp's default); greedy sampler (temperature 0), EOS ignored
 *   trajectory        one sequence; between turns the KV of the common prefix is kept (what diverges,
 *                     the discarded generated tokens, is erased) and only the new suffix is evaluated
 *   concurrent        one context with 8 sequences, one per trajectory, decoded together (node-llama-cpp
 *                     batches the queued tokens of all sequences into each llama_decode,
 *                     "maximumParallelism"); each sequence keeps its own prefix between turns. The
 *                     shared system prompt's KV is NOT shared across sequences: node-llama-cpp exposes
 *                     no llama_memory_seq_cp, so every sequence prefills its own copy.
 *
 * Figures: decode tokens/s = (generated - 1) / time from the first generated token to the last
 * (one llama_decode per token; prefill excluded; best of 2 or 3 runs; the median gap between
 * tokens too: single tokens occasionally take 20-40 ms here, which the mean includes); prefill tokens/s = prompt tokens / time to the
 * first generated token, fresh sequence; trajectory wall time over its 20 turns and TTFT of each
 * turn (from the turn's start, KV erase included, to its first token); concurrent wall time and
 * (prompt + generated tokens) / wall time, prompt tokens counting every turn's whole prompt
 * (`evaluatedPromptTokens` says how many were actually computed). `cpu` records the cores other
 * processes kept busy before (1 s) and during the run: on this 2-core machine anything above ~0.1
 * makes every figure low (a warning line says so).
 *
 * @example
 * const workloads = makeLlamaCppWorkloads({ codec, quick: true });
 * const r = await runLlamaCppSide({ ggufPath: "/tmp/demo-q4_0.gguf", threads: 2, workloads, quick: true });
 * console.log(r.setup, r.decode.tokensPerS, r.prefill.tokensPerS);
 */
export async function runLlamaCppSide(o: LlamaCppSideOptions): Promise<LlamaCppSideResult> {
  const log = o.onProgress ?? ((line: string) => note("llamacpp", line));
  const threads = o.threads ?? availableParallelism();
  const w = o.workloads;
  const before = await measureCpu(1000);
  const warnIfBusy = (when: string, share: CpuShare | null) => {
    if (share && share.otherCores > 0.1) log(`WARNING: other processes kept ${share.otherCores} cores busy ${when}: llama.cpp's figures are low`);
  };
  warnIfBusy("before the run", before);
  const stopMeter = startCpuMeter();
  const gpu = o.gpu ?? false;
  const build = gpu ? `${gpu} build` : "CPU build";
  const llama = await getLlama({ gpu, build: "never", maxThreads: threads, logLevel: LlamaLogLevel.error, logger: () => {} });
  try {
    const model = await llama.loadModel({ modelPath: o.ggufPath, gpuLayers: gpu ? "max" : 0 });
    try {
      const loaded = residentMemory();
      log(`llama.cpp ${llama.llamaCppRelease.release} (${llama.buildType} ${build}), ${model.typeDescription}, ${threads} threads`);
      const bench = new ContextBench(model, threads);

      // Prefill: every batch size with flash attention off and on, best of 1 (quick) or 2 runs.
      const prefillTrials: LlamaCppSideResult["trials"]["prefill"] = [];
      let best = { batchSize: 512, flashAttention: false, ms: Infinity };
      const { batchSizes, flashSettings, prefillRepeats, decodeRepeats } = llamaCppTrials(o);
      for (const batchSize of batchSizes) {
        for (const flashAttention of flashSettings) {
          const ms = await bench.prefillMs(w.prefill.prompt, { batchSize, flashAttention }, prefillRepeats);
          const tokensPerS = (w.prefill.prompt.length / ms) * 1000;
          prefillTrials.push({ batchSize, flashAttention, tokensPerS: round(tokensPerS, 1) });
          log(`prefill ${w.prefill.prompt.length} tokens, n_batch = n_ubatch = ${batchSize}, flash attention ${onOff(flashAttention)}: ${tokensPerS.toFixed(0)} tokens/s`);
          if (ms < best.ms) best = { batchSize, flashAttention, ms };
        }
      }
      const batchSize = best.batchSize;

      // Decode at ~1k context, flash attention off and on, best of 2 (quick) or 3 runs.
      const decodeTrials: LlamaCppSideResult["trials"]["decode"] = [];
      let decode = { flashAttention: false, tokensPerS: 0, medianMsPerToken: 0 };
      for (const flashAttention of flashSettings) {
        const run = await bench.decode(w.decode.prompt, w.decode.generate, { batchSize, flashAttention }, decodeRepeats);
        decodeTrials.push({ flashAttention, tokensPerS: round(run.tokensPerS, 1), medianMsPerToken: round(run.medianMsPerToken, 2) });
        log(`decode ${w.decode.generate} tokens after ${w.decode.prompt.length}, flash attention ${onOff(flashAttention)}: ${run.tokensPerS.toFixed(1)} tokens/s (median ${run.medianMsPerToken.toFixed(1)} ms/token)`);
        if (run.tokensPerS > decode.tokensPerS) decode = { flashAttention, ...run };
      }

      // Trajectory and concurrent runs: decode's flash attention, or both when prefill's differs.
      const candidates = best.flashAttention === decode.flashAttention ? [decode.flashAttention] : [false, true];
      const trajectoryRuns: { flashAttention: boolean; run: Awaited<ReturnType<ContextBench["trajectory"]>> }[] = [];
      for (const flashAttention of candidates) {
        const run = await bench.trajectory(w.trajectory, { batchSize, flashAttention }, log);
        log(`trajectory (${w.trajectory.prompts.length} turns), flash attention ${onOff(flashAttention)}: ${(run.wallMs / 1000).toFixed(2)} s, last-turn TTFT ${run.ttftMs.at(-1)!.toFixed(0)} ms`);
        trajectoryRuns.push({ flashAttention, run });
      }
      const concurrentRuns: { flashAttention: boolean; run: Awaited<ReturnType<ContextBench["concurrent"]>> }[] = [];
      for (const flashAttention of candidates) {
        const run = await bench.concurrent(w.concurrent.trajectories, { batchSize, flashAttention }, log);
        log(`concurrent (${w.concurrent.trajectories.length} x ${w.concurrent.trajectories[0]!.prompts.length} turns), flash attention ${onOff(flashAttention)}: ${(run.wallMs / 1000).toFixed(2)} s`);
        concurrentRuns.push({ flashAttention, run });
      }
      const trajectory = trajectoryRuns.reduce((a, b) => (b.run.wallMs < a.run.wallMs ? b : a));
      const concurrent = concurrentRuns.reduce((a, b) => (b.run.wallMs < a.run.wallMs ? b : a));

      const c = concurrent.run;
      const during = stopMeter();
      warnIfBusy("during the run", during);
      const setup = [
        `llama.cpp ${llama.llamaCppRelease.release} via node-llama-cpp (prebuilt ${build}, gpu: ${gpu}${gpu ? ", every layer offloaded" : ""}), ${model.typeDescription}`,
        `${threads} threads`,
        `n_batch = n_ubatch = ${batchSize} (best prefill of ${batchSizes.join("/")})`,
        `flash attention: prefill ${onOff(best.flashAttention)}, decode ${onOff(decode.flashAttention)}, trajectory ${onOff(trajectory.flashAttention)}, concurrent ${onOff(concurrent.flashAttention)} (each the faster measured)`,
        `KV cache F16, greedy sampler, EOS ignored`,
        `trajectory: one sequence keeping the common prefix's KV between turns, evaluating only the new suffix`,
        `concurrent: one context, ${w.concurrent.trajectories.length} sequences decoded together (node-llama-cpp batching, maximumParallelism), each keeping its own prefix between turns; ` +
          `the ${w.concurrent.sharedPrefixTokens}-token shared system prompt is NOT shared across sequences (node-llama-cpp exposes no llama_memory_seq_cp): each sequence prefills its own copy`,
      ].join("; ");
      return {
        setup,
        threads,
        batchSize,
        flashAttention: { prefill: best.flashAttention, decode: decode.flashAttention, trajectory: trajectory.flashAttention, concurrent: concurrent.flashAttention },
        decode: {
          contextTokens: w.decode.prompt.length,
          generatedTokens: w.decode.generate,
          tokensPerS: round(decode.tokensPerS, 1),
          msPerToken: round(1000 / decode.tokensPerS, 2),
          medianMsPerToken: round(decode.medianMsPerToken, 2),
        },
        prefill: { promptTokens: w.prefill.prompt.length, ms: round(best.ms, 1), tokensPerS: round((w.prefill.prompt.length / best.ms) * 1000, 1) },
        trajectory: {
          turns: w.trajectory.prompts.length,
          generatePerTurn: w.trajectory.generate,
          lastPromptTokens: w.trajectory.prompts.at(-1)!.length,
          evaluatedPromptTokens: trajectory.run.evaluatedPromptTokens,
          wallMs: round(trajectory.run.wallMs, 1),
          lastTurnTtftMs: round(trajectory.run.ttftMs.at(-1)!, 1),
          ttftMs: trajectory.run.ttftMs.map((x) => round(x, 1)),
        },
        concurrent: {
          trajectories: w.concurrent.trajectories.length,
          turnsEach: w.concurrent.trajectories[0]!.prompts.length,
          promptTokens: c.promptTokens,
          evaluatedPromptTokens: c.evaluatedPromptTokens,
          generatedTokens: c.generatedTokens,
          wallMs: round(c.wallMs, 1),
          tokensPerS: round(((c.promptTokens + c.generatedTokens) / c.wallMs) * 1000, 1),
        },
        cpu: { before, during },
        memory: { rssBytes: loaded.rssBytes, peakRssBytes: residentMemory().peakRssBytes, kvPoolBytes: null },
        trials: {
          prefill: prefillTrials,
          decode: decodeTrials,
          trajectoryWallMs: trajectoryRuns.map((r) => ({ flashAttention: r.flashAttention, wallMs: round(r.run.wallMs, 1) })),
          concurrentWallMs: concurrentRuns.map((r) => ({ flashAttention: r.flashAttention, wallMs: round(r.run.wallMs, 1) })),
        },
      };
    } finally {
      await model.dispose();
    }
  } finally {
    await llama.dispose();
  }
}

interface ContextSetup {
  batchSize: number;
  flashAttention: boolean;
}

/** The measurements, each on a context of its own (created, warmed up, disposed). */
class ContextBench {
  constructor(
    private readonly model: LlamaModel,
    private readonly threads: number,
  ) {}

  /** Best of `runs`: ms from submitting `prompt` to a fresh sequence to its first generated token. */
  async prefillMs(prompt: number[], setup: ContextSetup, runs: number): Promise<number> {
    return this.withContext(prompt.length + 1, 1, setup, async ([sequence]) => {
      let best = Infinity;
      for (let i = 0; i < runs; i++) {
        await sequence!.clearHistory();
        const t0 = performance.now();
        const [first] = await generateGreedy(sequence!, prompt, 1, t0);
        best = Math.min(best, first!);
      }
      return best;
    });
  }

  /**
   * Greedy decoding after `prompt`, the prefill excluded, best of `runs`: tokens/s over the
   * generated tokens after the first (mean: stalls included), and the median ms between tokens.
   */
  async decode(prompt: number[], generate: number, setup: ContextSetup, runs: number): Promise<{ tokensPerS: number; medianMsPerToken: number }> {
    return this.withContext(prompt.length + generate, 1, setup, async ([sequence]) => {
      let best = { tokensPerS: 0, medianMsPerToken: 0 };
      for (let i = 0; i < runs; i++) {
        await sequence!.clearHistory();
        const times = await generateGreedy(sequence!, prompt, generate, performance.now());
        const tokensPerS = ((times.length - 1) / (times.at(-1)! - times[0]!)) * 1000;
        const gaps = times.slice(1).map((t, j) => t - times[j]!).sort((a, b) => a - b);
        if (tokensPerS > best.tokensPerS) best = { tokensPerS, medianMsPerToken: gaps[gaps.length >> 1]! };
      }
      return best;
    });
  }

  async trajectory(trajectory: TokenTrajectory, setup: ContextSetup, log: (line: string) => void) {
    const size = trajectory.prompts.at(-1)!.length + trajectory.generate;
    return this.withContext(size, 1, setup, async ([sequence]) => {
      const ttftMs: number[] = [];
      let evaluatedPromptTokens = 0;
      const t0 = performance.now();
      for (const [k, prompt] of trajectory.prompts.entries()) {
        const turn = await runTurn(sequence!, prompt, trajectory.generate);
        ttftMs.push(turn.ttftMs);
        evaluatedPromptTokens += turn.evaluatedPromptTokens;
        if ((k + 1) % 5 === 0) log(`trajectory: turn ${k + 1}/${trajectory.prompts.length}, prompt ${prompt.length} tokens, ${turn.evaluatedPromptTokens} evaluated, TTFT ${turn.ttftMs.toFixed(0)} ms`);
      }
      return { wallMs: performance.now() - t0, ttftMs, evaluatedPromptTokens };
    });
  }

  async concurrent(trajectories: TokenTrajectory[], setup: ContextSetup, log: (line: string) => void) {
    const size = Math.max(...trajectories.map((t) => t.prompts.at(-1)!.length + t.generate));
    return this.withContext(size, trajectories.length, setup, async (sequences) => {
      let evaluatedPromptTokens = 0;
      let turnsDone = 0;
      const turnsTotal = trajectories.reduce((a, t) => a + t.prompts.length, 0);
      const t0 = performance.now();
      await Promise.all(
        trajectories.map(async (trajectory, t) => {
          const sequence = sequences[t]!;
          for (const prompt of trajectory.prompts) {
            const turn = await runTurn(sequence, prompt, trajectory.generate);
            evaluatedPromptTokens += turn.evaluatedPromptTokens; // after the await: `x += await f()` would lose the other sequences' additions
            if (++turnsDone % 10 === 0) log(`concurrent: ${turnsDone}/${turnsTotal} turns, ${((performance.now() - t0) / 1000).toFixed(1)} s`);
          }
        }),
      );
      return {
        wallMs: performance.now() - t0,
        evaluatedPromptTokens,
        promptTokens: trajectories.reduce((a, t) => a + t.prompts.reduce((b, p) => b + p.length, 0), 0),
        generatedTokens: trajectories.reduce((a, t) => a + t.prompts.length * t.generate, 0),
      };
    });
  }

  /**
   * Runs `body` on the sequences of a fresh context of `sequences` x `tokens` cells, warmed up by
   * one short evaluation (then cleared).
   */
  private async withContext<T>(tokens: number, sequences: number, setup: ContextSetup, body: (sequences: LlamaContextSequence[]) => Promise<T>): Promise<T> {
    const context = await this.model.createContext({
      contextSize: tokens,
      sequences,
      batchSize: setup.batchSize,
      flashAttention: setup.flashAttention,
      threads: { ideal: this.threads, min: this.threads },
    });
    try {
      const all = Array.from({ length: sequences }, () => context.getSequence());
      await generateGreedy(all[0]!, [0, 1, 2, 3, 4, 5, 6, 7], 2, performance.now());
      await all[0]!.clearHistory();
      return await body(all);
    } finally {
      await context.dispose();
    }
  }
}

function onOff(on: boolean): string {
  return on ? "on" : "off";
}
