import * as ort from "onnxruntime-node";
import { CpuExecutor } from "../gpu-backend/model/executors/cpu-executor";
import { cudaProviderInstalled, webGpuAdapter } from "../gpu-backend/model/executors/device";
import type { Executor } from "../gpu-backend/model/executors/executor";
import { loadModel } from "../gpu-backend/engine/load-model";
import { note, Progress } from "./kit/progress";
import { round, table } from "./kit/report";

/**
 * `npm run bench -- executors [--quick] [--json] [--model DIR]`: prefill and decode tokens/s and
 * host <-> device bytes per decode step of every executor this machine can run, on the same
 * model, with the cpu executor as the baseline (ratios against it, same process).
 *
 * Executors: cpu; webgpu (onnxruntime-web on dawn.node) when a WebGPU adapter exists; cuda on
 * onnxruntime-node's CUDA provider when installed, else the same cuda executor on onnxruntime-node's
 * bundled WebGPU provider when an adapter exists (labelled `cuda@node-webgpu`). On a software
 * adapter (Mesa lavapipe) the GPU figures measure the code path, not a GPU.
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
  kvBytes: number;
  prefillVsCpu?: number;
  decodeBatch8VsCpu?: number;
}

const BLOCK = 16;
const CHUNK = 256;

export async function runExecutorBench(o: ExecutorBenchOptions): Promise<{ model: string; promptTokens: number; decodeSteps: number; executors: Record<string, ExecutorFigures> }> {
  const P = o.quick ? 256 : 1024;
  const D = o.quick ? 8 : 32;
  // Before the first session: onnxruntime-node fixes its log level then. The WebGPU stand-in of
  // the cuda executor would otherwise warn on every run that the (unfetched) cache outputs are copies.
  ort.env.logLevel = "error";
  const model = await loadModel({ dir: o.model, log: (l) => note("executors", l) });
  const { spec, weights } = model;
  const promptBlocks = Math.ceil(P / BLOCK);
  // Blocks: the prompt's, then per batch sequence a tail block range for its D decode tokens.
  const tailBlocks = Math.ceil((D + (P % BLOCK)) / BLOCK) + 1;
  const numBlocks = promptBlocks + 9 * tailBlocks + 1;

  const adapter = await webGpuAdapter().catch(() => undefined);
  const adapterName = adapter ? `${adapter.vendor} ${adapter.device || adapter.description}${adapter.software ? " (software)" : ""}` : "none";
  const targets: { name: string; adapter: string; create: () => Promise<Executor> }[] = [
    { name: "cpu", adapter: "cpu", create: () => CpuExecutor.create({ spec, weights, numBlocks, blockSize: BLOCK }) },
  ];
  if (adapter) {
    targets.push({
      name: "webgpu",
      adapter: adapterName,
      create: async () => (await import("../gpu-backend/model/executors/webgpu-executor")).WebGpuExecutor.create({ spec, weights, numBlocks, blockSize: BLOCK }),
    });
  }
  if (cudaProviderInstalled() || adapter) {
    const cuda = cudaProviderInstalled();
    targets.push({
      name: cuda ? "cuda" : "cuda@node-webgpu",
      adapter: cuda ? "onnxruntime-node CUDA provider" : `onnxruntime-node WebGPU provider, ${adapterName}`,
      create: async () => (await import("../gpu-backend/model/executors/cuda-executor")).CudaExecutor.create({ spec, weights, numBlocks, blockSize: BLOCK, executionProvider: cuda ? "cuda" : "webgpu" }),
    });
  }
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
  const rows = Object.entries(results).map(([name, r]) => [name, r.prefillTokPerS, r.decodeTokPerS, r.decodeBatch8TokPerS, r.h2dBytesPerDecodeStep, r.d2hBytesPerDecodeStep, r.prefillVsCpu ?? 1, r.decodeBatch8VsCpu ?? 1]);
  const head = ["executor", "prefill tok/s", "decode tok/s", "decode x8 tok/s", "up B/step", "down B/step", "prefill/cpu", "x8/cpu"];
  process.stderr.write(`\nprompt ${P} tokens, ${D} decode steps (bytes per step: the batch-1 decode)\n${table(head, rows)}\n\n`);
}
