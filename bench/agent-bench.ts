import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { DoneFrame, Frame, GenerateRequest } from "../protocol/messages";
import { commonPrefixLength } from "../protocol/common-prefix";
import type { Engine } from "../gpu-backend/engine/engine";
import { createEngine } from "../gpu-backend/engine/create-engine";
import { BlockPool, blocksForBudget } from "../gpu-backend/kv/block-pool";
import { CpuExecutor } from "../gpu-backend/model/executors/cpu-executor";
import { loadModel } from "../gpu-backend/engine/load-model";
import { prefillWastePerToken } from "../gpu-backend/model/graph/decoder-spec";
import { defaultPrecision, precisionRefusal, quantBits, quantizedWeightsFor, type WeightPrecision } from "../gpu-backend/engine/weight-precision";
import { makeAgentWorkload, type AgentTrajectory } from "./agent-workload";
import { Progress, note } from "./progress";
import { lineChart } from "./svg-plot";

export interface AgentBenchOptions {
  quick: boolean;
  json: boolean;
  trajectories?: number;
  turns?: number;
  outDir: string;
  model?: string;
  /** Weight precision (default: the cpu default, `defaultPrecision("cpu")`). */
  weights?: WeightPrecision;
}

interface TurnRecord {
  trajectory: number;
  turn: number;
  promptTokens: number;
  cachedTokens: number;
  computedTokens: number;
  newTokens: number;
  completionTokens: number;
  ttftMs: number;
}

/**
 * `npm run bench -- agent [--quick] [--json] [--trajectories N] [--turns N] [--model DIR|FAMILY] [--weights P]`
 *
 * `--model` takes a model folder or a demo family (llama, qwen3, qwen3_moe, gemma3, phi3).
 *
 * Runs one synthetic agent workload twice on the same model and executor: with the prefix cache,
 * then without it (the `--no-prefix-cache` baseline), and measures batch-1 vs batch-8 decode.
 */
