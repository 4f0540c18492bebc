/**
 * Verify-row probe (issue 37, docs/engine.md "Speculative decoding"): on the cpu executor, the
 * logits of 8 greedy tokens computed by 8 one-token decode steps vs by one verify step of the same
 * 8 tokens (the prefill group), at a weight precision; prints the largest difference per row and
 * both argmaxes.
 *
 *   AGENT_EDGE_CACHE_DIR=... npx tsx bench/probes/verify-rows.ts [fp32|int8|int4]   (default: the cpu default, int8 for SmolLM2 Q4_1)
 *
 * 2026-12-07, SmolLM2 Q4_1, 1 thread: fp32 rows differ by 1.9e-5-3.0e-5 (the two attention
 * paths' reduction orders); int8 (MatMulNBits bits 8, accuracy_level 4) every row by 0.43-1.53
 * logits; int4 (bits 4, accuracy_level 4) row 0 by 1.7e-5 but rows 1-7 by 0.36-0.67. Argmaxes
 * were equal on this prompt. So the quantized products' results depend on the product's rows
 * (M = k+1 in a verify step, 1 + a dummy row in a decode step), not only on the row itself: the
 * cause of the bench's differing greedy replies at int8 (docs/benchmarks.md, Speculative decoding).
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
const mk = () => CpuExecutor.create({ spec: model.spec, weights: model.weights, quantized: at.quantized, numBlocks: 64, blockSize: 16, threads: 1 });
const ex = await mk();
const P = model.codec.encode(model.codec.render({ messages: [{ role: "user", content: "Repeat exactly: {\"id\": \"call_8f3a2c91\", \"path\": \"/srv/app/config/settings.yaml\", \"retries\": 3}" }], tools: [], addGenerationPrompt: true }));
const table = Array.from({ length: 64 }, (_, i) => i);
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
// Verify: one step with [P.last, gen0..gen6] at startPos P.length-1 (rewrites the same slots).
const r = await ex.run([{ tokenIds: [P.at(-1)!, ...gen.slice(0, 7)], startPos: P.length - 1, blockTable: table, logits: "all" }]);
const all = r.logits[0]!;
for (let i = 0; i < 8; i++) {
  const row = all.subarray(i * V, (i + 1) * V);
  let maxd = 0;
  for (let j = 0; j < V; j++) maxd = Math.max(maxd, Math.abs(row[j]! - rowsDecode[i]![j]!));
  console.log(`row ${i}: max |verify - decode| = ${maxd.toExponential(2)} argmax ${argmax(row)} vs ${argmax(rowsDecode[i]!)}`);
}
await ex.dispose();
