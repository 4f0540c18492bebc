import { generateFrames } from "../durable-objects/backend/backend-client";
import { freePort, startStack } from "../scripts/stack";
import type { ChatMessage, DoneFrame, Frame, GenerateRequest, KvPullReport } from "../protocol/messages";
import type { Engine } from "../gpu-backend/engine/engine";
import { createEngine } from "../gpu-backend/engine/create-engine";
import { loadModel } from "../gpu-backend/engine/load-model";
import { defaultPrecision, precisionRefusal, quantBits, quantizedWeightsFor, type WeightPrecision } from "../gpu-backend/engine/weight-precision";
import { BlockPool } from "../gpu-backend/kv/block-pool";
import { CpuExecutor } from "../gpu-backend/model/executors/cpu-executor";
import { prefillWastePerToken } from "../gpu-backend/model/graph/decoder-spec";
import { memoryBandwidth } from "./memory-bandwidth";
import { Progress, note } from "./progress";
import { round } from "./round";

export interface MigrationBenchOptions {
  quick: boolean;
  json: boolean;
  trajectories?: number;
  model?: string;
  weights?: WeightPrecision;
}

const SECRET = "migration-bench";
const BLOCK_SIZE = 16;

/**
 * `npm run bench -- migration [--quick] [--json] [--trajectories N] [--model DIR] [--weights P]`
 *
 * Trajectories of ~4k tokens (2k with --quick) run their first turn on backend A, then move: their
 * next turn (the whole transcript plus a user message, as the edge sends a moved trajectory) runs
 * on backend B, which pulls A's blocks over HTTP (`kvSource`), and on backend C, which computes
 * everything (a move without transfer). A is a backend process of its own (`npm run backend`, as
 * in production: holder and puller do not share a thread); B and C are engines in this process,
 * with their own pools. The moves run one at a time, B then C per trajectory, so each TTFT is
 * measured alone. Reports TTFT after the move (transfer vs recompute, medians and the ratio), bytes moved,
 * the pull's effective bandwidth, and the copy floor (bytes over this machine's memory copy
 * bandwidth).
 */
export async function runMigrationBench(o: MigrationBenchOptions): Promise<Record<string, unknown>> {
  const model = await loadModel({ dir: o.model, log: (line) => note("migration", line) });
  const { spec, codec } = model;
  const trajectories = o.trajectories ?? (o.quick ? 4 : 16);
  const targetTokens = o.quick ? 2048 : 4096;
  const precision = o.weights ?? defaultPrecision("cpu");
  const refusal = precisionRefusal("cpu", precision);
  if (refusal) throw new Error(refusal);
  const bits = quantBits(precision);
  const cache = bits ? quantizedWeightsFor(model.checkpoint, bits, (line) => note("migration", line)) : null;
  const numBlocks = (trajectories + 1) * Math.ceil((targetTokens + 512) / BLOCK_SIZE) + 64;

  const start = async (id: string): Promise<{ engine: Engine; executor: CpuExecutor }> => {
    note("migration", `backend ${id}: ${numBlocks} KV blocks, ${precision} weights`);
    const executor = await CpuExecutor.create({ spec, weights: model.weights, quantized: cache?.weights ?? null, numBlocks, blockSize: BLOCK_SIZE });
    const engine = createEngine({
      executor,
      pool: new BlockPool({ numBlocks, blockSize: BLOCK_SIZE }),
      codec,
      modelId: spec.modelId,
      scheduler: { maxBatchTokens: 512, maxRunningSequences: 16, blockSize: BLOCK_SIZE, prefillWastePerToken: prefillWastePerToken(spec) },
      enablePrefixCache: true,
      backendId: id,
      transfer: { secret: SECRET, timeoutMs: 60_000 },
    });
    // A long-running backend's pool pages are resident; a fresh process's are not, and the first
    // write to each costs a page fault (~5 ms per MiB here). Fault them in, for B and C alike.
    const zeros = new Uint8Array(executor.blockIO.bytesPerBlock);
    for (let id = 0; id < numBlocks; id++) executor.blockIO.write(id, zeros);
    return { engine, executor };
  };
  note("migration", "backend A: a backend process (npm run backend)");
  const holder = await startStack({
    backendPorts: [await freePort()],
    startEdge: false,
    secret: SECRET,
    kvMemory: `${Math.ceil((numBlocks * spec.numLayers * 2 * BLOCK_SIZE * spec.numKvHeads * spec.headDim * 4) / 2 ** 20) + 64}MiB`,
    weights: precision,
    backendArgs: o.model ? ["--model", o.model] : [],
    onLine: (line) => {
      if (/error|warn/i.test(line)) note("migration", line);
    },
  });
  const a = { url: holder.backendUrls[0]!, secret: SECRET };
  const holderUrl = a.url;
  const b = await start("B (transfer)");
  const c = await start("C (recompute)");
  cache?.save();

  // Distinct transcripts (no shared prefix) of about targetTokens tokens each; the last one only
  // warms the three backends' code paths (a long-running backend's steady state), untimed.
  const transcripts: ChatMessage[][] = Array.from({ length: trajectories + 1 }, (_, i) => transcript(i, targetTokens, (t) => codec.encode(t).length));
  const sampling = { maxTokens: 8, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true };

  const progress = new Progress("migration", (trajectories + 1) * 3);
  const firsts: DoneFrame[] = [];
  for (const [i, messages] of transcripts.entries()) {
    firsts.push(await remoteTurn(a, { requestId: `a-${i}`, mode: "full", messages, sampling }));
    progress.tick("first turns on A");
  }
  const moved = (i: number): GenerateRequest => ({
    requestId: `m-${i}`,
    mode: "full",
    messages: [...transcripts[i]!, firsts[i]!.message, { role: "user", content: `Trajectory ${i}: now summarize.` }],
    sampling,
  });
  const rows: { prompt: number; transferTtftMs: number; recomputeTtftMs: number; pull: KvPullReport; cachedTransfer: number; sameReply: boolean }[] = [];
  for (const i of [trajectories, ...Array.from({ length: trajectories }, (_, k) => k)]) {
    const t = await timedTurn(b.engine, { ...moved(i), kvSource: { url: holderUrl, backendId: "A" } });
    progress.tick("moved turns");
    const r = await timedTurn(c.engine, moved(i));
    progress.tick("moved turns");
    if (i === trajectories) continue; // the warm-up
    rows.push({ prompt: t.done.usage.promptTokens, transferTtftMs: t.ttftMs, recomputeTtftMs: r.ttftMs, pull: t.done.kvPull!, cachedTransfer: t.done.usage.cachedTokens, sameReply: t.done.text === r.done.text });
  }
  await holder.stop();
  for (const x of [b, c]) await x.executor.dispose();

  const median = (xs: number[]) => [...xs].sort((p, q) => p - q)[Math.floor(xs.length / 2)]!;
  const bytes = rows.reduce((s, r) => s + r.pull.bytes, 0);
  const pullMs = rows.reduce((s, r) => s + r.pull.ms, 0);
  const copyBytesPerS = memoryBandwidth((line) => note("migration", line));
  const bytesPerTrajectory = bytes / trajectories;
  const summary = {
    bench: "migration",
    model: spec.modelId,
    weights: precision,
    trajectories,
    promptTokensMedian: median(rows.map((r) => r.prompt)),
    outcomes: countBy(rows.map((r) => r.pull.outcome)),
    ttftTransferMsMedian: round(median(rows.map((r) => r.transferTtftMs)), 1),
    ttftRecomputeMsMedian: round(median(rows.map((r) => r.recomputeTtftMs)), 1),
    ttftSpeedupTransferVsRecompute: round(median(rows.map((r) => r.recomputeTtftMs)) / median(rows.map((r) => r.transferTtftMs)), 2),
    cachedTokensAfterTransferMean: round(rows.reduce((s, r) => s + r.cachedTransfer, 0) / trajectories, 1),
    bytesMoved: bytes,
    bytesPerBlock: b.executor.blockIO.bytesPerBlock,
    pullMsMedian: round(median(rows.map((r) => r.pull.ms)), 1),
    pullGBs: round(bytes / 1e6 / pullMs, 3),
    memoryCopyGBs: round(copyBytesPerS / 1e9, 1),
    // A copy reads and writes every byte once: 2 x bytes over the read+write bandwidth.
    copyFloorMsPerTrajectory: round(((2 * bytesPerTrajectory) / copyBytesPerS) * 1000, 2),
    sameReplies: rows.every((r) => r.sameReply),
  };
  if (!o.json) {
    note("migration", `moved ${trajectories} trajectories of ~${summary.promptTokensMedian} tokens: TTFT ${summary.ttftTransferMsMedian} ms (transfer) vs ${summary.ttftRecomputeMsMedian} ms (recompute): ${summary.ttftSpeedupTransferVsRecompute}x`);
    note("migration", `moved ${(bytes / 2 ** 20).toFixed(1)} MiB at ${summary.pullGBs} GB/s (memory copy ${summary.memoryCopyGBs} GB/s read+write: a floor of ${summary.copyFloorMsPerTrajectory} ms per trajectory)`);
  }
  return summary;
}

