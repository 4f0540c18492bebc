/**
 * Integer GEMM probe (issue 39): one linear product at prefill and decode shapes, by every CPU
 * path onnxruntime offers for quantized weights, timed in one process with the paths interleaved
 * (each round runs every path once), so the ratios hold on a noisy machine.
 *
 *   npx tsx bench/probes/int-gemm-probe.ts [threads]
 *
 * Paths: fp32 MatMul; MatMulNBits int4 and int8 at accuracy level 4 (int8 activations per block
 * of 32: the cpu executor's decode rows); DynamicQuantizeMatMul with per-column int8 weights (u8
 * activations per tensor x s8 weights: MLAS's integer GEMM); `integerProduct` (graph/linear.ts,
 * the cpu executor's int8/int4 prefill rows: the same GEMM with each activation row rotated and
 * quantized on its own) of the int4 blocks by each `IntegerKernel` (u8 x s8; u8 x s8 with 7-bit
 * activations) and of the int8 blocks.
 * Prints median ms per product over the rounds, the speed against fp32, and the output's error
 * against fp32 (RMS of the difference over RMS of the fp32 output).
 */
import { cpus } from "node:os";
import * as ort from "onnxruntime-node";
import { cpuFeatures } from "../kit/machine";
import { integerProduct, matMulNBits } from "../../gpu-backend/model/graph/linear";
import { concatTransposed } from "../../gpu-backend/model/graph/weight-layout";
import { packMatMulNBits, quantizeRows, type QuantBits } from "../../gpu-backend/model/quant/block-quant";
import { columnInt8 } from "../../gpu-backend/model/quant/column-int8";
import type { PackedWeight } from "../../gpu-backend/model/quant/quantized-weights";
import { GraphBuilder } from "../../gpu-backend/model/graph/graph-builder";
import { DataType } from "../../gpu-backend/model/graph/onnx-proto";

const threads = Number(process.argv[2] ?? 2);
const ROUNDS = 12;

/** Deterministic normal-ish values (sum of uniforms), scaled. */
function gaussian(n: number, seed: number, scale: number): Float32Array {
  let s = seed >>> 0;
  const next = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (next() + next() + next() + next() - 2) * scale;
  return out;
}

/** W [N, K] (out, in) block-quantized as the cpu executor quantizes it (`quant/block-quant.ts`). */
function packed(w: Float32Array, n: number, k: number, bits: QuantBits): PackedWeight {
  const q = quantizeRows(w, n, k, bits);
  return { bits, rows: n, cols: k, packed: packMatMulNBits(q), scales: q.scales };
}

async function session(build: (g: GraphBuilder, x: string) => string, k: number, n: number): Promise<ort.InferenceSession> {
  const g = new GraphBuilder("probe");
  const x = g.input("x", DataType.FLOAT, ["m", k]);
  g.output(build(g, x), DataType.FLOAT, ["m", n], "y");
  // Threads that spin after a run would take the cores from the next path's session: off (SPIN=1 keeps onnxruntime's default).
  const spin = process.env.SPIN === "1" ? {} : { extra: { session: { intra_op: { allow_spinning: "0" } } } };
  return ort.InferenceSession.create(g.encode(), { executionProviders: ["cpu"], intraOpNumThreads: threads, logSeverityLevel: 3, ...spin });
}

const shapes = [
  { name: "qkv 512 -> 1536", k: 512, n: 1536 },
  { name: "mlp up 512 -> 2816", k: 512, n: 2816 },
  { name: "mlp down 1408 -> 512", k: 1408, n: 512 },
];
const rows = [1, 64, 300, 512];

console.log(`int-gemm probe: ${threads} threads, ${ROUNDS} rounds, paths interleaved; ${cpus()[0]?.model ?? "cpu"} (${cpuFeatures()})`);
for (const shape of shapes) {
  const { k, n } = shape;
  const w = gaussian(n * k, 7, 0.05);
  const q4 = packed(w, n, k, 4);
  const q8 = packed(w, n, k, 8);
  // The same int8 codes and scales as integerProduct's, with activations quantized per tensor.
  const c8 = columnInt8(q8);
  const dq = (g: GraphBuilder, x: string) => g.op("DynamicQuantizeMatMul", [x, g.int8("b", c8.codes, [k, n]), g.weight("bs", c8.scales, [n])], { domain: "com.microsoft" });
  const paths: [string, ort.InferenceSession][] = [
    ["fp32 MatMul", await session((g, x) => g.op("MatMul", [x, g.weight("w", concatTransposed([w], k), [k, n])]), k, n)],
    ["int4 MatMulNBits acc4", await session((g, x) => matMulNBits(g, "w", x, q4), k, n)],
    ["int8 MatMulNBits acc4", await session((g, x) => matMulNBits(g, "w", x, q8), k, n)],
    ["int8/col DynamicQuantizeMatMul", await session(dq, k, n)],
    ...(await Promise.all(
      (["u8s8", "u8s8-7bit"] as const).map(async (kernel): Promise<[string, ort.InferenceSession]> => [`integerProduct ${kernel}, int4 blocks`, await session((g, x) => integerProduct(g, "w", x, q4, kernel), k, n)]),
    )),
    ["integerProduct u8s8, int8 blocks", await session((g, x) => integerProduct(g, "w", x, q8, "u8s8"), k, n)],
  ];
  for (const m of rows) {
    const x = gaussian(m * k, 11 + m, 1);
    const feeds = { x: new ort.Tensor("float32", x, [m, k]) };
    const times = paths.map(() => [] as number[]);
    const outs: Float32Array[] = [];
    for (let r = 0; r < ROUNDS + 2; r++) {
      for (const [i, [, s]] of paths.entries()) {
        const t0 = performance.now();
        const y = (await s.run(feeds)).y!.data as Float32Array;
        if (r >= 2) times[i]!.push(performance.now() - t0);
        if (r === 0) outs[i] = y;
      }
    }
    const median = (t: number[]) => [...t].sort((a, b) => a - b)[Math.floor(t.length / 2)]!;
    const base = median(times[0]!);
    const ref = outs[0]!;
    const rms = (f: (i: number) => number) => Math.sqrt(ref.reduce((a, _, i) => a + f(i) ** 2, 0) / ref.length);
    const refRms = rms((i) => ref[i]!);
    for (const [i, [name]] of paths.entries()) {
      const ms = median(times[i]!);
      const err = rms((i2) => outs[i]![i2]! - ref[i2]!) / refRms;
      console.log(`${shape.name}, M=${m}: ${name.padEnd(34)} ${ms.toFixed(3).padStart(8)} ms  ${(base / ms).toFixed(2)}x fp32  err ${err.toExponential(2)}`);
    }
  }
}
