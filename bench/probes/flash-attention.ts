/**
 * Flash attention probe (issue 39): onnxruntime's CPU `com.microsoft.MultiHeadAttention` takes
 * MLAS's flash-attention kernel (score tiles kept in L2, never written out) when it has no mask,
 * no past and is not unidirectional. A prefill chunk's queries see ALL of their context keys (the
 * causal mask only matters among the chunk's own new keys), so the context part could take that
 * kernel. This probe times it against the cpu graph's unfused ops on the same unmasked work, the
 * demo model's heads (2 KV heads x 4 query heads, 64 wide) with the 4 query heads of a KV head as
 * 4T query rows of one head (num_heads 1, batch = KV heads):
 *   unfused  FusedMatMul q k^T (alpha = scale), Softmax, MatMul p v
 *   flash    MultiHeadAttention, num_heads 1, scale
 * Prints median wall ms of each (alternating runs in one process) and the outputs' max |diff|.
 *
 *   npx tsx bench/probes/flash-attention.ts [threads]
 */
import * as ort from "onnxruntime-node";
import { GraphBuilder } from "../../gpu-backend/model/graph/graph-builder";
import { DataType } from "../../gpu-backend/model/graph/onnx-proto";

const threads = Number(process.argv[2] ?? 2);
const nkv = 2, G = 4, hd = 64;
const scale = 1 / Math.sqrt(hd);
const f32 = DataType.FLOAT;
const options = { executionProviders: ["cpu"], intraOpNumThreads: threads, logSeverityLevel: 3, extra: { session: { intra_op: { allow_spinning: "1" }, force_spinning_stop: "1" } } } as ort.InferenceSession.SessionOptions;
const rnd = (n: number, seed: number) => {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296 - 0.5) * 2);
};

for (const [T, S] of [[512, 512], [512, 2048], [300, 1300], [300, 5300]] as const) {
  const rows = G * T;
  const unfused = new GraphBuilder("unfused");
  {
    const g = unfused;
    const scores = g.op("FusedMatMul", [g.input("q", f32, [nkv, rows, hd]), g.input("k", f32, [nkv, S, hd])], { domain: "com.microsoft", attributes: { transB: 1, alpha: { float: scale } } });
    g.output(g.op("MatMul", [g.op("Softmax", [scores], { attributes: { axis: -1 } }), g.input("v", f32, [nkv, S, hd])]), f32, [nkv, rows, hd], "o");
  }
  const flash = new GraphBuilder("flash");
  {
    const g = flash;
    const q = g.input("q", f32, [nkv, rows, hd]), k = g.input("k", f32, [nkv, S, hd]), v = g.input("v", f32, [nkv, S, hd]);
    g.output(g.op("MultiHeadAttention", [q, k, v], { domain: "com.microsoft", attributes: { num_heads: 1, scale: { float: scale } } }), f32, [nkv, rows, hd], "o");
  }
  const sessions = [await ort.InferenceSession.create(unfused.encode(), options), await ort.InferenceSession.create(flash.encode(), options)];
  const feeds = { q: new ort.Tensor("float32", rnd(nkv * rows * hd, 1), [nkv, rows, hd]), k: new ort.Tensor("float32", rnd(nkv * S * hd, 2), [nkv, S, hd]), v: new ort.Tensor("float32", rnd(nkv * S * hd, 3), [nkv, S, hd]) };
  const times: number[][] = [[], []];
  const outs: Float32Array[] = [];
  for (let r = 0; r < 9; r++)
    for (let i = 0; i < 2; i++) {
      const t0 = performance.now();
      outs[i] = (await sessions[i]!.run(feeds)).o!.data as Float32Array;
      if (r > 0) times[i]!.push(performance.now() - t0);
    }
  const med = (x: number[]) => x.sort((a, b) => a - b)[x.length >> 1]!;
  let diff = 0;
  for (let i = 0; i < outs[0]!.length; i++) diff = Math.max(diff, Math.abs(outs[0]![i]! - outs[1]![i]!));
  const [u, f] = [med(times[0]!), med(times[1]!)];
  console.log(`${T} queries x ${S} keys, a layer: unfused ${u.toFixed(2)} ms, flash ${f.toFixed(2)} ms (${(u / f).toFixed(2)}x), max |diff| ${diff.toExponential(1)}`);
  for (const s of sessions) await s.release();
}
