import { f16ToF32, f32ToF16 } from "./float-formats";

/**
 * Blockwise symmetric weight quantization, the one place its arithmetic is decided. A row of a
 * linear weight ([out, in], Hugging Face layout) is cut into blocks of `BLOCK_SIZE` values along
 * `in`; each block keeps one scale `d` (rounded to fp16, stored as float32) and one unsigned code
 * per value, the value being `d * (code - zeroPoint)`:
 *
 *   int8:  d = max|x| / 127,             code = round(x / d) + 128       (ggml's Q8_0)
 *   int4:  d = x_at_max|x| / -8,         code = min(15, trunc(x / d + 8.5))   (ggml's Q4_0)
 *
 * These are llama.cpp's Q8_0 and Q4_0 (block 32, fp16 scale, no zero point): the same codes feed
 * onnxruntime's `MatMulNBits` (its default zero point is 2^(bits-1), so no zero-point input) and
 * the GGUF writer, so both engines compute with the very same dequantized weights.
 *
 * @example
 * const q = quantizeRows(w, outDim, inDim, 4);
 * const back = dequantizeRows(q); // |back - w| <= |d| / 2 per value
 */
export type QuantBits = 4 | 8;

/** Values per block (ggml's QK8_0 = QK4_0 = 32; MatMulNBits takes any power of two >= 16). */
export const BLOCK_SIZE = 32;

export interface QuantizedRows {
  bits: QuantBits;
  /** Rows (a linear layer's output features, N). */
  rows: number;
  /** Values per row (input features, K); a multiple of BLOCK_SIZE. */
  cols: number;
  /** One unsigned code per value, row-major [rows, cols] (unpacked; `packMatMulNBits` packs them). */
  codes: Uint8Array;
  /** One scale per block, [rows, cols / BLOCK_SIZE], fp16 values held as float32. */
  scales: Float32Array;
}

export function zeroPoint(bits: QuantBits): number {
  return bits === 8 ? 128 : 8;
}

/** Whether a [rows, cols] weight can be quantized (its rows split into whole blocks). */
export function quantizable(cols: number): boolean {
  return cols % BLOCK_SIZE === 0;
}

/** Quantizes a row-major [rows, cols] float32 matrix. @throws when cols is not a multiple of BLOCK_SIZE */
export function quantizeRows(w: Float32Array, rows: number, cols: number, bits: QuantBits): QuantizedRows {
  if (w.length !== rows * cols) throw new Error(`quantize: ${w.length} values for [${rows}, ${cols}]`);
  if (!quantizable(cols)) throw new Error(`quantize: ${cols} input features is not a multiple of the block size ${BLOCK_SIZE}`);
  const blocks = rows * (cols / BLOCK_SIZE);
  const codes = new Uint8Array(w.length);
  const rawScales = new Float32Array(blocks);
  const scaleOf = bits === 8 ? scaleInt8 : scaleInt4;
  for (let b = 0; b < blocks; b++) rawScales[b] = scaleOf(w, b * BLOCK_SIZE);
  // The stored scale is fp16, as in GGUF; the codes are computed from the fp32 scale, as ggml does.
  const scales = f16ToF32(f32ToF16(rawScales));
  for (let b = 0; b < blocks; b++) {
    const d = rawScales[b]!;
    const inv = d === 0 ? 0 : Math.fround(1 / d);
    const base = b * BLOCK_SIZE;
    if (bits === 8) {
      for (let i = base; i < base + BLOCK_SIZE; i++) codes[i] = roundHalfAway(Math.fround(w[i]! * inv)) + 128;
    } else {
      for (let i = base; i < base + BLOCK_SIZE; i++) codes[i] = Math.min(15, Math.trunc(Math.fround(Math.fround(w[i]! * inv) + 8.5)));
    }
  }
  return { bits, rows, cols, codes, scales };
}

/** C's roundf: halves away from zero (Math.round takes -2.5 to -2). */
function roundHalfAway(x: number): number {
  return x < 0 ? -Math.round(-x) : Math.round(x);
}

function scaleInt8(w: Float32Array, start: number): number {
  let amax = 0;
  for (let i = start; i < start + BLOCK_SIZE; i++) amax = Math.max(amax, Math.abs(w[i]!));
  return Math.fround(amax / 127);
}

function scaleInt4(w: Float32Array, start: number): number {
  let amax = 0;
  let max = 0;
  for (let i = start; i < start + BLOCK_SIZE; i++) {
    const v = w[i]!;
    if (Math.abs(v) > amax) {
      amax = Math.abs(v);
      max = v;
    }
  }
  return Math.fround(max / -8);
}

/** The float32 values the quantized weight stands for, row-major [rows, cols]. */
export function dequantizeRows(q: QuantizedRows): Float32Array {
  const out = new Float32Array(q.codes.length);
  const z = zeroPoint(q.bits);
  for (let i = 0; i < out.length; i++) out[i] = Math.fround(q.scales[Math.floor(i / BLOCK_SIZE)]! * (q.codes[i]! - z));
  return out;
}

/**
 * The codes packed as `MatMulNBits` input B: uint8 [rows, cols / BLOCK_SIZE, BLOCK_SIZE * bits / 8];
 * for 4 bits two codes per byte, the earlier one in the low nibble.
 */
export function packMatMulNBits(q: QuantizedRows): Uint8Array {
  if (q.bits === 8) return q.codes;
  const out = new Uint8Array(q.codes.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = q.codes[2 * i]! | (q.codes[2 * i + 1]! << 4);
  return out;
}
