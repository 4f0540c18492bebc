import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { f32ToF16 } from "../quant/float-formats";
import { GGML_LAYOUT, decodedGgmlType, dequantizeGgml, ggmlTypeName, type DecodedGgmlType } from "./ggml-dequant";

/**
 * The ggml dequantizers: against llama.cpp's own Python reference (gguf-py 0.19.0
 * `gguf.quants.dequantize`, numpy) on random blocks, bit for bit (testing/ggml-dequant-fixture.json,
 * written by testing/ggml-dequant-fixture.py), and on hand-built blocks whose values are known:
 * each block laid out here from codes and scales by the block's description in ggml-common.h.
 */

const half = (x: number) => f32ToF16(new Float32Array([x]))[0]!;

interface FixtureEntry {
  bytes: string;
  values: string;
  count: number;
}

describe("dequantizeGgml against gguf-py's reference", () => {
  const fixture = JSON.parse(readFileSync(join(__dirname, "testing", "ggml-dequant-fixture.json"), "utf8")) as Record<string, FixtureEntry>;
  it.each(Object.keys(fixture))("%s: random blocks decode to gguf-py's float32 values exactly", (name) => {
    const e = fixture[name]!;
    const bytes = new Uint8Array(Buffer.from(e.bytes, "base64"));
    const raw = Buffer.from(e.values, "base64");
    const want = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
    const got = dequantizeGgml(name as DecodedGgmlType, bytes, e.count);
    expect(Buffer.from(got.buffer).equals(Buffer.from(want.buffer))).toBe(true);
  });
});

/** A block of `type` with its fp16 fields at `halves` (byte offset -> value). */
function block(type: DecodedGgmlType, halves: Record<number, number>): { bytes: Uint8Array; view: DataView } {
  const bytes = new Uint8Array(GGML_LAYOUT[type].bytes);
  const view = new DataView(bytes.buffer);
  for (const [at, v] of Object.entries(halves)) view.setUint16(Number(at), half(v), true);
  return { bytes, view };
}

/** A deterministic code per value: 0 .. 2^bits - 1. */
const code = (i: number, bits: number) => (i * 7 + 3) % (1 << bits);

