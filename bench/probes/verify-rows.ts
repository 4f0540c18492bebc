/**
 * Verify-row probe (issue 37, docs/engine.md "Speculative decoding"): on the cpu executor, the
 * logits of 8 greedy tokens computed by 8 one-token decode steps vs by one step of the same 8
 * tokens, as a verify run (`verify: true`: the decode group, each row attended on its own) and as
 * a prefill chunk (the prefill group, one flat product), at a weight precision; then the first
 * token decoded as one row of a step of 8 sequences whose neighbours have longer contexts (one of
 * them verifying a draft), against it decoded alone.
 *
 *   AGENT_EDGE_CACHE_DIR=... npx tsx bench/probes/verify-rows.ts [fp32|int8|int4]   (default: the cpu default, int8 for SmolLM2 Q4_1)
 *
 * 2026-12-07, SmolLM2 Q4_1, 1 thread (and 2): the verify run's rows equal the decode steps' bit for
 * bit at fp32, int8 and int4, and so does the batched row. The prefill chunk's rows differ by
 * 1.7e-5-3.3e-5 at fp32, 0.39-1.5 logits at int8 and 0.34-0.84 at int4 (the two attention paths
 * sum in other orders; MatMulNBits' int8 activations, quantized per block of 32, turn 1e-5 into
 * other quantization steps). Before the decode group took verify runs, a decode row beside a
 * longer neighbour also differed (by up to 0.7 at int8): the padding sat between its past and its
 * own column, which moved the softmax's vector lanes.
 */
import { loadModel } from "../../gpu-backend/engine/load-model";
import { CpuExecutor } from "../../gpu-backend/model/executors/cpu-executor";
import { argmax } from "../../gpu-backend/engine/sampler";
import { weightsAt } from "../../gpu-backend/engine/weight-precision";

const precision = process.argv[2];
const model = await loadModel({ dir: "smollm2" });
const at = weightsAt(model.checkpoint, "cpu", precision as never, () => {});
console.log("precision", at.precision);
const V = model.spec.vocabSize;
const mk = () => CpuExecutor.create({ spec: model.spec, weights: model.weights, quantized: at.quantized, numBlocks: 32, blockSize: 16, threads: 1 });
const ex = await mk();
const P = model.codec.encode(model.codec.render({ messages: [{ role: "user", content: "Repeat exactly: {\"id\": \"call_8f3a2c91\", \"path\": \"/srv/app/config/settings.yaml\", \"retries\": 3}" }], tools: [], addGenerationPrompt: true }));
const table = Array.from({ length: 16 }, (_, i) => i);
// Prefill P, all but last token.
await ex.run([{ tokenIds: P.slice(0, -1), startPos: 0, blockTable: table, logits: "none" }]);
// Decode 8 tokens one by one, keeping rows.
const rowsDecode: Float32Array[] = [];
let tok = P.at(-1)!;
const gen: number[] = [];
for (let i = 0; i < 8; i++) {
  const r = await ex.run([{ tokenIds: [tok], startPos: P.length - 1 + i, blockTable: table, logits: "last" }]);
  rowsDecode.push(r.logits[0]!);
  tok = argmax(r.logits[0]!);
  gen.push(tok);
}
const maxDiff = (a: Float32Array, b: Float32Array) => {
  let d = 0;
  for (let j = 0; j < V; j++) d = Math.max(d, Math.abs(a[j]! - b[j]!));
  return d;
};
// Verify: one step with [P.last, gen0..gen6] at startPos P.length-1 (rewrites the same slots), as a
// verify run (the decode group) and as a prefill chunk (the prefill group), for comparison.
for (const verify of [true, false]) {
  const r = await ex.run([{ tokenIds: [P.at(-1)!, ...gen.slice(0, 7)], startPos: P.length - 1, blockTable: table, logits: "all", verify }]);
  const all = r.logits[0]!;
  const diffs = rowsDecode.map((d, i) => maxDiff(all.subarray(i * V, (i + 1) * V), d));
  const argmaxesEqual = rowsDecode.every((d, i) => argmax(all.subarray(i * V, (i + 1) * V)) === argmax(d));
  console.log(`${verify ? "verify run (decode group)" : "prefill chunk (prefill group)"}: max |step - decode| per row ${diffs.map((d) => d.toExponential(1)).join(" ")}; argmaxes ${argmaxesEqual ? "equal" : "DIFFER"}`);
}
// Batching alone: the first decode token again, as row `at` of a step of 8 sequences (the others:
// a longer context over other blocks, one of them verifying a 5-token draft), against the same
// token decoded alone.
const other = Array.from({ length: 16 }, (_, i) => 16 + i);
for (const at of [0, 1, 3, 7]) {
  const seqs = Array.from({ length: 8 }, (_, i) =>
    i === at
      ? { tokenIds: [P.at(-1)!], startPos: P.length - 1, blockTable: table, logits: "last" as const }
      : { tokenIds: i === (at + 1) % 8 ? [0, 1, 2, 3, 4, 5] : [0], startPos: P.length + 40 + i, blockTable: other, logits: "none" as const, verify: true },
  );
  const row = (await ex.run(seqs)).logits[at]!;
  console.log(`batch of 8 with longer neighbours, row ${at}: max |batched - alone| = ${maxDiff(row, rowsDecode[0]!).toExponential(2)}`);
}
await ex.dispose();
