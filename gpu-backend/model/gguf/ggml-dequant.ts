import { bf16ToF32, f16ToF32 } from "../quant/float-formats";

/**
 * ggml's tensor types as GGUF files ship them, decoded to float32 the way ggml's reference
 * `dequantize_row_*` (ggml-quants.c, block structs in ggml-common.h) does: every product and sum
 * rounded to float32 in ggml's order, so the values are bit for bit ggml's. A tensor is its rows'
 * blocks back to back (32 values a block for the legacy types, 256 for the K-quants); fp16 fields
 * little-endian. Layouts, per block (d, m, dmin: fp16; offsets in bytes):
 *
 *   Q4_0  18: d | qs[16]                 v[j] = d·(lo(qs[j]) - 8), v[j+16] = d·(hi(qs[j]) - 8)
 *   Q4_1  20: d | m | qs[16]             v = d·nibble + m (same nibble order)
 *   Q5_0  22: d | qh[4] | qs[16]         5th bit of v[j] in bit j of qh (u32 LE), of v[j+16] in bit j+16;
 *                                        v = d·(q - 16)
 *   Q5_1  24: d | m | qh[4] | qs[16]     v = d·q + m
 *   Q8_0  34: d | qs[32] int8            v = d·q
 *   Q2_K  84: scales[16] | qs[64] | d | dmin
 *             16 sub-blocks of 16; scale byte: low nibble × d, high nibble × dmin (the min);
 *             2-bit codes: 128-value halves, each byte of the half's 32 holds 4 codes at shifts 0,2,4,6
 *             v = d·sc·q - dmin·m
 *   Q3_K 110: hmask[32] | qs[64] | scales[12] | d
 *             16 six-bit signed scales (minus 32) packed in 12 bytes; code = 2 low bits (as Q2_K)
 *             minus 4 when its hmask bit is clear; v = d·(sc - 32)·code
 *   Q4_K 144: d | dmin | scales[12] | qs[128]
 *             8 sub-blocks of 32, six-bit scale and min each (get_scale_min_k4); per 64 values the
 *             low nibbles of 32 bytes then their high nibbles; v = d·sc·q - dmin·m
 *   Q5_K 176: d | dmin | scales[12] | qh[32] | qs[128]   Q4_K plus a 5th bit from qh (bit 2i / 2i+1
 *             for the i-th 64 values' low / high halves)
 *   Q6_K 210: ql[128] | qh[64] | scales[16] int8 | d
 *             per 128 values: 4 quarters of 32 from ql's low/high nibbles and qh's 2-bit pairs;
 *             v = d·sc·(q - 32)
 *
 * Q8_1, Q8_K (activation types) and the i-quants (IQ*) and ternary types are not decoded.
 */

/** ggml type ids (ggml.h `enum ggml_type`) of the types GGUF weights come in. */
export const GGML_TYPE_IDS = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q5_0: 6,
  Q5_1: 7,
  Q8_0: 8,
  Q8_1: 9,
  Q2_K: 10,
  Q3_K: 11,
  Q4_K: 12,
  Q5_K: 13,
  Q6_K: 14,
  Q8_K: 15,
  IQ2_XXS: 16,
  IQ2_XS: 17,
  IQ3_XXS: 18,
  IQ1_S: 19,
  IQ4_NL: 20,
  IQ3_S: 21,
  IQ2_S: 22,
  IQ4_XS: 23,
  I8: 24,
  I16: 25,
  I32: 26,
  I64: 27,
  F64: 28,
  IQ1_M: 29,
  BF16: 30,
  TQ1_0: 34,
  TQ2_0: 35,
} as const;

export type GgmlTypeName = keyof typeof GGML_TYPE_IDS;

/** The types `dequantizeGgml` decodes. */
export const DECODED_GGML_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"] as const;
export type DecodedGgmlType = (typeof DECODED_GGML_TYPES)[number];

