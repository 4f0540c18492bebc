import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dequantizeRows, quantizeRows } from "../quant/block-quant";
import { readGguf } from "./gguf-reader";
import { gguf, writeGguf, type GgufMetadata } from "./gguf-writer";

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "gguf-writer-"));
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("writeGguf / readGguf", () => {
  const metadata: GgufMetadata = {
    "general.architecture": gguf.string("llama"),
    "general.name": gguf.string("tiny ✨ 模型"),
    "llama.block_count": gguf.uint32(2),
    "llama.rope.freq_base": gguf.float32(500000),
    "test.u8": { type: "uint8", value: 255 },
    "test.i8": { type: "int8", value: -128 },
    "test.u16": { type: "uint16", value: 65535 },
    "test.i16": { type: "int16", value: -32768 },
    "test.i32": gguf.int32(-2147483648),
    "test.u64": gguf.uint64(2 ** 40 + 3),
    "test.i64": { type: "int64", value: -(2 ** 41) },
    "test.f64": { type: "float64", value: Math.PI },
    "test.bool": gguf.bool(true),
    "tokenizer.ggml.tokens": gguf.strings(["<|im_start|>", "Ġworld", "", "你好", "[PAD4]"]),
    "tokenizer.ggml.token_type": gguf.int32s([3, 1, 1, 1, 5]),
    "test.floats": gguf.float32s([0.5, -1.25, 3]),
    "test.bools": { type: "array", itemType: "bool", value: [true, false] },
  };
  const a = Float32Array.from({ length: 3 * 5 }, (_, i) => i - 7.5);
  const b = Float32Array.from({ length: 7 }, (_, i) => 1 / (i + 1));
  const c = Float32Array.from({ length: 2 * 3 * 4 }, (_, i) => i * 0.25);

  it("round-trips metadata of every value type, in order, and tensor infos and data", () => {
    const path = join(dir, "all.gguf");
    writeGguf(path, {
      metadata,
      tensors: [
        { name: "a.weight", shape: [3, 5], type: "F32", data: () => a },
        { name: "b.bias", shape: [7], type: "F32", data: () => b },
        { name: "c.weight", shape: [2, 3, 4], type: "F16", data: () => c },
      ],
    });
    const file = readGguf(path);
    expect(file.version).toBe(3);
    expect(file.alignment).toBe(32);
    expect(Object.keys(file.metadata)).toEqual(Object.keys(metadata));
    for (const [key, value] of Object.entries(metadata)) {
      if (value.type === "float32") expect(file.metadata[key], key).toEqual({ ...value, value: Math.fround(value.value) });
      else expect(file.metadata[key], key).toEqual(value);
    }
    expect(file.tensors.map((t) => [t.name, t.shape, t.ggmlType])).toEqual([
      ["a.weight", [3, 5], 0],
      ["b.bias", [7], 0],
      ["c.weight", [2, 3, 4], 1],
    ]);
    for (const t of file.tensors) expect(t.byteOffset % 32, t.name).toBe(0);
    expect(file.dataOffset % 32).toBe(0);
    expect(file.readTensor("a.weight")).toEqual(a);
    expect(file.readTensor("b.bias")).toEqual(b);
    expect(file.readTensor("c.weight")).toEqual(c); // multiples of 0.25 below 6: exact in F16
    expect(readdirSync(dir).filter((f) => f.includes(".tmp-"))).toEqual([]);
  });

  it("lays out the header bytes as GGUF v3 (magic, version, counts, ne reversed, 32-byte data)", () => {
    const path = join(dir, "layout.gguf");
    writeGguf(path, {
      metadata: { k: gguf.uint32(7) },
      tensors: [{ name: "t", shape: [2, 3], type: "F32", data: () => new Float32Array(6).fill(1) }],
    });
    const bytes = readFileSync(path);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    expect(bytes.subarray(0, 4).toString("latin1")).toBe("GGUF");
    expect(view.getUint32(4, true)).toBe(3);
    expect(view.getBigUint64(8, true)).toBe(1n); // tensors
    expect(view.getBigUint64(16, true)).toBe(1n); // metadata
    // kv: u64 key length 1, "k", u32 type 4 (uint32), u32 value 7
    expect(view.getBigUint64(24, true)).toBe(1n);
    expect(String.fromCharCode(bytes[32]!)).toBe("k");
    expect(view.getUint32(33, true)).toBe(4);
    expect(view.getUint32(37, true)).toBe(7);
    // tensor info: name "t", n_dims 2, ne = [3, 2], type 0, offset 0
    expect(view.getBigUint64(41, true)).toBe(1n);
    expect(view.getUint32(50, true)).toBe(2);
    expect([view.getBigUint64(54, true), view.getBigUint64(62, true)]).toEqual([3n, 2n]);
    expect(view.getUint32(70, true)).toBe(0);
    expect(view.getBigUint64(74, true)).toBe(0n);
    // header ends at 82, data starts at 96, 6 floats = 24 bytes padded to 32
    expect(bytes.length).toBe(96 + 32);
    expect(view.getFloat32(96, true)).toBe(1);
    expect(bytes.subarray(82, 96).every((x) => x === 0)).toBe(true);
  });

  it("writes general.alignment for a non-default alignment and aligns every tensor to it", () => {
    const path = join(dir, "align.gguf");
    writeGguf(path, {
      metadata: {},
      alignment: 64,
      tensors: [
        { name: "x", shape: [3], type: "F32", data: () => new Float32Array(3) },
        { name: "y", shape: [5], type: "F16", data: () => new Float32Array(5).fill(2) },
      ],
    });
    const file = readGguf(path);
    expect(file.metadata["general.alignment"]).toEqual(gguf.uint32(64));
    expect(file.tensors.map((t) => t.byteOffset % 64)).toEqual([0, 0]);
    expect(file.tensors[1]!.byteOffset - file.tensors[0]!.byteOffset).toBe(64);
    expect(file.readTensor("y")).toEqual(new Float32Array(5).fill(2));
  });

  it("reads a header larger than its first read window (a long token list)", () => {
    const path = join(dir, "long.gguf");
    const tokens = Array.from({ length: 80_000 }, (_, i) => `token-${i}-ĠĊ`);
    writeGguf(path, { metadata: { "tokenizer.ggml.tokens": gguf.strings(tokens) }, tensors: [] });
    const value = readGguf(path).metadata["tokenizer.ggml.tokens"];
    expect(value?.type === "array" && value.value.length).toBe(80_000);
    expect(value?.type === "array" && value.value[79_999]).toBe("token-79999-ĠĊ");
  });

  it("keeps a leading U+FEFF in strings (vocabulary pieces such as Gemma's \"\\ufeff#\")", () => {
    const path = join(dir, "bom.gguf");
    writeGguf(path, { metadata: { "tokenizer.ggml.tokens": gguf.strings(["\ufeff", "\ufeff#", "#"]) }, tensors: [] });
    expect(readGguf(path).metadata["tokenizer.ggml.tokens"]?.value).toEqual(["\ufeff", "\ufeff#", "#"]);
  });

  it("rejects values out of range, duplicate names and data of the wrong length, leaving no file", () => {
    const path = join(dir, "bad.gguf");
    expect(() => writeGguf(path, { metadata: { x: gguf.uint32(-1) }, tensors: [] })).toThrow(/x: -1 is not a valid uint32/);
    expect(() => writeGguf(path, { metadata: { x: { type: "uint8", value: 256 } }, tensors: [] })).toThrow(/not a valid uint8/);
    const t = { name: "t", shape: [2], type: "F32" as const, data: () => new Float32Array(2) };
    expect(() => writeGguf(path, { metadata: {}, tensors: [t, t] })).toThrow(/duplicate tensor name t/);
    expect(() => writeGguf(path, { metadata: {}, tensors: [{ ...t, data: () => new Float32Array(3) }] })).toThrow(/3 values for shape \[2\]/);
    expect(readdirSync(dir).filter((f) => f.startsWith("bad") || f.includes(".tmp-"))).toEqual([]);
  });

  it("rejects a file that is not GGUF", () => {
    const path = join(dir, "not.gguf");
    writeGguf(path, { metadata: {}, tensors: [] });
    const bytes = readFileSync(path);
    bytes.write("GGML", 0, "latin1");
    const bad = join(dir, "not2.gguf");
    writeFileSync(bad, bytes);
    expect(() => readGguf(bad)).toThrow(/not a GGUF file/);
  });
});

