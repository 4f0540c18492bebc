import { DataType, type GraphBuilder } from "./graph-builder";
import { f32ToF16 } from "../quant/float-formats";
import type { WeightSource } from "./decoder-spec";
import { concatTransposed, concatVectors } from "./weight-layout";
import { BLOCK_SIZE, quantizable } from "../quant/block-quant";
import type { PackedWeight, QuantizedWeights } from "../quant/quantized-weights";
import { hadamard, rotationBlock } from "../quant/hadamard";
import { columnInt8, type ColumnInt8 } from "../quant/column-int8";

/**
 * How the decoder graph holds its linear weights: float32 (`MatMul`), float16 (the product in
 * float16: x cast down, the result cast back, so norms and the residual stay float32), or blockwise int8/int4
 * (`com.microsoft.MatMulNBits`, the codes of `quant/block-quant.ts`), the LM head included; with
 * quantized weights the embedding table is gathered from its quantized form
 * (`com.microsoft.GatherBlockQuantized`), which a tied LM head shares.
 *
 * Only linears whose input features split into whole blocks (multiples of 32) are quantized; the
 * rest stay float32, as do norms, biases, rotary tables and the MoE router (the experts take the
 * same precision through `moe-block.ts`; docs/quantization.md).
 */
export interface GraphWeights {
  source: WeightSource;
  /** Quantized linear weights at one bit width, or null for float weights. */
  quantized: QuantizedWeights | null;
  /** Float weights in float16 (webgpu, cuda) rather than float32. */
  float16?: boolean;
  /**
   * Activations are float16 end to end (the fused paged graph, `fused-blocks.ts`): every product
   * takes and returns float16 with no Cast around it, float weights are float16 (also the linears
   * a quantized graph leaves unquantized) and MatMulNBits / GatherBlockQuantized scales are
   * float16. Absent (the cpu graph, the unfused paged graph): float32 activations.
   */
  float16Activations?: boolean;
  /**
   * The cpu graph's `group_sizes` input ([decode rows, prefill rows], `llama-graph.ts`): with
   * quantized weights, each linear splits its rows there, the decode rows multiplied by
   * MatMulNBits (the fastest product at a few rows) and the prefill rows by the integer GEMM
   * (`integerProduct` with `kernel`), so a decode row's result never depends on what shares its step.
   */
  rowGroups?: { sizes: string; kernel: IntegerKernel };
  /**
   * The MatMulNBits products that may run at one row (the LM head's, the decode rows of a split
   * linear) take one more, a copy of their first, so they never do: on an AVX2 CPU MLAS's one-row
   * int4 kernel sums in another order than its many-row one (measured: a row's bits differ between
   * M = 1 and M >= 2; at M >= 2 they do not depend on M), and a decode row's logits would depend
   * on what shares its step (`cpu-executor.ts` `oneRowDiffers`).
   */
  padOneRow?: boolean;
}

/**
 * `product` of x [M, K] computed over M + 1 rows (x's first row repeated after the last) and cut
 * back to M, when `pad` (`GraphWeights.padOneRow`): the product never runs at one row.
 */
export function atTwoRowsOrMore(g: GraphBuilder, x: string, pad: boolean | undefined, product: (x: string) => string): string {
  if (!pad) return product(x);
  const first = g.op("Slice", [x, g.int64s([0]), g.int64s([1])]);
  const y = product(g.op("Concat", [x, first], { attributes: { axis: 0 } }));
  return g.op("Slice", [y, g.int64s([0]), g.op("Shape", [x], { attributes: { end: 1 } })]);
}

/**
 * MatMulNBits' `accuracy_level`: 4 computes with int8 activations (per block of 32, as ggml's
 * Q8_0 dot products do). Measured on this machine's AVX2 CPU, decode-sized (M = 1) products at
 * level 0 (fp32 compute) run 2.5-100x slower; see docs/quantization.md.
 */
export const ACCURACY_LEVEL = 4;

/**
 * x [.., inDim] times the linear weights `names` (Hugging Face [out, in] each, concatenated along
 * out so one product computes them all): [.., outDim], outDim the sum of their out features.
 *
 * @example const qkv = linear(g, gw, "layer0.qkv", h, [w.q, w.k, w.v], hidden, (nh + 2 * nkv) * hd);
 */
export function linear(g: GraphBuilder, gw: GraphWeights, name: string, x: string, names: string[], inDim: number, outDim: number): string {
  const rows = () => names.map((n) => gw.source.take(n));
  if (!gw.quantized || !quantizable(inDim)) {
    const w = concatTransposed(rows(), inDim);
    if (gw.float16Activations) return g.op("MatMul", [x, g.half(name, f32ToF16(w), [inDim, outDim])]);
    if (gw.float16) return half(g, (x16) => g.op("MatMul", [x16, g.half(name, f32ToF16(w), [inDim, outDim])]), x);
    return g.op("MatMul", [x, g.weight(name, w, [inDim, outDim])]);
  }
  const w = gw.quantized.get(name, outDim, inDim, () => concatVectors(rows()));
  if (!gw.rowGroups) return matMulNBits(g, name, x, w, gw.float16Activations);
  const [decodeRows, prefillRows] = g.opN("Split", [x, gw.rowGroups.sizes], 2, { attributes: { axis: 0 } });
  const decoded = atTwoRowsOrMore(g, decodeRows!, gw.padOneRow, (rows) => matMulNBits(g, name, rows, w));
  return g.op("Concat", [decoded, integerProduct(g, name, prefillRows!, w, gw.rowGroups.kernel)], { attributes: { axis: 0 } });
}

