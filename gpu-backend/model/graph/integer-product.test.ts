import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { GraphBuilder, DataType } from "./graph-builder";
import { integerProduct, matMulNBits, type IntegerKernel } from "./linear";
import { hasVnni } from "../quant/cpu-features";
import { dequantizeRows, packMatMulNBits, quantizeRows, type QuantBits } from "../quant/block-quant";
import { columnInt8 } from "../quant/column-int8";
import type { PackedWeight } from "../quant/quantized-weights";

/**
 * The prefill rows' integer GEMM (`integerProduct`) on onnxruntime's CPU provider: each row's
 * result independent of the other rows (bit for bit), close to the float product of the same
 * block weights (also with an outlier channel, which the rotation spreads), and a row of zeros
 * gives zeros (no NaN from a zero step). Every kernel that is
 * exact on this CPU: `u8s8` only with VNNI (without it MLAS's pairs of u8 x s8 products saturate
 * int16: 7.7% RMS error on an AVX2 EPYC, which is why `integerPrefillKernel` never picks it there).
 */
const KERNELS: IntegerKernel[] = ["u8s8-7bit", ...(hasVnni() ? (["u8s8"] as const) : [])];
const K = 96;
const N = 40;

function seeded(n: number, seed: number, scale: number): Float32Array {
  let s = seed >>> 0;
  const next = () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296;
  return Float32Array.from({ length: n }, () => (next() + next() + next() - 1.5) * scale);
}

function packed(bits: QuantBits): { w: PackedWeight; values: Float32Array } {
  const q = quantizeRows(seeded(N * K, 3, 0.1), N, K, bits);
  return { w: { bits, rows: N, cols: K, packed: packMatMulNBits(q), scales: q.scales }, values: dequantizeRows(q) };
}

async function product(build: (g: GraphBuilder, x: string) => string, x: Float32Array, rows: number): Promise<Float32Array> {
  const g = new GraphBuilder("integer-product-test");
  const input = g.input("x", DataType.FLOAT, ["M", K]);
  g.output(build(g, input), DataType.FLOAT, ["M", N], "y");
  const session = await ort.InferenceSession.create(g.encode(), { executionProviders: ["cpu"], intraOpNumThreads: 1, logSeverityLevel: 3 });
  try {
    return (await session.run({ x: new ort.Tensor("float32", x, [rows, K]) })).y!.data as Float32Array;
  } finally {
    await session.release();
  }
}

/** x [M, K] times the float block weights [N, K] transposed, in float64. */
function floatProduct(x: Float32Array, values: Float32Array, rows: number): Float64Array {
  const y = new Float64Array(rows * N);
  for (let m = 0; m < rows; m++) for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) y[m * N + n]! += x[m * K + k]! * values[n * K + k]!;
  return y;
}

describe("columnInt8", () => {
  for (const bits of [4, 8] as const) {
    it(`int${bits}: each value within half an int8 step of its block value`, () => {
      const { w, values } = packed(bits);
      const c = columnInt8(w);
      for (let n = 0; n < N; n++) {
        for (let k = 0; k < K; k++) {
          const code = c.codes[k * N + n]!;
          expect(Math.abs(code)).toBeLessThanOrEqual(127);
          expect(Math.abs(code * c.scales[n]! - values[n * K + k]!)).toBeLessThanOrEqual(c.scales[n]! / 2 + 1e-7);
        }
      }
    });
  }
});

describe("integerProduct", () => {
  it("computes each row on its own: rows alone equal the same rows among others, bit for bit", async () => {
    const { w } = packed(4);
    // Row 2 is 50x the others: a per-tensor activation scale would coarsen every other row.
    const x = seeded(5 * K, 9, 1);
    for (let k = 0; k < K; k++) x[2 * K + k]! *= 50;
    for (const kernel of KERNELS) {
      const all = await product((g, xi) => integerProduct(g, "w", xi, w, kernel), x, 5);
      const two = await product((g, xi) => integerProduct(g, "w", xi, w, kernel), x.subarray(0, 2 * K), 2);
      expect(Array.from(all.subarray(0, 2 * N)), kernel).toEqual(Array.from(two));
    }
  });

  it("stays within 2% (RMS) of the float product of the block weights, like MatMulNBits, and maps a zero row to zeros", async () => {
    const rows = 6;
    for (const [bits, kernel] of KERNELS.flatMap((k) => [4, 8].map((b) => [b as QuantBits, k] as const))) {
      const { w, values } = packed(bits);
      const x = seeded(rows * K, 5, 1);
      x.fill(0, 3 * K, 4 * K);
      const exact = floatProduct(x, values, rows);
      const rmsError = (y: Float32Array) => Math.sqrt(y.reduce((a, v, i) => a + (v - exact[i]!) ** 2, 0) / exact.reduce((a, v) => a + v * v, 0));
      const integer = await product((g, xi) => integerProduct(g, "w", xi, w, kernel), x, rows);
      const nbits = await product((g, xi) => matMulNBits(g, "w", xi, w), x, rows);
      expect(Array.from(integer.subarray(3 * N, 4 * N))).toEqual(new Array(N).fill(0));
      expect(rmsError(integer), `int${bits} ${kernel}`).toBeLessThan(0.02);
      expect(rmsError(integer)).toBeGreaterThan(0); // the int8 rounding is real
      expect(rmsError(nbits)).toBeLessThan(0.02);
    }
  });

  it("an outlier channel in every row (trained models' activations) stays within 2%: the rotation spreads it", async () => {
    // Channel 7 at 60x the others, as the few massive channels of a trained model's hidden state:
    // unrotated, each row's step is set by it and the other 95 channels round to a few levels
    // (u8s8-7bit on an AVX2 EPYC: 3.9e-2 RMS unrotated, 1.1e-2 rotated).
    const rows = 4;
    const { w, values } = packed(8);
    const x = seeded(rows * K, 13, 1);
    for (let m = 0; m < rows; m++) x[m * K + 7]! *= 60;
    const exact = floatProduct(x, values, rows);
    for (const kernel of KERNELS) {
      const y = await product((g, xi) => integerProduct(g, "w", xi, w, kernel), x, rows);
      const rmsError = Math.sqrt(y.reduce((a, v, i) => a + (v - exact[i]!) ** 2, 0) / exact.reduce((a, v) => a + v * v, 0));
      expect(rmsError, kernel).toBeLessThan(0.02);
    }
  });
});