/** Values per block and bytes per block of each decoded type. */
export const GGML_LAYOUT: Record<DecodedGgmlType, { values: number; bytes: number }> = {
  F32: { values: 1, bytes: 4 },
  F16: { values: 1, bytes: 2 },
  BF16: { values: 1, bytes: 2 },
  Q4_0: { values: 32, bytes: 18 },
  Q4_1: { values: 32, bytes: 20 },
  Q5_0: { values: 32, bytes: 22 },
  Q5_1: { values: 32, bytes: 24 },
  Q8_0: { values: 32, bytes: 34 },
  Q2_K: { values: 256, bytes: 84 },
  Q3_K: { values: 256, bytes: 110 },
  Q4_K: { values: 256, bytes: 144 },
  Q5_K: { values: 256, bytes: 176 },
  Q6_K: { values: 256, bytes: 210 },
};

const NAME_OF = new Map<number, GgmlTypeName>(Object.entries(GGML_TYPE_IDS).map(([name, id]) => [id, name as GgmlTypeName]));

/** "Q4_K" for 12; "type 99" for an id ggml does not have. */
export function ggmlTypeName(id: number): string {
  return NAME_OF.get(id) ?? `type ${id}`;
}

/** The decoded type of a ggml type id, or undefined when `dequantizeGgml` cannot decode it. */
export function decodedGgmlType(id: number): DecodedGgmlType | undefined {
  const name = NAME_OF.get(id);
  return name !== undefined && (DECODED_GGML_TYPES as readonly string[]).includes(name) ? (name as DecodedGgmlType) : undefined;
}

/** Bytes of `count` values of `type`. @throws Error when count is not a whole number of blocks */
export function ggmlByteLength(type: DecodedGgmlType, count: number): number {
  const { values, bytes } = GGML_LAYOUT[type];
  if (count % values !== 0) throw new Error(`${type}: ${count} values is not a whole number of ${values}-value blocks`);
  return (count / values) * bytes;
}

const f = Math.fround;

/**
 * `count` values of `type` decoded from `bytes` to float32, as ggml's dequantize_row_* computes them.
 *
 * @throws Error for a byte length that does not hold `count` values of the type
 * @example
 * dequantizeGgml("Q4_K", bytes, 4096 * 4096); // Float32Array(16777216)
 */