export async function runAgentBench(o: AgentBenchOptions): Promise<Record<string, unknown>> {
  const model = await loadModel({ dir: o.model, log: (line: string) => note("agent", line) });
  const { spec, codec } = model;
  const trajectories = o.trajectories ?? (o.quick ? 2 : 4);
  const turns = o.turns ?? (o.quick ? 20 : 24);
  const blockSize = 16;
  const numBlocks = blocksForBudget({ budgetBytes: 1.5 * 2 ** 30, blockSize, numLayers: spec.numLayers, numKvHeads: spec.numKvHeads, headDim: spec.headDim, bytesPerElement: 4 });
  const precision = o.weights ?? defaultPrecision("cpu");
  const refusal = precisionRefusal("cpu", precision);
  if (refusal) throw new Error(refusal);
  const bits = quantBits(precision);
  const cache = bits ? quantizedWeightsFor(model.checkpoint, bits, (line) => note("agent", line)) : null;
  const quantized = cache?.weights ?? null;
  note("agent", `building the executor (${numBlocks} KV blocks, ${precision} weights)`);
  const executor = await CpuExecutor.create({ spec, weights: model.weights, quantized, numBlocks, blockSize });
  cache?.save();
  const countTokens = (t: string) => codec.encode(t).length;
  const workload = makeAgentWorkload({
    trajectories,
    turns,
    systemTokens: 2100,
    observationTokens: [100, 400],
    replyTokens: o.quick ? [16, 32] : [16, 64],
    seed: 7,
    countTokens,
  });

  const makeEngine = (enablePrefixCache: boolean) =>
    createEngine({
      executor,
      pool: new BlockPool({ numBlocks, blockSize }),
      codec,
      modelId: spec.modelId,
      scheduler: { maxBatchTokens: 512, maxRunningSequences: 64, blockSize, prefillWastePerToken: prefillWastePerToken(spec) },
      enablePrefixCache,
      backendId: "bench",
    });

  const runs: Record<"cache" | "noCache", { records: TurnRecord[]; wallMs: number }> = {
    cache: await runWorkload(makeEngine(true), workload, "prefix cache on"),
    noCache: await runWorkload(makeEngine(false), workload, "prefix cache off"),
  };

  note("agent", "decode speed: batch 1 and batch 8");
  const decodeEngine = makeEngine(true);
  const base = codec.encode(codec.render({ messages: workload[0]!.turns[0]!.newMessages, tools: workload[0]!.tools, addGenerationPrompt: true }));
  const decodeRate = async (batch: number) => {
    const results = await Promise.all(
      Array.from({ length: batch }, (_, b) =>
        decodeEngine.generateTokens({
          tokenIds: [...base, ...codec.encode(` variant ${b} ${"x ".repeat(b)}`)],
          sampling: { maxTokens: 48, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true },
        }),
      ),
    );
    // Aggregate decode throughput: each sequence's tokens after its first over its own decode
    // time, summed over the sequences decoding together (prefill time is not decode time).
    return results.reduce((a, r) => a + ((r.tokenIds.length - 1) / r.timings.decodeMs) * 1000, 0);
  };
  await decodeRate(1); // warm the shared prefix
  const decode1 = await decodeRate(1);
  const decode8 = await decodeRate(8);
  // Prefill speed: the first turn's prompt (system prompt and tools) alone, no cache, best of 2.
  note("agent", `prefill speed: ${base.length} prompt tokens, no cache`);
  const prefillEngine = makeEngine(false);
  let prefillMs = Infinity;
  for (let i = 0; i < 2; i++) {
    const r = await prefillEngine.generateTokens({ tokenIds: base, sampling: { maxTokens: 1, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true } });
    prefillMs = Math.min(prefillMs, r.timings.prefillMs);
  }
  await executor.dispose();

  // Report.
  const byTurn = (records: TurnRecord[], k: number) => records.filter((r) => r.turn === k);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  const rows: string[] = [];
  rows.push("turn | prompt | cached (on) | computed (on) | TTFT ms (on) | cached (off) | computed (off) | TTFT ms (off)");
  for (let k = 0; k < turns; k++) {
    const on = byTurn(runs.cache.records, k);
    const off = byTurn(runs.noCache.records, k);
    rows.push(
      [k + 1, mean(on.map((r) => r.promptTokens)), mean(on.map((r) => r.cachedTokens)), mean(on.map((r) => r.computedTokens)), mean(on.map((r) => r.ttftMs)), mean(off.map((r) => r.cachedTokens)), mean(off.map((r) => r.computedTokens)), mean(off.map((r) => r.ttftMs))]
        .map((v) => Math.round(v))
        .join(" | "),
    );
  }
  const sum = (rs: TurnRecord[], f: (r: TurnRecord) => number) => rs.reduce((a, r) => a + f(r), 0);
  const computedOverNew = sum(runs.cache.records, (r) => r.computedTokens) / sum(runs.cache.records, (r) => r.newTokens);
  const lastOn = mean(byTurn(runs.cache.records, turns - 1).map((r) => r.ttftMs));
  const lastOff = mean(byTurn(runs.noCache.records, turns - 1).map((r) => r.ttftMs));
  const summary = {
    model: spec.modelId,
    weights: precision,
    trajectories,
    turns,
    computedOverNew: round(computedOverNew, 3),
    hitRate: round(sum(runs.cache.records, (r) => r.cachedTokens) / sum(runs.cache.records, (r) => r.promptTokens), 3),
    totalTimeSpeedup: round(runs.noCache.wallMs / runs.cache.wallMs, 2),
    ttftSpeedupLastTurn: round(lastOff / lastOn, 2),
    ttftLastTurnMs: { cache: Math.round(lastOn), noCache: Math.round(lastOff) },
    wallMs: { cache: Math.round(runs.cache.wallMs), noCache: Math.round(runs.noCache.wallMs) },
    decodeTokPerS: { batch1: round(decode1, 1), batch8: round(decode8, 1) },
    batchDecodeSpeedup: round(decode8 / decode1, 2),
    prefillTokPerS: round((base.length / prefillMs) * 1000, 1),
  };

  mkdirSync(o.outDir, { recursive: true });
  const plot = join(o.outDir, "agent-ttft.svg");
  writeFileSync(
    plot,
    lineChart({
      title: `Time to first token per turn (${spec.modelId}, ${trajectories} concurrent trajectories, CPU)`,
      xLabel: "turn",
      yLabel: "TTFT (ms, mean over trajectories)",
      logY: true,
      series: [
        { name: "prefix cache on", color: "#1f77b4", points: Array.from({ length: turns }, (_, k) => ({ x: k + 1, y: mean(byTurn(runs.cache.records, k).map((r) => r.ttftMs)) })) },
        { name: "prefix cache off (--no-prefix-cache)", color: "#d62728", points: Array.from({ length: turns }, (_, k) => ({ x: k + 1, y: mean(byTurn(runs.noCache.records, k).map((r) => r.ttftMs)) })) },
      ],
    }),
  );
  process.stderr.write(`\n${rows.join("\n")}\n\n${JSON.stringify(summary, null, 2)}\nplot: ${plot}\n`);
  return summary;
}

