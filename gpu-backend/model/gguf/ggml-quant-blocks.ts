import { f16ToF32, f32ToF16 } from "../quant/float-formats";
import { BLOCK_SIZE, type QuantBits, type QuantizedRows } from "../quant/block-quant";

/**
 * ggml's byte layouts of the Q8_0 and Q4_0 blocks, for codes and scales that `quantizeRows`
 * (quant/block-quant.ts) computed: this file only moves bytes, the arithmetic is decided there.
 * A tensor is its rows' blocks back to back, 32 values per block, no padding between blocks.
 */
export type GgmlQuantType = "Q8_0" | "Q4_0";

/** Bytes per block of 32 values: fp16 scale + 32 int8 (Q8_0), fp16 scale + 16 nibble pairs (Q4_0). */
export const GGML_BLOCK_BYTES: Record<GgmlQuantType, number> = { Q8_0: 2 + BLOCK_SIZE, Q4_0: 2 + BLOCK_SIZE / 2 };

/** The bit width of a ggml block type, and back. */
export function quantBitsOf(type: GgmlQuantType): QuantBits {
  return type === "Q8_0" ? 8 : 4;
}
export function ggmlQuantTypeOf(bits: QuantBits): GgmlQuantType {
  return bits === 8 ? "Q8_0" : "Q4_0";
}

/** Bytes of `count` values (a multiple of 32) in `type`'s blocks. */
export function ggmlQuantBytes(type: GgmlQuantType, count: number): number {
  return (count / BLOCK_SIZE) * GGML_BLOCK_BYTES[type];
}

/**
 * Quantized rows as ggml blocks (`block_q8_0` / `block_q4_0` of ggml-common.h), block b of the
 * row-major [rows, cols] matrix at byte b * blockBytes:
 *
 *   Q8_0 (34 bytes):  | d: fp16 LE | qs[0] .. qs[31]: int8 = code[j] - 128 |
 *
 *   Q4_0 (18 bytes):  | d: fp16 LE | qs[0] .. qs[15]: u8                      |
 *                                    qs[j] = code[j] | code[j + 16] << 4
 *                     values 0..15 in the low nibbles, 16..31 in the high ones (not interleaved
 *                     pairs as MatMulNBits packs them); value = d * (nibble - 8)
 *
 * @throws Error for cols not a multiple of 32
 * @example
 * const bytes = encodeGgmlBlocks(quantizeRows(w, rows, cols, 4)); // rows * cols / 32 * 18 bytes
 */
export function encodeGgmlBlocks(q: QuantizedRows): Uint8Array {
  if (q.cols % BLOCK_SIZE !== 0) throw new Error(`ggml blocks: ${q.cols} values per row is not a multiple of ${BLOCK_SIZE}`);
  const type = ggmlQuantTypeOf(q.bits);
  const blockBytes = GGML_BLOCK_BYTES[type];
  const blocks = q.scales.length;
  const out = new Uint8Array(blocks * blockBytes);
  const view = new DataView(out.buffer);
  const d = f32ToF16(q.scales);
  const half = BLOCK_SIZE / 2;
  for (let b = 0; b < blocks; b++) {
    const at = b * blockBytes;
    const code = b * BLOCK_SIZE;
    view.setUint16(at, d[b]!, true);
    if (q.bits === 8) {
      for (let j = 0; j < BLOCK_SIZE; j++) out[at + 2 + j] = (q.codes[code + j]! - 128) & 0xff;
    } else {
      for (let j = 0; j < half; j++) out[at + 2 + j] = q.codes[code + j]! | (q.codes[code + j + half]! << 4);
    }
  }
  return out;
}

/**
 * The codes and scales back from ggml blocks (the inverse of `encodeGgmlBlocks`).
 *
 * @throws Error for a byte length that is not rows * cols / 32 blocks
 * @example
 * const q = decodeGgmlBlocks("Q4_0", bytes, rows, cols); // q.codes, q.scales exactly as written
 */
export function decodeGgmlBlocks(type: GgmlQuantType, bytes: Uint8Array, rows: number, cols: number): QuantizedRows {
  const blockBytes = GGML_BLOCK_BYTES[type];
  if (cols % BLOCK_SIZE !== 0) throw new Error(`ggml blocks: ${cols} values per row is not a multiple of ${BLOCK_SIZE}`);
  const blocks = (rows * cols) / BLOCK_SIZE;
  if (bytes.length !== blocks * blockBytes) throw new Error(`ggml blocks: ${bytes.length} bytes for ${blocks} ${type} blocks`);
  const bits = quantBitsOf(type);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const d = new Uint16Array(blocks);
  const codes = new Uint8Array(rows * cols);
  const half = BLOCK_SIZE / 2;
  for (let b = 0; b < blocks; b++) {
    const at = b * blockBytes;
    const code = b * BLOCK_SIZE;
    d[b] = view.getUint16(at, true);
    if (bits === 8) {
      for (let j = 0; j < BLOCK_SIZE; j++) codes[code + j] = (bytes[at + 2 + j]! + 128) & 0xff;
    } else {
      for (let j = 0; j < half; j++) {
        const byte = bytes[at + 2 + j]!;
        codes[code + j] = byte & 0x0f;
        codes[code + j + half] = byte >> 4;
      }
    }
  }
  return { bits, rows, cols, codes, scales: f16ToF32(d) };
}