describe("dequantizeGgml on hand-built blocks", () => {
  it("Q4_1: d * nibble + m, values 0..15 in the low nibbles, 16..31 in the high ones", () => {
    const { bytes } = block("Q4_1", { 0: 0.5, 2: -1 });
    for (let j = 0; j < 16; j++) bytes[4 + j] = code(j, 4) | (code(j + 16, 4) << 4);
    expect(Array.from(dequantizeGgml("Q4_1", bytes, 32))).toEqual(Array.from({ length: 32 }, (_, i) => 0.5 * code(i, 4) - 1));
  });

  it.each([
    ["Q5_0", 0.25, null],
    ["Q5_1", 0.5, 2],
  ] as const)("%s: the fifth bit of value j is bit j of qh", (type, d, m) => {
    const { bytes, view } = block(type, m === null ? { 0: d } : { 0: d, 2: m });
    const qh = m === null ? 2 : 4;
    let bits = 0;
    for (let i = 0; i < 32; i++) if (code(i, 5) & 16) bits |= 1 << i;
    view.setUint32(qh, bits >>> 0, true);
    for (let j = 0; j < 16; j++) bytes[qh + 4 + j] = (code(j, 5) & 15) | ((code(j + 16, 5) & 15) << 4);
    const want = Array.from({ length: 32 }, (_, i) => (m === null ? d * (code(i, 5) - 16) : d * code(i, 5) + m));
    expect(Array.from(dequantizeGgml(type, bytes, 32))).toEqual(want);
  });

  /** Where value i (0..255) of a Q2_K / Q3_K block keeps its 2 low bits: byte in qs, bit shift. */
  const twoBit = (i: number) => ({ byte: (i >> 7) * 32 + ((i >> 4) & 1) * 16 + (i & 15), shift: 2 * ((i & 127) >> 5) });

  it("Q2_K: sub-block s of 16 values has scale (low nibble) and min (high nibble) in scales[s]", () => {
    const { bytes } = block("Q2_K", { 80: 0.5, 82: 0.25 });
    for (let s = 0; s < 16; s++) bytes[s] = (s % 16) | (((s * 5) % 16) << 4);
    for (let i = 0; i < 256; i++) bytes[16 + twoBit(i).byte]! |= code(i, 2) << twoBit(i).shift;
    const want = Array.from({ length: 256 }, (_, i) => {
      const s = i >> 4;
      return 0.5 * s * code(i, 2) - 0.25 * ((s * 5) % 16);
    });
    expect(Array.from(dequantizeGgml("Q2_K", bytes, 256))).toEqual(want);
  });

  it("Q3_K: six-bit scales minus 32, a code minus 4 where its hmask bit is clear", () => {
    const { bytes } = block("Q3_K", { 108: 0.125 });
    const scale = (s: number) => (s * 13 + 5) % 64;
    for (let s = 0; s < 16; s++) {
      bytes[96 + (s % 8)]! |= (scale(s) & 15) << (s < 8 ? 0 : 4);
      bytes[96 + 8 + (s % 4)]! |= (scale(s) >> 4) << (2 * (s >> 2));
    }
    const high = (i: number) => (i * 11) % 3 === 0;
    for (let i = 0; i < 256; i++) {
      const { byte, shift } = twoBit(i);
      bytes[32 + byte]! |= code(i, 2) << shift;
      if (high(i)) bytes[byte % 32]! |= 1 << ((i >> 7) * 4 + shift / 2);
    }
    const want = Array.from({ length: 256 }, (_, i) => 0.125 * (scale(i >> 4) - 32) * (code(i, 2) - (high(i) ? 0 : 4)));
    expect(Array.from(dequantizeGgml("Q3_K", bytes, 256))).toEqual(want);
  });

  /** Six-bit scale and min of Q4_K / Q5_K sub-block j (0..7) into the 12 scale bytes at `at`. */
  function putScaleMin(bytes: Uint8Array, at: number, j: number, sc: number, m: number): void {
    if (j < 4) {
      bytes[at + j]! |= sc & 63;
      bytes[at + j + 4]! |= m & 63;
    } else {
      bytes[at + j + 4]! |= (sc & 15) | ((m & 15) << 4);
      bytes[at + j - 4]! |= (sc >> 4) << 6;
      bytes[at + j]! |= (m >> 4) << 6;
    }
  }
  const sc = (j: number) => (j * 9 + 1) % 64;
  const mn = (j: number) => (j * 23 + 7) % 64;

  it.each(["Q4_K", "Q5_K"] as const)("%s: 8 sub-blocks of 32 with six-bit scales and mins; per 64 values low nibbles then high ones", (type) => {
    const { bytes } = block(type, { 0: 0.5, 2: 0.25 });
    for (let j = 0; j < 8; j++) putScaleMin(bytes, 4, j, sc(j), mn(j));
    const bits = type === "Q4_K" ? 4 : 5;
    const qs = type === "Q4_K" ? 16 : 48;
    for (let i = 0; i < 256; i++) {
      const chunk = i >> 6;
      const upper = (i >> 5) & 1;
      const l = i & 31;
      bytes[qs + 32 * chunk + l]! |= (code(i, bits) & 15) << (4 * upper);
      if (bits === 5 && code(i, 5) & 16) bytes[16 + l]! |= 1 << (2 * chunk + upper);
    }
    const want = Array.from({ length: 256 }, (_, i) => 0.5 * sc(i >> 5) * code(i, bits) - 0.25 * mn(i >> 5));
    expect(Array.from(dequantizeGgml(type, bytes, 256))).toEqual(want);
  });

  it("Q6_K: 16 int8 scales, six-bit codes minus 32 from ql's nibbles and qh's bit pairs", () => {
    const { bytes, view } = block("Q6_K", { 208: 0.5 });
    for (let s = 0; s < 16; s++) view.setInt8(192 + s, s - 8);
    for (let i = 0; i < 256; i++) {
      const n = i >> 7;
      const quarter = (i & 127) >> 5;
      const l = i & 31;
      const q = code(i, 6);
      bytes[64 * n + l + (quarter & 1) * 32]! |= (q & 15) << (quarter >> 1 ? 4 : 0);
      bytes[128 + 32 * n + l]! |= (q >> 4) << (2 * quarter);
    }
    const want = Array.from({ length: 256 }, (_, i) => 0.5 * ((i >> 4) - 8) * (code(i, 6) - 32));
    expect(Array.from(dequantizeGgml("Q6_K", bytes, 256))).toEqual(want);
  });
});

describe("ggml types", () => {
  it("names types and says which are decoded", () => {
    expect(ggmlTypeName(12)).toBe("Q4_K");
    expect(ggmlTypeName(99)).toBe("type 99");
    expect(decodedGgmlType(30)).toBe("BF16");
    expect(decodedGgmlType(16)).toBeUndefined();
  });

  it("refuses a byte length that does not hold the values", () => {
    expect(() => dequantizeGgml("Q4_K", new Uint8Array(143), 256)).toThrow("Q4_K: 143 bytes for 256 values (expected 144)");
    expect(() => dequantizeGgml("Q6_K", new Uint8Array(210), 100)).toThrow("Q6_K: 100 values is not a whole number of 256-value blocks");
  });
});
