/**
 * Step-cost probe (issue 37): wall time per cpu executor step on the trained SmolLM2 for a plain
 * decode step and for verify steps (the last token and a 7-token draft), at batch 1 and 8, at two
 * context lengths, with the verify rows in the decode group (`verify: true`, attended row by row)
 * and in the prefill group (`verify: false`, one flat product), in one process.
 *
 *   AGENT_EDGE_CACHE_DIR=... npx tsx bench/probes/decode-cost.ts [fp32|int8|int4] [threads]
 *
 * Prints median ms per step over 15 steps after 3 warmups; ratios in the last column are against
 * the plain decode step of the same batch and context.
 */
import { loadModel } from "../../gpu-backend/engine/load-model";
import { CpuExecutor } from "../../gpu-backend/model/executors/cpu-executor";
import type { StepSequence } from "../../gpu-backend/model/executors/executor";
import { weightsAt } from "../../gpu-backend/engine/weight-precision";

const model = await loadModel({ dir: "smollm2" });
const at = weightsAt(model.checkpoint, "cpu", process.argv[2] as never, () => {});
const threads = Number(process.argv[3] ?? 0) || undefined;
const BLOCK = 16;
const blocksPerSeq = 90;
const ex = await CpuExecutor.create({ spec: model.spec, weights: model.weights, quantized: at.quantized, numBlocks: 8 * blocksPerSeq, blockSize: BLOCK, threads });
const tableOf = (b: number) => Array.from({ length: blocksPerSeq }, (_, i) => b * blocksPerSeq + i);

async function median(steps: () => StepSequence[]): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < 18; i++) {
    const t0 = performance.now();
    await ex.run(steps());
    if (i >= 3) times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)]!;
}

console.log(`precision ${at.precision}, threads ${threads ?? "all"}`);
for (const context of [300, 1200]) {
  for (const batch of [1, 8]) {
    const seqs = (rows: number, verify: boolean) => () =>
      Array.from({ length: batch }, (_, b): StepSequence => ({ tokenIds: Array.from({ length: rows }, (_, j) => 100 + j), startPos: context, blockTable: tableOf(b), logits: rows > 1 ? "all" : "argmax", verify }));
    const decode = await median(seqs(1, false));
    const inDecode = await median(seqs(8, true));
    const inPrefill = await median(seqs(8, false));
    const f = (ms: number) => `${ms.toFixed(1)} ms (${(ms / decode).toFixed(2)}x)`;
    console.log(`context ${context}, batch ${batch}: decode ${decode.toFixed(1)} ms; verify 1+7 in the decode group ${f(inDecode)}, in the prefill group ${f(inPrefill)}`);
  }
}
await ex.dispose();
