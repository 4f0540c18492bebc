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
 * the cpu executor's int4 prefill rows: the same GEMM with each activation row quantized on its
 * own) of the int4 and of the int8 block weights.
 * Prints median ms per product over the rounds, the speed against fp32, and the output's error
 * against fp32 (RMS of the difference over RMS of the fp32 output).
 */
import { cpus } from "node:os";
import * as ort from "onnxruntime-node";
import { cpuFeatures } from "../kit/machine";
import { integerProduct } from "../../gpu-backend/model/graph/linear";
import { GraphBuilder } from "../../gpu-backend/model/graph/graph-builder";
import { DataType } from "../../gpu-backend/model/graph/onnx-proto";

const threads = Number(process.argv[2] ?? 2);
const ROUNDS = 12;
const BLOCK = 32;

/** Deterministic normal-ish values (sum of uniforms), scaled. */
function gaussian(n: number, seed: number, scale: number): Float32Array {
  let s = seed >>> 0;
  const next = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (next() + next() + next() + next() - 2) * scale;
  return out;
}

/** W [N, K] (out, in) as MatMulNBits packs it: codes per block of 32 with a float scale, zero point 2^(bits-1). */
function packNBits(w: Float32Array, n: number, k: number, bits: 4 | 8): { packed: Uint8Array; scales: Float32Array } {
  const blocks = k / BLOCK;
  const qmax = (1 << (bits - 1)) - 1;
  const zero = 1 << (bits - 1);
  const packed = new Uint8Array((n * k * bits) / 8);
  const scales = new Float32Array(n * blocks);
  for (let r = 0; r < n; r++) {
    for (let b = 0; b < blocks; b++) {
      let amax = 0;
      for (let j = 0; j < BLOCK; j++) amax = Math.max(amax, Math.abs(w[r * k + b * BLOCK + j]!));
      const scale = amax / qmax || 1;
      scales[r * blocks + b] = scale;
      for (let j = 0; j < BLOCK; j++) {
        const q = Math.max(0, Math.min((1 << bits) - 1, Math.round(w[r * k + b * BLOCK + j]! / scale) + zero));
        const idx = r * k + b * BLOCK + j;
        if (bits === 8) packed[idx] = q;
        else packed[idx >> 1] = packed[idx >> 1]! | (j % 2 === 0 ? q : q << 4);
      }
    }
  }
  return { packed, scales };
}

/** W [N, K] as DynamicQuantizeMatMul's B [K, N] int8 with one scale per column (symmetric, `qmax` 127). */
function perColumnInt8(w: Float32Array, n: number, k: number, qmax: number): { b: Int8Array; scales: Float32Array } {
  const b = new Int8Array(k * n);
  const scales = new Float32Array(n);
  for (let c = 0; c < n; c++) {
    let amax = 0;
    for (let i = 0; i < k; i++) amax = Math.max(amax, Math.abs(w[c * k + i]!));
    const scale = amax / qmax || 1;
    scales[c] = scale;
    for (let i = 0; i < k; i++) b[i * n + c] = Math.round(w[c * k + i]! / scale);
  }
  return { b, scales };
}

function transpose(w: Float32Array, n: number, k: number): Float32Array {
  const t = new Float32Array(k * n);
  for (let c = 0; c < n; c++) for (let i = 0; i < k; i++) t[i * n + c] = w[c * k + i]!;
  return t;
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
  const q4 = packNBits(w, n, k, 4);
  const q8 = packNBits(w, n, k, 8);
  const c8 = perColumnInt8(w, n, k, 127);
  const nbits = (bits: number, q: { packed: Uint8Array; scales: Float32Array }) => (g: GraphBuilder, x: string) =>
    g.op("MatMulNBits", [x, g.bytes("w", q.packed, [n, k / BLOCK, (BLOCK * bits) / 8]), g.weight("s", q.scales, [n, k / BLOCK])], { domain: "com.microsoft", attributes: { K: k, N: n, bits, block_size: BLOCK, accuracy_level: 4 } });
  const dq = (c: { b: Int8Array; scales: Float32Array }) => (g: GraphBuilder, x: string) => g.op("DynamicQuantizeMatMul", [x, g.int8("b", c.b, [k, n]), g.weight("bs", c.scales, [n])], { domain: "com.microsoft" });
  const paths: [string, ort.InferenceSession][] = [
    ["fp32 MatMul", await session((g, x) => g.op("MatMul", [x, g.weight("w", transpose(w, n, k), [k, n])]), k, n)],
    ["int4 MatMulNBits acc4", await session(nbits(4, q4), k, n)],
    ["int8 MatMulNBits acc4", await session(nbits(8, q8), k, n)],
    ["int8/col DynamicQuantizeMatMul", await session(dq(c8), k, n)],
    ["integerProduct of the int4 blocks", await session((g, x) => integerProduct(g, "w", x, { bits: 4, rows: n, cols: k, ...q4 }), k, n)],
    ["integerProduct of the int8 blocks", await session((g, x) => integerProduct(g, "w", x, { bits: 8, rows: n, cols: k, ...q8 }), k, n)],
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
