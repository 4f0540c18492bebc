/**
 * Verify-row probe (issue 37, docs/engine.md "Speculative decoding"): on the cpu executor, the
 * logits of 8 greedy tokens computed by 8 one-token decode steps vs by one verify step of the same
 * 8 tokens (the prefill group), at a weight precision; prints the largest difference per row and
 * both argmaxes.
 *
 *   AGENT_EDGE_CACHE_DIR=... npx tsx bench/probes/verify-rows.ts [fp32|int8|int4]   (default: the cpu default, int8 for SmolLM2 Q4_1)
 *
 * It also decodes the first token as one row of a batch of 8 (batching alone, for comparison).
 *
 * 2026-12-07, SmolLM2 Q4_1, 1 thread: fp32 rows differ by 1.9e-5-3.0e-5 (the two attention
 * paths' reduction orders); int8 (MatMulNBits bits 8, accuracy_level 4) every row by 0.43-1.53
 * logits; int4 (bits 4, accuracy_level 4) row 0 by 1.7e-5 but rows 1-7 by 0.36-0.67. Argmaxes
 * were equal on this prompt. Batching alone is exact: the first token decoded as row 0, 1, 3 or 7
 * of a decode step of 8 sequences gives the logits of it decoded alone bit for bit (int4 and int8).
 * So the quantized products are row-invariant; what differs is attention: verify rows go through
 * the prefill group (one product of k+1 query rows), decode rows through the decode group (one
 * query row per product), and the two round differently at fp32 (~2e-5, even for row 0, whose
 * columns are the same); int8 activations, quantized per block of 32, turn that into other
 * quantization steps. This is why the bench's greedy replies differ at int8 (docs/benchmarks.md,
 * Speculative decoding): exactness needs verify rows attended like decode rows.
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