describe("writeGguf / readGguf: Q8_0 and Q4_0 blocks", () => {
  /** Seeded values with a spread of magnitudes, so blocks get different scales. */
  const values = (n: number, seed: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37 + seed) * (1 + (i % 97) / 13));

  it("round-trips the codes and scales exactly, 2-D and 3-D (an expert stack), aligned after odd-sized tensors", () => {
    const path = join(dir, "quant.gguf");
    const w8 = values(3 * 64, 1);
    const w4 = values(2 * 3 * 32, 2);
    const q8 = quantizeRows(w8, 3, 64, 8);
    const q4 = quantizeRows(w4, 6, 32, 4);
    writeGguf(path, {
      metadata: {},
      tensors: [
        { name: "q8", shape: [3, 64], type: "Q8_0", data: () => q8 },
        { name: "n", shape: [5], type: "F32", data: () => new Float32Array(5).fill(0.5) },
        { name: "q4", shape: [2, 3, 32], type: "Q4_0", data: () => q4 },
      ],
    });
    const file = readGguf(path);
    expect(file.tensors.map((t) => [t.name, t.shape, t.ggmlType])).toEqual([
      ["q8", [3, 64], 8],
      ["n", [5], 0],
      ["q4", [2, 3, 32], 2],
    ]);
    for (const t of file.tensors) expect(t.byteOffset % 32, t.name).toBe(0);
    // 6 blocks * 34 bytes = 204, padded to 224; then 5 floats padded to 32.
    expect(file.tensors[1]!.byteOffset - file.tensors[0]!.byteOffset).toBe(224);
    expect(file.tensors[2]!.byteOffset - file.tensors[1]!.byteOffset).toBe(32);
    expect(file.readQuantized("q8")).toEqual(q8);
    expect(file.readQuantized("q4")).toEqual(q4);
    expect(file.readTensor("q8")).toEqual(dequantizeRows(q8));
    expect(file.readTensor("q4")).toEqual(dequantizeRows(q4));
    expect(file.readTensor("n")).toEqual(new Float32Array(5).fill(0.5));
    expect(() => file.readQuantized("n")).toThrow(/only Q4_0 \(2\) and Q8_0 \(8\) hold quantized rows/);
    expect(statSync(path).size).toBe(file.tensors[2]!.byteOffset + 128); // 6 blocks * 18 = 108 bytes, padded to 128
  });

  it("lays out ggml's blocks: fp16 d, then int8 code - 128 (Q8_0) or byte j = code[j] | code[j + 16] << 4 (Q4_0)", () => {
    const path = join(dir, "blocks.gguf");
    // Q8_0: max |x| = 127 gives d = 1, so x = j - 16 has code j - 16 + 128 and int8 byte j - 16.
    const w8 = Float32Array.from({ length: 32 }, (_, j) => (j === 31 ? 127 : j - 16));
    // Q4_0: the largest-magnitude value -8 gives d = -8 / -8 = 1; code = trunc(x + 8.5): 0..15 in
    // the first half, 15..0 in the second.
    const w4 = Float32Array.from({ length: 32 }, (_, j) => (j < 16 ? j - 8 : 7 - (j - 16)));
    const q8 = quantizeRows(w8, 1, 32, 8);
    const q4 = quantizeRows(w4, 1, 32, 4);
    expect(Array.from(q4.codes.subarray(0, 16))).toEqual(Array.from({ length: 16 }, (_, j) => j));
    writeGguf(path, {
      metadata: {},
      tensors: [
        { name: "a", shape: [1, 32], type: "Q8_0", data: () => q8 },
        { name: "b", shape: [1, 32], type: "Q4_0", data: () => q4 },
      ],
    });
    const file = readGguf(path);
    const bytes = readFileSync(path);
    const a = bytes.subarray(file.tensors[0]!.byteOffset, file.tensors[0]!.byteOffset + 34);
    const b = bytes.subarray(file.tensors[1]!.byteOffset, file.tensors[1]!.byteOffset + 18);
    expect([a[0], a[1]]).toEqual([0x00, 0x3c]); // fp16 1.0, little-endian
    expect(Array.from(new Int8Array(a.buffer, a.byteOffset + 2, 32))).toEqual(Array.from({ length: 32 }, (_, j) => (j === 31 ? 127 : j - 16)));
    expect([b[0], b[1]]).toEqual([0x00, 0x3c]);
    expect(Array.from(b.subarray(2))).toEqual(Array.from({ length: 16 }, (_, j) => j | ((15 - j) << 4)));
    expect(file.readTensor("b")).toEqual(w4.map((x) => (x === 7.5 ? 7 : x))); // exact: integers -8..7
  });

  it("rejects rows that are not a multiple of 32, codes of the other bit width and rows that do not match the shape", () => {
    const path = join(dir, "bad-quant.gguf");
    const q4 = quantizeRows(values(64, 3), 2, 32, 4);
    expect(() => writeGguf(path, { metadata: {}, tensors: [{ name: "x", shape: [4, 16], type: "Q4_0", data: () => q4 }] })).toThrow(/rows of 16 values, not a multiple of 32/);
    expect(() => writeGguf(path, { metadata: {}, tensors: [{ name: "x", shape: [2, 32], type: "Q8_0", data: () => q4 }] })).toThrow(/is Q8_0 but was given 4-bit codes/);
    expect(() => writeGguf(path, { metadata: {}, tensors: [{ name: "x", shape: [1, 64], type: "Q4_0", data: () => q4 }] })).toThrow(/given \[2, 32\] quantized rows for shape \[1, 64\]/);
    expect(readdirSync(dir).filter((f) => f.startsWith("bad-quant") || f.includes(".tmp-"))).toEqual([]);
  });
});
