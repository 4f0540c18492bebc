/**
 * Prefill-attention probe (issue 39): cpu executor time for the prefill shapes agent workloads
 * run, where attention's score tensors (queries x visible keys, materialized by onnxruntime op by
 * op) dominate past ~1,000 context tokens:
 * - one fresh prompt of 2,000 tokens, and one turn of 300 new tokens after 5,000, prefilled in
 *   steps of C tokens (the engine's `maxBatchTokens`; 512 by default): smaller steps score fewer
 *   keys at once (smaller tensors, closer to cache) but read the weights more often;
 * - 8 sequences' turns of 300 new tokens after 2,000 context tokens each, in one step (the
 *   8-trajectory run's shape: cpu-prefill-feeds.ts bundles them apart) and one step each.
 *
 *   AGENT_EDGE_CACHE_DIR=... npx tsx bench/probes/prefill-chunks.ts [int4|int8|fp32] [model dir]
 */
import { loadModel } from "../../gpu-backend/engine/load-model";
import { CpuExecutor } from "../../gpu-backend/model/executors/cpu-executor";
import type { StepSequence } from "../../gpu-backend/model/executors/executor";
import { weightsAt } from "../../gpu-backend/engine/weight-precision";

const model = await loadModel({ dir: process.argv[3] || undefined });
const at = weightsAt(model.checkpoint, "cpu", (process.argv[2] ?? "int4") as never, () => {});
const BLOCK = 16;
const blocksPerSeq = 400;
const exec = await CpuExecutor.create({ spec: model.spec, weights: model.weights, quantized: at.quantized, numBlocks: 8 * blocksPerSeq, blockSize: BLOCK });
const tableOf = (b: number) => Array.from({ length: blocksPerSeq }, (_, i) => b * blocksPerSeq + i);
const chunk = (seq: number, from: number, to: number): StepSequence => ({ tokenIds: Array.from({ length: to - from }, (_, j) => 100 + ((from + j) % 900)), startPos: from, blockTable: tableOf(seq), logits: "last" });

/** Median ms of `runs` repetitions of the steps (after one warm-up). */
async function median(steps: () => StepSequence[][], runs = 5): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i <= runs; i++) {
    const t0 = performance.now();
    for (const s of steps()) await exec.run(s);
    if (i > 0) times.push(performance.now() - t0);
  }
  return times.sort((a, b) => a - b)[Math.floor(times.length / 2)]!;
}
const inSteps = (from: number, to: number, size: number) => () => {
  const steps: StepSequence[][] = [];
  for (let p = from; p < to; p += size) steps.push([chunk(0, p, Math.min(to, p + size))]);
  return steps;
};

console.log(`${model.spec.modelId}, precision ${at.precision}: median ms (tokens/s)`);
for (const [name, from, to] of [["2,000-token prompt", 0, 2000], ["300 new tokens after 5,000", 5000, 5300]] as const) {
  const line: string[] = [];
  for (const size of [128, 256, 512, 1024, 2048]) {
    const ms = await median(inSteps(from, to, size));
    line.push(`steps of ${size}: ${ms.toFixed(0)} ms (${((to - from) / (ms / 1000)).toFixed(0)})`);
    console.log(`[probe] ${name}, ${line.at(-1)}`);
  }
  console.log(`${name}: ${line.join(" | ")}`);
}
const eight = (seq: number) => chunk(seq, 2000, 2300);
const together = await median(() => [Array.from({ length: 8 }, (_, s) => eight(s))], 3);
const alone = await median(() => Array.from({ length: 8 }, (_, s) => [eight(s)]), 3);
console.log(`8 x 300 new tokens after 2,000 each: one step ${together.toFixed(0)} ms (${(2400 / (together / 1000)).toFixed(0)}) | one step each ${alone.toFixed(0)} ms (${(2400 / (alone / 1000)).toFixed(0)})`);
await exec.dispose();