async function runWorkload(engine: Engine, workload: AgentTrajectory[], label: string): Promise<{ records: TurnRecord[]; wallMs: number }> {
  const progress = new Progress("agent", workload.reduce((a, t) => a + t.turns.length, 0));
  const records: TurnRecord[] = [];
  // Per record, in submission order: prompt ids and prompt + reply ids, for "strictly new tokens".
  const submitted: { record: TurnRecord; prompt: number[]; all: number[] }[] = [];
  const t0 = performance.now();
  await Promise.all(
    workload.map(async (traj, t) => {
      let stateId: string | undefined;
      for (let k = 0; k < traj.turns.length; k++) {
        const turn = traj.turns[k]!;
        const req: GenerateRequest = {
          requestId: `${traj.id}-${k}`,
          trajectoryId: traj.id,
          mode: k === 0 ? "full" : "delta",
          messages: turn.newMessages,
          tools: traj.tools,
          sampling: { maxTokens: turn.maxTokens, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true },
          ...(stateId ? { stateId } : {}),
        };
        const slot = submitted.length;
        submitted.push(undefined as never);
        const done = await submit(engine, req);
        const state = engine.states.get(done.stateId)!;
        const record: TurnRecord = {
          trajectory: t,
          turn: k,
          promptTokens: done.usage.promptTokens,
          cachedTokens: done.usage.cachedTokens,
          computedTokens: done.usage.computedTokens,
          newTokens: 0,
          completionTokens: done.usage.completionTokens,
          ttftMs: done.timings.ttftMs,
        };
        records.push(record);
        // What the turn computed: its prompt and every generated token but the last (sampled, never fed to the model).
        submitted[slot] = { record, prompt: state.promptTokenIds, all: [...state.promptTokenIds, ...state.generatedTokenIds.slice(0, -1)] };
        stateId = done.stateId;
        progress.tick(label);
      }
    }),
  );
  const wallMs = performance.now() - t0;
  // Strictly new tokens of a turn: its prompt minus the longest prefix it shares with what any
  // turn before it computed (its own previous turn and reply, or another trajectory's system
  // prompt). The previous reply's last token counts as new: no step ever computed its KV.
  submitted.forEach((cur, i) => {
    const lcp = submitted.slice(0, i).reduce((best, prev) => Math.max(best, commonPrefixLength(prev.all, cur.prompt)), 0);
    cur.record.newTokens = cur.prompt.length - lcp;
  });
  return { records, wallMs };
}

function submit(engine: Engine, req: GenerateRequest): Promise<DoneFrame> {
  return new Promise((resolve, reject) => {
    engine.submit(req, (f: Frame) => {
      if (f.type === "done") resolve(f);
      else if (f.type === "error") reject(new Error(`${f.code}: ${f.message}`));
    });
  });
}

function round(v: number, digits: number): number {
  const p = Math.pow(10, digits);
  return Math.round(v * p) / p;
}
