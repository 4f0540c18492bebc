import * as ort from "onnxruntime-node";
import { createExecutor } from "../gpu-backend/model/executors/create-executor";
import { cudaProviderInstalled, webGpuAdapter } from "../gpu-backend/model/executors/device";
import { executorLabel, type Executor, type ExecutorChoice } from "../gpu-backend/model/executors/executor";
import { loadModel } from "../gpu-backend/engine/load-model";
import { note, Progress } from "./kit/progress";
import { round, table } from "./kit/report";

/**
 * `npm run bench -- executors [--quick] [--json] [--model DIR]`: prefill and decode tokens/s and
 * host <-> device bytes per decode step of every executor this machine can run, on the same
 * model, with the cpu executor as the baseline (ratios against it, same process).
 *
 * Executors (`executorLabel`): cpu; with a WebGPU adapter, the device pool on onnxruntime-node's
 * WebGPU provider and on onnxruntime-web's, and the host pool on onnxruntime-node's WebGPU
 * provider; the host pool on CUDA when onnxruntime's CUDA provider is installed. On a software
 * adapter (Mesa lavapipe) the GPU figures measure the code path, not a GPU.
 *
 * Bytes per decode step (`bytesUpPerStep`, `bytesDownPerStep`) are counted by each executor from
 * the host tensors it feeds and fetches, for one decode step of one sequence at each of
 * `contexts` (a short one and the prompt's length): a device pool's stay flat but for the block
 * table (4 bytes per block); a host pool's grow with the context.
 *
 * Workload: one prompt of P tokens prefilled in chunks of 256 (the scheduler's default batch
 * budget); decode D steps of 1 sequence, then D steps of 8 sequences sharing the prompt's blocks
 * (each with its own tail), greedy ("argmax": no logits fetched).
 */
export interface ExecutorBenchOptions {
  quick: boolean;
  model: string | undefined;
}

export interface ExecutorFigures {
  adapter: string;
  createMs: number;
  prefillTokPerS: number;
  decodeTokPerS: number;
  decodeBatch8TokPerS: number;
  h2dBytesPerDecodeStep: number;
  d2hBytesPerDecodeStep: number;
  /** The contexts (tokens in the pool) of the per-step byte counts below, short then long. */
  contexts: number[];
  bytesUpPerStep: number[];
  bytesDownPerStep: number[];
  kvBytes: number;
  prefillVsCpu?: number;
  decodeBatch8VsCpu?: number;
}

const BLOCK = 16;
const CHUNK = 256;

