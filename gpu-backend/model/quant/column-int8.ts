import { BLOCK_SIZE, zeroPoint } from "./block-quant";
import type { PackedWeight } from "./quantized-weights";
import { rotateBlocks } from "./hadamard";

/**
 * A quantized linear weight re-coded for onnxruntime's integer GEMM (`com.microsoft.
 * DynamicQuantizeMatMul`: MLAS's u8 x s8 kernels, VNNI where the CPU has it), the product the
 * cpu graph uses for prefill rows (`graph/linear.ts`): B [K, N] int8, symmetric, one scale per
 * output feature.
 *
 * It is made from the block codes the decode product reads, not from the float weights, so both
 * products compute with the same model: each value is the block weight `d * (code - zero)`
 * (rotated with its row's other values when `rotation` is given, as the graph's prefill rows are),
 * rounded once more to its output feature's int8 grid (step max|row| / 127). That second
 * rounding is at most half a step: for int4 weights finer than the block grid it sits on, for
 * int8 weights of the same order as Q8_0's own (docs/quantization.md, "Prefill products").
 */
export interface ColumnInt8 {
  /** int8 [K, N] (K = the weight's cols, N its rows): row i holds input feature i of every output feature. */
  codes: Int8Array;
  /** float32 [N]: output feature j's value is codes[i * N + j] * scales[j]. */
  scales: Float32Array;
}

/**
 * The weight `w` (N rows of K block-quantized values) as per-output-feature int8 [K, N]; with
 * `rotation` b, each output feature's K block values times H_b per block of b first (`hadamard.ts`),
 * for activations rotated the same way.
 */
export function columnInt8(w: PackedWeight, rotation: number | null = null): ColumnInt8 {
  const { rows: n, cols: k, bits } = w;
  const blocks = k / BLOCK_SIZE;
  const z = zeroPoint(bits);
  const codes = new Int8Array(k * n);
  const scales = new Float32Array(n);
  const row = new Float64Array(k);
  for (let r = 0; r < n; r++) {
    for (let b = 0; b < blocks; b++) {
      const d = w.scales[r * blocks + b]!;
      const at = b * BLOCK_SIZE;
      for (let j = 0; j < BLOCK_SIZE; j++) row[at + j] = d * (codeAt(w, r * k + at + j) - z);
    }
    if (rotation !== null) rotateBlocks(row, rotation);
    let amax = 0;
    for (let i = 0; i < k; i++) if (Math.abs(row[i]!) > amax) amax = Math.abs(row[i]!);
    const scale = amax / 127;
    scales[r] = scale;
    const inv = scale === 0 ? 0 : 1 / scale;
    for (let i = 0; i < k; i++) codes[i * n + r] = Math.round(row[i]! * inv);
  }
  return { codes, scales };
}

/** The unsigned code of value `i` (row-major) in MatMulNBits' packing: 4-bit codes two a byte, low nibble first. */
function codeAt(w: PackedWeight, i: number): number {
  if (w.bits === 8) return w.packed[i]!;
  const byte = w.packed[i >> 1]!;
  return i & 1 ? byte >> 4 : byte & 15;
}
