import { serve, type ServerType } from "@hono/node-server";
import type { AddressInfo } from "node:net";
import type { ChatMessage, DoneFrame, Frame, GenerateRequest, KvPullReport } from "../protocol/messages";
import { Engine } from "../gpu-backend/engine/engine";
import { loadModel } from "../gpu-backend/engine/load-model";
import { defaultPrecision, precisionRefusal, quantBits, quantizedWeightsFor, type WeightPrecision } from "../gpu-backend/engine/weight-precision";
import { BlockPool } from "../gpu-backend/kv/block-pool";
import { CpuExecutor } from "../gpu-backend/model/executors/cpu-executor";
import { prefillWastePerToken } from "../gpu-backend/model/graph/decoder-spec";
import { createBackendApp } from "../gpu-backend/server/app";
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
 * everything (today's move). Three real engines with their own pools; A serves over a loopback
 * HTTP server; the moves run one at a time, B then C per trajectory, so each TTFT is measured
 * alone. Reports TTFT after the move (transfer vs recompute, medians and the ratio), bytes moved,
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
  const numBlocks = trajectories * Math.ceil((targetTokens + 512) / BLOCK_SIZE) + 64;

  const start = async (id: string): Promise<{ engine: Engine; executor: CpuExecutor; server?: ServerType; url?: string }> => {
    note("migration", `backend ${id}: ${numBlocks} KV blocks, ${precision} weights`);
    const executor = await CpuExecutor.create({ spec, weights: model.weights, quantized: cache?.weights ?? null, numBlocks, blockSize: BLOCK_SIZE });
    const engine = new Engine({
      executor,
      pool: new BlockPool({ numBlocks, blockSize: BLOCK_SIZE }),
      codec,
      modelId: spec.modelId,
      scheduler: { maxBatchTokens: 512, maxRunningSequences: 16, blockSize: BLOCK_SIZE, prefillWastePerToken: prefillWastePerToken(spec) },
      enablePrefixCache: true,
      backendId: id,
      transfer: { secret: SECRET, timeoutMs: 60_000 },
    });
    return { engine, executor };
  };
  const a = await start("A");
  const app = createBackendApp({ engine: a.engine, secret: SECRET, backendId: "A" });
  const server = await new Promise<ServerType>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () => resolve(s));
  });
  const holderUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const b = await start("B (transfer)");
  const c = await start("C (recompute)");
  cache?.save();

  // Distinct transcripts (no shared prefix) of about targetTokens tokens each.
  const transcripts: ChatMessage[][] = Array.from({ length: trajectories }, (_, i) => transcript(i, targetTokens, (t) => codec.encode(t).length));
  const sampling = { maxTokens: 8, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true };

  const progress = new Progress("migration", trajectories * 3);
  const firsts: DoneFrame[] = [];
  for (const [i, messages] of transcripts.entries()) {
    firsts.push((await timedTurn(a.engine, { requestId: `a-${i}`, mode: "full", messages, sampling })).done);
    progress.tick("first turns on A");
  }
  const moved = (i: number): GenerateRequest => ({
    requestId: `m-${i}`,
    mode: "full",
    messages: [...transcripts[i]!, firsts[i]!.message, { role: "user", content: `Trajectory ${i}: now summarize.` }],
    sampling,
  });
  const rows: { prompt: number; transferTtftMs: number; recomputeTtftMs: number; pull: KvPullReport; cachedTransfer: number; sameReply: boolean }[] = [];
  for (let i = 0; i < trajectories; i++) {
    const t = await timedTurn(b.engine, { ...moved(i), kvSource: { url: holderUrl, backendId: "A" } });
    progress.tick("moved turns");
    const r = await timedTurn(c.engine, moved(i));
    progress.tick("moved turns");
    rows.push({ prompt: t.done.usage.promptTokens, transferTtftMs: t.ttftMs, recomputeTtftMs: r.ttftMs, pull: t.done.kvPull!, cachedTransfer: t.done.usage.cachedTokens, sameReply: t.done.text === r.done.text });
  }
  server.close();
  for (const x of [a, b, c]) await x.executor.dispose();

  const median = (xs: number[]) => [...xs].sort((p, q) => p - q)[Math.floor(xs.length / 2)]!;
  const bytes = rows.reduce((s, r) => s + r.pull.bytes, 0);
  const pullMs = rows.reduce((s, r) => s + r.pull.ms, 0);
  const copyGBs = memoryBandwidth((line) => note("migration", line));
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
    memoryCopyGBs: round(copyGBs, 1),
    copyFloorMsPerTrajectory: round(bytesPerTrajectory / (copyGBs * 1e6), 2),
    sameReplies: rows.every((r) => r.sameReply),
  };
  if (!o.json) {
    note("migration", `moved ${trajectories} trajectories of ~${summary.promptTokensMedian} tokens: TTFT ${summary.ttftTransferMsMedian} ms (transfer) vs ${summary.ttftRecomputeMsMedian} ms (recompute): ${summary.ttftSpeedupTransferVsRecompute}x`);
    note("migration", `moved ${(bytes / 2 ** 20).toFixed(1)} MiB at ${summary.pullGBs} GB/s (memory copy ${summary.memoryCopyGBs} GB/s: a floor of ${summary.copyFloorMsPerTrajectory} ms per trajectory)`);
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