/** A turn through `engine.submit`, its TTFT measured from the call (a pull before the prefill included). */
function timedTurn(engine: Engine, req: GenerateRequest): Promise<{ done: DoneFrame; ttftMs: number }> {
  const t0 = performance.now();
  let ttftMs: number | undefined;
  return new Promise((resolve, reject) => {
    engine.submit(req, (f: Frame) => {
      if (f.type === "token" && ttftMs === undefined) ttftMs = performance.now() - t0;
      else if (f.type === "done") resolve({ done: f, ttftMs: ttftMs ?? performance.now() - t0 });
      else if (f.type === "error") reject(new Error(`${f.code}: ${f.message}`));
    });
  });
}

/** A turn on a backend process, over its HTTP API. */
async function remoteTurn(target: { url: string; secret: string }, req: GenerateRequest): Promise<DoneFrame> {
  for await (const f of generateFrames(target, req, { timeoutMs: 300_000 })) {
    if (f.type === "done") return f;
    if (f.type === "error") throw new Error(`${f.code}: ${f.message}`);
  }
  throw new Error("the backend ended the turn without a result");
}

/** A system prompt and a few tool-like exchanges, grown until about `target` tokens. */
function transcript(i: number, target: number, count: (text: string) => number): ChatMessage[] {
  const messages: ChatMessage[] = [{ role: "system", content: `You are agent ${i}. Work through the repository task ${i * 7919} step by step.` }, { role: "user", content: `Task ${i}: fix the failing build.` }];
  let k = 0;
  const total = () => count(messages.map((m) => m.content ?? "").join("\n"));
  while (total() < target - 300) {
    messages.push({ role: "assistant", content: `Step ${k}: reading src/module_${i}_${k}.ts.` });
    messages.push({ role: "user", content: `Observation ${k} for agent ${i}: ${Array.from({ length: 60 }, (_, j) => `line ${j} of file ${i}.${k} holds value ${(i * 31 + k * 17 + j * 7) % 997}`).join("; ")}.` });
    k++;
  }
  return messages;
}

function countBy(xs: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const x of xs) out[x] = (out[x] ?? 0) + 1;
  return out;
}