export function dequantizeGgml(type: DecodedGgmlType, bytes: Uint8Array, count: number): Float32Array {
  const expected = ggmlByteLength(type, count);
  if (bytes.length !== expected) throw new Error(`${type}: ${bytes.length} bytes for ${count} values (expected ${expected})`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (type === "F32") {
    const out = new Float32Array(count);
    for (let i = 0; i < count; i++) out[i] = view.getFloat32(4 * i, true);
    return out;
  }
  if (type === "F16" || type === "BF16") {
    const halves = new Uint16Array(count);
    for (let i = 0; i < count; i++) halves[i] = view.getUint16(2 * i, true);
    return type === "F16" ? f16ToF32(halves) : bf16ToF32(halves);
  }
  const out = new Float32Array(count);
  const { values, bytes: blockBytes } = GGML_LAYOUT[type];
  const blocks = count / values;
  const half = (at: number) => HALF[view.getUint16(at, true)]!;
  const decode = BLOCK_DECODERS[type];
  for (let b = 0; b < blocks; b++) decode(bytes, b * blockBytes, half, out, b * values);
  return out;
}

type BlockDecoder = (q: Uint8Array, at: number, half: (at: number) => number, y: Float32Array, o: number) => void;

/** Every fp16 bit pattern as float32 (a lookup, as ggml's table). */
const HALF = f16ToF32(Uint16Array.from({ length: 65536 }, (_, i) => i));

const u32 = (q: Uint8Array, at: number) => (q[at]! | (q[at + 1]! << 8) | (q[at + 2]! << 16) | (q[at + 3]! << 24)) >>> 0;

/** get_scale_min_k4: the j-th six-bit scale and min of a Q4_K / Q5_K block's 12 scale bytes at `s`. */
function scaleMinK4(q: Uint8Array, s: number, j: number): [number, number] {
  if (j < 4) return [q[s + j]! & 63, q[s + j + 4]! & 63];
  return [(q[s + j + 4]! & 0xf) | ((q[s + j - 4]! >> 6) << 4), (q[s + j + 4]! >> 4) | ((q[s + j]! >> 6) << 4)];
}

/** The is-th six-bit scale of a Q3_K block's 12 scale bytes at `s` (0..63; the caller subtracts 32). */
function scaleQ3K(q: Uint8Array, s: number, is: number): number {
  if (is < 4) return (q[s + is]! & 0xf) | ((q[s + is + 8]! & 3) << 4);
  if (is < 8) return (q[s + is]! & 0xf) | (((q[s + is + 4]! >> 2) & 3) << 4);
  if (is < 12) return (q[s + is - 8]! >> 4) | (((q[s + is]! >> 4) & 3) << 4);
  return (q[s + is - 8]! >> 4) | (((q[s + is - 4]! >> 6) & 3) << 4);
}

const BLOCK_DECODERS: Record<Exclude<DecodedGgmlType, "F32" | "F16" | "BF16">, BlockDecoder> = {
  Q4_0(q, at, half, y, o) {
    const d = half(at);
    for (let j = 0; j < 16; j++) {
      const byte = q[at + 2 + j]!;
      y[o + j] = f(((byte & 0xf) - 8) * d);
      y[o + j + 16] = f(((byte >> 4) - 8) * d);
    }
  },
  Q4_1(q, at, half, y, o) {
    const d = half(at);
    const m = half(at + 2);
    for (let j = 0; j < 16; j++) {
      const byte = q[at + 4 + j]!;
      y[o + j] = f(f((byte & 0xf) * d) + m);
      y[o + j + 16] = f(f((byte >> 4) * d) + m);
    }
  },
  Q5_0(q, at, half, y, o) {
    const d = half(at);
    const qh = u32(q, at + 2);
    for (let j = 0; j < 16; j++) {
      const byte = q[at + 6 + j]!;
      const h0 = ((qh >>> j) << 4) & 0x10;
      const h1 = (qh >>> (j + 12)) & 0x10;
      y[o + j] = f((((byte & 0xf) | h0) - 16) * d);
      y[o + j + 16] = f((((byte >> 4) | h1) - 16) * d);
    }
  },
  Q5_1(q, at, half, y, o) {
    const d = half(at);
    const m = half(at + 2);
    const qh = u32(q, at + 4);
    for (let j = 0; j < 16; j++) {
      const byte = q[at + 8 + j]!;
      const h0 = ((qh >>> j) << 4) & 0x10;
      const h1 = (qh >>> (j + 12)) & 0x10;
      y[o + j] = f(f(((byte & 0xf) | h0) * d) + m);
      y[o + j + 16] = f(f(((byte >> 4) | h1) * d) + m);
    }
  },
  Q8_0(q, at, half, y, o) {
    const d = half(at);
    for (let j = 0; j < 32; j++) y[o + j] = f(((q[at + 2 + j]! << 24) >> 24) * d);
  },
  Q2_K(q, at, half, y, o) {
    const d = half(at + 80);
    const dmin = half(at + 82);
    let is = 0;
    let out = o;
    for (let n = 0; n < 2; n++) {
      const qs = at + 16 + 32 * n;
      for (let shift = 0; shift < 8; shift += 2) {
        for (let h = 0; h < 2; h++) {
          const sc = q[at + is++]!;
          const dl = f(d * (sc & 0xf));
          const ml = f(dmin * (sc >> 4));
          for (let l = 0; l < 16; l++) y[out++] = f(f(dl * ((q[qs + 16 * h + l]! >> shift) & 3)) - ml);
        }
      }
    }
  },
  Q3_K(q, at, half, y, o) {
    const hmask = at;
    const d = half(at + 108);
    let is = 0;
    let m = 1;
    let out = o;
    for (let n = 0; n < 2; n++) {
      const qs = at + 32 + 32 * n;
      for (let shift = 0; shift < 8; shift += 2) {
        for (let h = 0; h < 2; h++) {
          const dl = f(d * (scaleQ3K(q, at + 96, is++) - 32));
          for (let l = 0; l < 16; l++) {
            const i = 16 * h + l;
            y[out++] = f(dl * (((q[qs + i]! >> shift) & 3) - (q[hmask + i]! & m ? 0 : 4)));
          }
        }
        m <<= 1;
      }
    }
  },
  Q4_K(q, at, half, y, o) {
    const d = half(at);
    const dmin = half(at + 2);
    let out = o;
    for (let j = 0; j < 4; j++) {
      const [s1, m1] = scaleMinK4(q, at + 4, 2 * j);
      const [s2, m2] = scaleMinK4(q, at + 4, 2 * j + 1);
      const d1 = f(d * s1), min1 = f(dmin * m1), d2 = f(d * s2), min2 = f(dmin * m2);
      const qs = at + 16 + 32 * j;
      for (let l = 0; l < 32; l++) y[out++] = f(f(d1 * (q[qs + l]! & 0xf)) - min1);
      for (let l = 0; l < 32; l++) y[out++] = f(f(d2 * (q[qs + l]! >> 4)) - min2);
    }
  },
  Q5_K(q, at, half, y, o) {
    const d = half(at);
    const dmin = half(at + 2);
    const qh = at + 16;
    let out = o;
    for (let j = 0; j < 4; j++) {
      const [s1, m1] = scaleMinK4(q, at + 4, 2 * j);
      const [s2, m2] = scaleMinK4(q, at + 4, 2 * j + 1);
      const d1 = f(d * s1), min1 = f(dmin * m1), d2 = f(d * s2), min2 = f(dmin * m2);
      const u1 = 1 << (2 * j), u2 = 2 << (2 * j);
      const ql = at + 48 + 32 * j;
      for (let l = 0; l < 32; l++) y[out++] = f(f(d1 * ((q[ql + l]! & 0xf) + (q[qh + l]! & u1 ? 16 : 0))) - min1);
      for (let l = 0; l < 32; l++) y[out++] = f(f(d2 * ((q[ql + l]! >> 4) + (q[qh + l]! & u2 ? 16 : 0))) - min2);
    }
  },
  Q6_K(q, at, half, y, o) {
    const d = half(at + 208);
    for (let n = 0; n < 2; n++) {
      const ql = at + 64 * n;
      const qh = at + 128 + 32 * n;
      const sc = at + 192 + 8 * n;
      const base = o + 128 * n;
      const scale = (i: number) => (q[sc + i]! << 24) >> 24;
      for (let l = 0; l < 32; l++) {
        const is = l >> 4;
        const h = q[qh + l]!;
        const q1 = ((q[ql + l]! & 0xf) | ((h & 3) << 4)) - 32;
        const q2 = ((q[ql + l + 32]! & 0xf) | (((h >> 2) & 3) << 4)) - 32;
        const q3 = ((q[ql + l]! >> 4) | (((h >> 4) & 3) << 4)) - 32;
        const q4 = ((q[ql + l + 32]! >> 4) | (((h >> 6) & 3) << 4)) - 32;
        y[base + l] = f(f(d * scale(is)) * q1);
        y[base + l + 32] = f(f(d * scale(is + 2)) * q2);
        y[base + l + 64] = f(f(d * scale(is + 4)) * q3);
        y[base + l + 96] = f(f(d * scale(is + 6)) * q4);
      }
    }
  },
};
