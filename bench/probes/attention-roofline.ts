/**
 * Attention roofline probe (issue 39): how close the cpu graph's prefill attention products run to
 * onnxruntime's best float32 GEMM rate on this CPU (a 512-cube MatMul, which measured faster than
 * 256- and 1,024-cubes on the 2-core EPYC), and what the mask and softmax passes cost. Each graph is the
 * op alone, its kernel time read from onnxruntime's profile (no output copied to JavaScript); the
 * shapes are the demo model's (2 KV heads, 4 query heads each, 64 wide) for a 512-token step at
 * 0 and 1,536 context tokens (the 2,000-token prompt's first and last steps) and a 300-token turn
 * after 5,000 (a trajectory's late turn):
 *   q k^T   FusedMatMul transB  [2, 4T, 64] x [2, S, 64]^T
 *   p v     MatMul              [2, 4T, S] x [2, S, 64]
 *   mask    Add                 [2, 4, T, S] + [1, 1, T, S]
 *   softmax Softmax             [2, 4, T, S] on the last axis
 * Prints median kernel ms over 8 runs and GFLOPS (products) or GB/s (read + written, mask and
 * softmax).
 *
 *   npx tsx bench/probes/attention-roofline.ts [threads]
 */
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import * as ort from "onnxruntime-node";
import { GraphBuilder } from "../../gpu-backend/model/graph/graph-builder";
import { DataType } from "../../gpu-backend/model/graph/onnx-proto";

const threads = Number(process.argv[2] ?? 2);
const RUNS = 8;

/** Median kernel ms of the graph's one heavy node over RUNS runs (after one warm-up). */
async function kernelMs(name: string, build: (g: GraphBuilder) => void, feeds: Record<string, number[]>): Promise<number> {
  const g = new GraphBuilder(name);
  build(g);
  const prefix = join(tmpdir(), `attention-roofline-${process.pid}-${name}`);
  const session = await ort.InferenceSession.create(g.encode(), {
    executionProviders: ["cpu"],
    intraOpNumThreads: threads,
    logSeverityLevel: 3,
    enableProfiling: true,
    profileFilePrefix: prefix,
    extra: { session: { intra_op: { allow_spinning: "1" }, force_spinning_stop: "1" } },
  } as ort.InferenceSession.SessionOptions);
  const inputs: Record<string, ort.Tensor> = {};
  for (const [k, dims] of Object.entries(feeds)) inputs[k] = new ort.Tensor("float32", new Float32Array(dims.reduce((a, b) => a * b, 1)).fill(0.01), dims);
  for (let i = 0; i <= RUNS; i++) await session.run(inputs);
  session.endProfiling();
  await session.release();
  // onnxruntime-node returns no file name: the profile is <prefix>_<date>.json.
  const file = join(tmpdir(), readdirSync(tmpdir()).find((f) => f.startsWith(`${basename(prefix)}_`) && f.endsWith(".json"))!);
  type Event = { cat?: string; name: string; dur: number; args?: { op_name?: string } };
  const events = JSON.parse(readFileSync(file, "utf8")) as Event[];
  rmSync(file, { force: true });
  const heavy = events.filter((e) => e.cat === "Node" && e.name.endsWith("_kernel_time") && e.args?.op_name !== "Identity").map((e) => e.dur / 1000);
  return heavy.slice(-RUNS).sort((a, b) => a - b)[RUNS / 2]!;
}

const f32 = DataType.FLOAT;
const peakN = 512;
const peak = await kernelMs("gemm", (g) => g.output(g.op("MatMul", [g.input("a", f32, [peakN, peakN]), g.input("b", f32, [peakN, peakN])]), f32, [peakN, peakN], "y"), { a: [peakN, peakN], b: [peakN, peakN] });
const peakGflops = (2 * peakN ** 3) / peak / 1e6;
console.log(`${threads} threads; MatMul [${peakN}, ${peakN}] x [${peakN}, ${peakN}]: ${peak.toFixed(1)} ms, ${peakGflops.toFixed(0)} GFLOPS (the rate to compare with)`);

for (const [label, T, S] of [["512 new at 0", 512, 512], ["512 new at 1,536", 512, 2048], ["300 new at 5,000", 300, 5300]] as const) {
  const rows = 4 * T;
  const flops = 2 * 2 * rows * S * 64;
  const scoreBytes = 2 * rows * S * 4;
  const qk = await kernelMs("qk", (g) => g.output(g.op("FusedMatMul", [g.input("q", f32, [2, rows, 64]), g.input("k", f32, [2, S, 64])], { domain: "com.microsoft", attributes: { transB: 1 } }), f32, [2, rows, S], "y"), { q: [2, rows, 64], k: [2, S, 64] });
  const pv = await kernelMs("pv", (g) => g.output(g.op("MatMul", [g.input("p", f32, [2, rows, S]), g.input("v", f32, [2, S, 64])]), f32, [2, rows, 64], "y"), { p: [2, rows, S], v: [2, S, 64] });
  const mask = await kernelMs("mask", (g) => g.output(g.op("Add", [g.input("s", f32, [2, 4, T, S]), g.input("m", f32, [1, 1, T, S])]), f32, [2, 4, T, S], "y"), { s: [2, 4, T, S], m: [1, 1, T, S] });
  const softmax = await kernelMs("softmax", (g) => g.output(g.op("Softmax", [g.input("s", f32, [2, 4, T, S])], { attributes: { axis: -1 } }), f32, [2, 4, T, S], "y"), { s: [2, 4, T, S] });
  const gflops = (ms: number) => `${((flops / ms / 1e6) | 0).toString()} GFLOPS (${((100 * flops) / ms / 1e6 / peakGflops).toFixed(0)}%)`;
  const gbs = (ms: number, bytes: number) => `${(bytes / ms / 1e6).toFixed(1)} GB/s`;
  console.log(
    `${label}, a layer: q k^T ${qk.toFixed(2)} ms ${gflops(qk)}, p v ${pv.toFixed(2)} ms ${gflops(pv)}, ` +
      `mask ${mask.toFixed(2)} ms ${gbs(mask, 2 * scoreBytes)}, softmax ${softmax.toFixed(2)} ms ${gbs(softmax, 2 * scoreBytes)}; ` +
      `products ${(((qk + pv) / (qk + pv + mask + softmax)) * 100).toFixed(0)}% of the four`,
  );
}