/**
 * How the integer GEMM's activations are coded (MLAS's u8 x s8 kernels; `integerPrefillKernel` in
 * cpu-executor.ts picks per CPU):
 * - `u8s8`: uint8 (zero point 128) times the int8 weights. With VNNI (AVX-VNNI, AVX-512 VNNI, AMX)
 *   MLAS sums u8 x s8 products straight into int32; without it (plain AVX2, AVX-512 without VNNI)
 *   its kernel adds pairs of products into int16 first (`vpmaddubsw`), which saturates
 *   (255 x 127 x 2 > 32,767): 7.7% RMS error measured on an AVX2 EPYC, not usable there.
 * - `u8s8-7bit`: the same kernel with activations on 7 bits (step max|row| / 63, zero point 64),
 *   so a pair of products always fits int16 (127 x 127 x 2 = 32,258): exact on every x86 CPU, at
 *   one bit of activation precision. (u8 x u8, uint8 weights, also never saturates: measured 15%
 *   slower on that CPU, not kept; docs/quantization.md.)
 */
export type IntegerKernel = "u8s8" | "u8s8-7bit";

/**
 * x [M, K] times a quantized weight by onnxruntime's integer GEMM (`MatMulIntegerToFloat`): each
 * row of x rotated by a block Hadamard matrix (`quant/hadamard.ts`: the weight is rotated the same
 * way, so the product is unchanged, but a few outlier channels no longer set the whole row's
 * step), then quantized on its own (symmetric: step max|row| / 127, held as uint8 with zero point
 * 128 by `QuantizeLinear` per axis 0; 7 bits for `u8s8-7bit`), times the rotated weight's
 * per-output-feature int8 codes (`columnInt8`), scaled by the weight's scales and then by each
 * row's step. Per row, not per tensor (`DynamicQuantizeMatMul`, 15-25% faster): a row's result
 * never depends on the other rows of its step. On an AVX-512 VNNI CPU it runs 2.2-2.4x fp32 MatMul
 * at 300 rows unrotated, MatMulNBits at accuracy 4 1.1-1.3x (`bench/probes/int-gemm-probe.ts`;
 * docs/quantization.md); rotated, on an AVX2 CPU, 1.2-1.4x (int8 MatMulNBits 0.6-0.7x).
 */
export function integerProduct(g: GraphBuilder, name: string, x: string, w: PackedWeight, kernel: IntegerKernel): string {
  const b = rotationBlock(w.cols);
  const h = initializerOnce(g, `hadamard_${b}`, () => g.weight(`hadamard_${b}`, hadamard(b), [b, b]));
  const rotated = g.op("Reshape", [g.op("MatMul", [g.op("Reshape", [x, g.int64s([-1, w.cols / b, b])]), h]), g.int64s([-1, w.cols])]);
  let c: ColumnInt8 | undefined;
  const column = () => (c ??= columnInt8(w, b));
  const codes = initializerOnce(g, `${name}.int8`, () => g.int8(`${name}.int8`, column().codes, [w.cols, w.rows]));
  const scales = initializerOnce(g, `${name}.int8_scales`, () => g.weight(`${name}.int8_scales`, column().scales, [w.rows]));
  const levels = kernel === "u8s8-7bit" ? 63 : 127;
  const zero = initializerOnce(g, `row_int8.zero_point_${levels + 1}`, () => g.bytes(`row_int8.zero_point_${levels + 1}`, Uint8Array.of(levels + 1), []));
  const one = initializerOnce(g, "row_int8.one", () => g.weight("row_int8.one", Float32Array.of(1), []));
  // The step max|row| / levels, at least FLT_MIN / levels (a row of zeros quantizes to zeros, not NaN).
  const amax = g.op("Max", [g.op("ReduceMax", [g.op("Abs", [rotated])], { attributes: { axes: [1], keepdims: 0 } }), g.scalar(1.1754944e-38)]);
  const step = g.op("Mul", [amax, g.scalar(1 / levels)]); // [M]
  const q = g.op("QuantizeLinear", [rotated, step, g.op("Expand", [zero, g.op("Shape", [step])])], { attributes: { axis: 0 } });
  const y = g.op("MatMulIntegerToFloat", [q, codes, one, scales, zero], { domain: "com.microsoft" });
  return g.op("Mul", [y, g.op("Unsqueeze", [step, g.int64s([1])])]);
}

/**
 * The quantized product with an already packed weight (a tied LM head reuses the embedding's);
 * `half`: x and the result float16, so the scales are too (MatMulNBits' A and scales share a type).
 */