export async function runExecutorBench(o: ExecutorBenchOptions): Promise<{ model: string; promptTokens: number; decodeSteps: number; executors: Record<string, ExecutorFigures> }> {
  const P = o.quick ? 256 : 1024;
  const D = o.quick ? 8 : 32;
  // Before the first session: onnxruntime-node fixes its log level then.
  ort.env.logLevel = "error";
  const model = await loadModel({ dir: o.model, log: (l) => note("executors", l) });
  const { spec, weights } = model;
  const promptBlocks = Math.ceil(P / BLOCK);
  // Blocks: the prompt's, then per batch sequence a tail block range for its D decode tokens.
  const tailBlocks = Math.ceil((D + (P % BLOCK)) / BLOCK) + 1;
  const SHORT = 20;
  const shortBlocks = Math.ceil((SHORT + 1) / BLOCK);
  const numBlocks = promptBlocks + 9 * tailBlocks + shortBlocks + 1;

  const adapter = await webGpuAdapter().catch(() => undefined);
  const adapterName = adapter ? `${adapter.vendor} ${adapter.device || adapter.description}${adapter.software ? " (software)" : ""}` : "none";
  const choices: ExecutorChoice[] = [{ kind: "cpu", provider: "node-cpu" }];
  if (adapter) choices.push({ kind: "device-pool", provider: "node-webgpu" }, { kind: "device-pool", provider: "web-webgpu" }, { kind: "host-pool", provider: "node-webgpu" });
  if (cudaProviderInstalled()) choices.push({ kind: "host-pool", provider: "node-cuda" });
  const targets = choices.map((c) => ({
    name: executorLabel(c),
    adapter: c.provider === "node-cpu" ? "cpu" : c.provider === "node-cuda" ? "onnxruntime-node CUDA provider" : adapterName,
    create: (): Promise<Executor> => createExecutor({ ...c, spec, weights, numBlocks, blockSize: BLOCK }),
  }));
  if (!adapter) note("executors", "no WebGPU adapter: only cpu (run scripts/install-webgpu-deps.sh for lavapipe)");

  const prompt = Array.from({ length: P }, (_, i) => 100 + ((i * 7919) % 5000));
  const promptTable = Array.from({ length: promptBlocks }, (_, i) => i);
  const tableOf = (seq: number) => {
    // The prompt's full blocks shared; the partial last block and the decode tokens in this sequence's own blocks.
    const shared = Math.floor(P / BLOCK);
    const own = Array.from({ length: tailBlocks }, (_, j) => promptBlocks + seq * tailBlocks + j);
    return [...promptTable.slice(0, shared), ...own];
  };
  const results: Record<string, ExecutorFigures> = {};
  const progress = new Progress("executors", targets.length * (Math.ceil(P / CHUNK) + 2 * D));

  for (const t of targets) {
    let c0 = performance.now();
    const exec = await t.create();
    const createMs = performance.now() - c0;
    note("executors", `${t.name}: created in ${(createMs / 1000).toFixed(1)} s`);
    try {
      // Warm-up (shader compilation, allocator): one small prefill and one decode step, not timed.
      await exec.run([{ tokenIds: prompt.slice(0, 32), startPos: 0, blockTable: promptTable, logits: "argmax" }]);
      await exec.run([{ tokenIds: [prompt[32]!], startPos: 32, blockTable: promptTable, logits: "argmax" }]);

      // Prefill: the prompt in CHUNK-token steps into sequence 0's table (its partial block is its own).
      const table0 = tableOf(0);
      c0 = performance.now();
      for (let from = 0; from < P; from += CHUNK) {
        const to = Math.min(P, from + CHUNK);
        await exec.run([{ tokenIds: prompt.slice(from, to), startPos: from, blockTable: table0, logits: to === P ? "argmax" : "none" }]);
        progress.tick(`${t.name} prefill`);
      }
      const prefillMs = performance.now() - c0;
      // Every batch sequence gets the prompt's partial last block into its own table (one small step each).
      const partial = P % BLOCK;
      for (let s = 1; s < 9 && partial > 0; s++) {
        await exec.run([{ tokenIds: prompt.slice(P - partial), startPos: P - partial, blockTable: tableOf(s), logits: "none" }]);
      }

      // Decode, batch 1.
      let next = 1000;
      const h0 = exec.transfer.hostToDeviceBytes;
      const d0 = exec.transfer.deviceToHostBytes;
      c0 = performance.now();
      for (let i = 0; i < D; i++) {
        next = (await exec.run([{ tokenIds: [next], startPos: P + i, blockTable: table0, logits: "argmax" }])).argmax[0]!;
        progress.tick(`${t.name} decode x1`);
      }
      const decodeMs = performance.now() - c0;
      const h2d = (exec.transfer.hostToDeviceBytes - h0) / D;
      const d2h = (exec.transfer.deviceToHostBytes - d0) / D;
      // One decode step at a short context (a fresh sequence in its own blocks) and at the prompt's.
      const shortTable = Array.from({ length: shortBlocks }, (_, j) => numBlocks - 1 - j);
      await exec.run([{ tokenIds: prompt.slice(0, SHORT), startPos: 0, blockTable: shortTable, logits: "none" }]);
      const stepBytes = async (context: number, blockTable: number[]) => {
        const [u, d] = [exec.transfer.hostToDeviceBytes, exec.transfer.deviceToHostBytes];
        await exec.run([{ tokenIds: [7], startPos: context, blockTable, logits: "argmax" }]);
        return [exec.transfer.hostToDeviceBytes - u, exec.transfer.deviceToHostBytes - d] as const;
      };
      const atShort = await stepBytes(SHORT, shortTable);
      const atLong = await stepBytes(P + D, table0);

      // Decode, batch 8 (sequences 1..8 over the shared prompt blocks).
      const tokens = Array.from({ length: 8 }, (_, s) => 2000 + s);
      c0 = performance.now();
      for (let i = 0; i < D; i++) {
        const { argmax } = await exec.run(tokens.map((tok, s) => ({ tokenIds: [tok], startPos: P + i, blockTable: tableOf(s + 1), logits: "argmax" as const })));
        argmax.forEach((a, s) => (tokens[s] = a));
        progress.tick(`${t.name} decode x8`);
      }
      const batchMs = performance.now() - c0;

      results[t.name] = {
        adapter: t.adapter,
        createMs: Math.round(createMs),
        prefillTokPerS: round((P / prefillMs) * 1000, 2),
        decodeTokPerS: round((D / decodeMs) * 1000, 2),
        decodeBatch8TokPerS: round(((8 * D) / batchMs) * 1000, 2),
        h2dBytesPerDecodeStep: Math.round(h2d),
        d2hBytesPerDecodeStep: Math.round(d2h),
        contexts: [SHORT, P + D],
        bytesUpPerStep: [atShort[0], atLong[0]],
        bytesDownPerStep: [atShort[1], atLong[1]],
        kvBytes: exec.kvBytes,
      };
    } finally {
      await exec.dispose();
    }
  }
  const cpu = results.cpu!;
  for (const [name, r] of Object.entries(results)) {
    if (name === "cpu") continue;
    r.prefillVsCpu = round(r.prefillTokPerS / cpu.prefillTokPerS, 2);
    r.decodeBatch8VsCpu = round(r.decodeBatch8TokPerS / cpu.decodeBatch8TokPerS, 2);
  }
  printTable(results, P, D);
  return { model: spec.modelId, promptTokens: P, decodeSteps: D, executors: results };
}

function printTable(results: Record<string, ExecutorFigures>, P: number, D: number): void {
  const rows = Object.entries(results).map(([name, r]) => [name, r.prefillTokPerS, r.decodeTokPerS, r.decodeBatch8TokPerS, r.bytesUpPerStep.join(" / "), r.bytesDownPerStep.join(" / "), r.prefillVsCpu ?? 1, r.decodeBatch8VsCpu ?? 1]);
  const contexts = Object.values(results)[0]?.contexts.join(" / ") ?? "";
  const head = ["executor", "prefill tok/s", "decode tok/s", "decode x8 tok/s", `up B/step @${contexts}`, `down B/step @${contexts}`, "prefill/cpu", "x8/cpu"];
  process.stderr.write(`\nprompt ${P} tokens, ${D} decode steps (bytes: one decode step of one sequence at each context)\n${table(head, rows)}\n\n`);
}
