/**
 * Attention probe (issue 39): onnxruntime's fused CPU attention (`com.microsoft.GroupQueryAttention`,
 * causal inside the kernel, past keys and values contiguous) against the cpu graph's prefill
 * attention (`prefillAttention` in graph/llama-graph.ts: FusedMatMul, mask Add, Softmax, MatMul)
 * for one sequence's chunk of Tp new tokens after Sp context tokens, the demo model's heads
 * (8 query, 2 key/value, 64 wide); the two alternate in one process. Prints the median ms of each
 * and the outputs' max |diff|.
 *
 *   npx tsx bench/probes/gqa-attention.ts [Tp] [Sp]
 */
import * as ort from "onnxruntime-node";
import { GraphBuilder } from "../../gpu-backend/model/graph/graph-builder";
import { DataType } from "../../gpu-backend/model/graph/onnx-proto";
const nh = 8, nkv = 2, hd = 64, G = nh / nkv;
const Tp = Number(process.argv[2] ?? 300), Sp = Number(process.argv[3] ?? 5000);
const rnd = (n: number, seed: number) => { let s = seed; return Float32Array.from({ length: n }, () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296 - 0.5)); };
const q = rnd(Tp * nh * hd, 1), k = rnd(Tp * nkv * hd, 2), v = rnd(Tp * nkv * hd, 3), pk = rnd(nkv * Sp * hd, 4), pv = rnd(nkv * Sp * hd, 5);
const scale = 1 / Math.sqrt(hd);
// GQA
const g = new GraphBuilder("gqa");
const Q = g.input("q", DataType.FLOAT, [1, Tp, nh * hd]), K = g.input("k", DataType.FLOAT, [1, Tp, nkv * hd]), V = g.input("v", DataType.FLOAT, [1, Tp, nkv * hd]);
const PK = g.input("pk", DataType.FLOAT, [1, nkv, Sp, hd]), PV = g.input("pv", DataType.FLOAT, [1, nkv, Sp, hd]);
const SL = g.input("sl", DataType.INT32, [1]), TL = g.input("tl", DataType.INT32, []);
const [o] = g.opN("GroupQueryAttention", [Q, K, V, PK, PV, SL, TL], 3, { domain: "com.microsoft", attributes: { num_heads: nh, kv_num_heads: nkv, scale: { float: scale } } });
g.output(o!, DataType.FLOAT, [1, Tp, nh * hd], "o");
const s1 = await ort.InferenceSession.create(g.encode(), { executionProviders: ["cpu"], logSeverityLevel: 3 });
// ours (flat, as llama-graph prefillAttention with a causal mask)
const h = new GraphBuilder("ours");
const q2 = h.input("q", DataType.FLOAT, [Tp, nh, hd]), k2 = h.input("k", DataType.FLOAT, [Tp, nkv, hd]), v2 = h.input("v", DataType.FLOAT, [Tp, nkv, hd]);
const pk2 = h.input("pk", DataType.FLOAT, [nkv, Sp, hd]), pv2 = h.input("pv", DataType.FLOAT, [nkv, Sp, hd]), mask = h.input("mask", DataType.FLOAT, [1, 1, Tp, Sp + Tp]);
const q4 = h.op("Transpose", [h.op("Reshape", [h.op("Mul", [q2, h.scalar(scale)]), h.int64s([-1, nkv, G, hd])])], { attributes: { perm: [1, 2, 0, 3] } });
const q3 = h.op("Reshape", [q4, h.int64s([nkv, -1, hd])]);
const kAll = h.op("Concat", [pk2, h.op("Transpose", [k2], { attributes: { perm: [1, 0, 2] } })], { attributes: { axis: 1 } });
const vAll = h.op("Concat", [pv2, h.op("Transpose", [v2], { attributes: { perm: [1, 0, 2] } })], { attributes: { axis: 1 } });
const sc = h.op("FusedMatMul", [q3, kAll], { domain: "com.microsoft", attributes: { transB: 1 } });
const masked = h.op("Add", [h.op("Reshape", [sc, h.int64s([nkv, G, Tp, Sp + Tp])]), mask]);
const probs = h.op("Reshape", [h.op("Softmax", [masked], { attributes: { axis: -1 } }), h.int64s([nkv, G * Tp, Sp + Tp])]);
const out = h.op("Reshape", [h.op("MatMul", [probs, vAll]), h.int64s([nkv, G, Tp, hd])]);
h.output(h.op("Reshape", [h.op("Transpose", [out], { attributes: { perm: [2, 0, 1, 3] } }), h.int64s([Tp, nh * hd])]), DataType.FLOAT, [Tp, nh * hd], "o");
const s2 = await ort.InferenceSession.create(h.encode(), { executionProviders: ["cpu"], logSeverityLevel: 3 });
const m = new Float32Array(Tp * (Sp + Tp)).fill(-1e30);
for (let i = 0; i < Tp; i++) m.fill(0, i * (Sp + Tp), i * (Sp + Tp) + Sp + i + 1);
const f1 = { q: new ort.Tensor("float32", q, [1, Tp, nh * hd]), k: new ort.Tensor("float32", k, [1, Tp, nkv * hd]), v: new ort.Tensor("float32", v, [1, Tp, nkv * hd]), pk: new ort.Tensor("float32", pk, [1, nkv, Sp, hd]), pv: new ort.Tensor("float32", pv, [1, nkv, Sp, hd]), sl: new ort.Tensor("int32", Int32Array.of(Sp + Tp - 1), [1]), tl: new ort.Tensor("int32", Int32Array.of(Sp + Tp), []) };
const f2 = { q: new ort.Tensor("float32", q, [Tp, nh, hd]), k: new ort.Tensor("float32", k, [Tp, nkv, hd]), v: new ort.Tensor("float32", v, [Tp, nkv, hd]), pk: new ort.Tensor("float32", pk, [nkv, Sp, hd]), pv: new ort.Tensor("float32", pv, [nkv, Sp, hd]), mask: new ort.Tensor("float32", m, [1, 1, Tp, Sp + Tp]) };
const t: number[][] = [[], []]; let a!: Float32Array, b!: Float32Array;
for (let r = 0; r < 8; r++) {
  let t0 = performance.now(); a = (await s1.run(f1)).o!.data as Float32Array; t[0]!.push(performance.now() - t0);
  t0 = performance.now(); b = (await s2.run(f2)).o!.data as Float32Array; t[1]!.push(performance.now() - t0);
}
const med = (x: number[]) => x.slice(2).sort((p, q) => p - q)[3]!;
let d = 0; for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i]! - b[i]!));
console.log(`Tp ${Tp} Sp ${Sp}: GQA ${med(t[0]!).toFixed(1)} ms, ours ${med(t[1]!).toFixed(1)} ms (${(med(t[1]!) / med(t[0]!)).toFixed(2)}x), max |diff| ${d.toExponential(2)}`);
