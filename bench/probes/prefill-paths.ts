/**
 * Prefill-path probe (issue 39): cpu executor step times with the quantized linears' prefill
 * rows on the integer GEMM (`rowGroups`, graph/linear.ts) against every row on MatMulNBits, in one
 * process, the two executors interleaved step by step.
 *
 *   AGENT_EDGE_CACHE_DIR=... npx tsx bench/probes/prefill-paths.ts [int8|int4] [model dir] [threads]
 */
import { loadModel } from "../../gpu-backend/engine/load-model";
import { CpuExecutor } from "../../gpu-backend/model/executors/cpu-executor";
import type { StepSequence } from "../../gpu-backend/model/executors/executor";
import { weightsAt } from "../../gpu-backend/engine/weight-precision";

const model = await loadModel({ dir: process.argv[3] || undefined });
const at = weightsAt(model.checkpoint, "cpu", (process.argv[2] ?? "int4") as never, () => {});
const threads = Number(process.argv[4] ?? 0) || undefined;
const BLOCK = 16;
const blocksPerSeq = 160;
const make = (split: boolean) => CpuExecutor.create({ spec: model.spec, weights: model.weights, quantized: at.quantized, integerPrefill: split, numBlocks: 8 * blocksPerSeq, blockSize: BLOCK, threads });
const paths = [await make(false), await make(true)];
const tableOf = (b: number) => Array.from({ length: blocksPerSeq }, (_, i) => b * blocksPerSeq + i);

async function medians(steps: () => StepSequence[]): Promise<number[]> {
  const times: number[][] = paths.map(() => []);
  for (let i = 0; i < 10; i++) {
    for (const [p, ex] of paths.entries()) {
      const t0 = performance.now();
      await ex.run(steps());
      if (i >= 2) times[p]!.push(performance.now() - t0);
    }
  }
  return times.map((t) => t.sort((a, b) => a - b)[Math.floor(t.length / 2)]!);
}

console.log(`${model.spec.modelId}, precision ${at.precision}, threads ${threads ?? "all"}: MatMulNBits everywhere | prefill rows on the integer GEMM`);
const cases: [string, () => StepSequence[]][] = [
  ["decode, batch 1, context 1000", () => [{ tokenIds: [100], startPos: 1000, blockTable: tableOf(0), logits: "argmax" }]],
  ["decode, batch 8, context 1000", () => Array.from({ length: 8 }, (_, b) => ({ tokenIds: [100], startPos: 1000, blockTable: tableOf(b), logits: "argmax" as const }))],
  ["prefill 64 at 1000", () => [{ tokenIds: Array.from({ length: 64 }, (_, j) => 100 + j), startPos: 1000, blockTable: tableOf(0), logits: "last" }]],
  ["prefill 300 at 1000", () => [{ tokenIds: Array.from({ length: 300 }, (_, j) => 100 + j), startPos: 1000, blockTable: tableOf(0), logits: "last" }]],
  ["prefill 512 at 0", () => [{ tokenIds: Array.from({ length: 512 }, (_, j) => 100 + j), startPos: 0, blockTable: tableOf(0), logits: "last" }]],
];
for (const [name, steps] of cases) {
  const [base, split] = await medians(steps);
  console.log(`${name.padEnd(32)} ${base!.toFixed(1).padStart(7)} ms | ${split!.toFixed(1).padStart(7)} ms  (${(base! / split!).toFixed(2)}x)`);
}
for (const ex of paths) await ex.dispose();