export function matMulNBits(g: GraphBuilder, name: string, x: string, w: PackedWeight, half = false): string {
  const blocks = w.cols / BLOCK_SIZE;
  const packed = initializerOnce(g, `${name}.packed`, () => g.bytes(`${name}.packed`, w.packed, [w.rows, blocks, (BLOCK_SIZE * w.bits) / 8]));
  const scales = initializerOnce(g, `${name}.scales`, () => scaleInit(g, `${name}.scales`, w.scales, [w.rows, blocks], half));
  return g.op("MatMulNBits", [x, packed, scales], {
    domain: "com.microsoft",
    attributes: { K: w.cols, N: w.rows, bits: w.bits, block_size: BLOCK_SIZE, accuracy_level: ACCURACY_LEVEL },
  });
}

/**
 * The embedding table [vocab, hidden] gathered at `ids`: float32 `Gather`, or `GatherBlockQuantized`
 * over the quantized table. Returns the rows and, for a tied LM head, how to multiply by the table.
 */
export function embedding(g: GraphBuilder, gw: GraphWeights, name: string, ids: string, vocab: number, hidden: number) {
  const half16 = gw.float16Activations ?? false;
  if (!gw.quantized || !quantizable(hidden)) {
    if (half16) {
      const table = g.half(name, f32ToF16(gw.source.take(name)), [vocab, hidden]);
      return {
        rows: g.op("Gather", [table, ids], { attributes: { axis: 0 } }),
        head: (x: string) => g.op("Gemm", [x, table], { attributes: { transB: 1 } }),
      };
    }
    if (gw.float16) {
      const table = g.half(name, f32ToF16(gw.source.take(name)), [vocab, hidden]);
      return {
        rows: g.op("Cast", [g.op("Gather", [table, ids], { attributes: { axis: 0 } })], { attributes: { to: DataType.FLOAT } }),
        head: (x: string) => half(g, (x16) => g.op("Gemm", [x16, table], { attributes: { transB: 1 } }), x),
      };
    }
    const table = g.weight(name, gw.source.take(name), [vocab, hidden]);
    return {
      rows: g.op("Gather", [table, ids], { attributes: { axis: 0 } }),
      head: (x: string) => g.op("Gemm", [x, table], { attributes: { transB: 1 } }),
    };
  }
  const w = gw.quantized.get(name, vocab, hidden, () => gw.source.take(name));
  const packed = g.bytes(`${name}.packed`, w.packed, [vocab, (hidden * w.bits) / 8]);
  const scales = scaleInit(g, `${name}.scales`, w.scales, [vocab, hidden / BLOCK_SIZE], half16);
  return {
    rows: g.op("GatherBlockQuantized", [packed, ids, scales], {
      domain: "com.microsoft",
      attributes: { gather_axis: 0, quantize_axis: 1, block_size: BLOCK_SIZE, bits: w.bits },
    }),
    // The same bytes under a second name: MatMulNBits wants B as [N, blocks, blob], the gather [N, K * bits / 8].
    head: (x: string) => matMulNBits(g, `${name}.head`, x, w, half16),
  };
}

/** An untied LM head [vocab, hidden] applied to x [R, hidden]. */
export function lmHeadProduct(g: GraphBuilder, gw: GraphWeights, name: string, x: string, vocab: number, hidden: number): string {
  if (!gw.quantized || !quantizable(hidden)) {
    if (gw.float16Activations) return g.op("Gemm", [x, g.half(name, f32ToF16(gw.source.take(name)), [vocab, hidden])], { attributes: { transB: 1 } });
    if (gw.float16) return half(g, (x16) => g.op("Gemm", [x16, g.half(name, f32ToF16(gw.source.take(name)), [vocab, hidden])], { attributes: { transB: 1 } }), x);
    return g.op("Gemm", [x, g.weight(name, gw.source.take(name), [vocab, hidden])], { attributes: { transB: 1 } });
  }
  return matMulNBits(g, name, x, gw.quantized.get(name, vocab, hidden, () => gw.source.take(name)), gw.float16Activations);
}

/** Quantization scales as an initializer: float32, or float16 for float16 activations. */
function scaleInit(g: GraphBuilder, name: string, scales: Float32Array, dims: number[], half16: boolean): string {
  return half16 ? g.half(name, f32ToF16(scales), dims) : g.weight(name, scales, dims);
}

/** `product` computed in float16 on x cast down; its result cast back to float32. */
function half(g: GraphBuilder, product: (x16: string) => string, x: string): string {
  return g.op("Cast", [product(g.op("Cast", [x], { attributes: { to: DataType.FLOAT16 } }))], { attributes: { to: DataType.FLOAT } });
}

const created = new WeakMap<GraphBuilder, Set<string>>();

function initializerOnce(g: GraphBuilder, name: string, create: () => string): string {
  let names = created.get(g);
  if (!names) created.set(g, (names = new Set()));
  if (!names.has(name)) {
    names.add(name);
    create();
  }
  return name;
}
