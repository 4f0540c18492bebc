import { closeSync, openSync, renameSync, rmSync, writeSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { f32ToF16 } from "../quant/float-formats";
import type { QuantizedRows } from "../quant/block-quant";
import { encodeGgmlBlocks, ggmlQuantBytes, quantBitsOf, type GgmlQuantType } from "./ggml-quant-blocks";

/**
 * Writing GGUF v3 files (llama.cpp's model format), little-endian:
 *
 *   "GGUF" | u32 version = 3 | u64 tensor count | u64 metadata count
 *   metadata:     string key | u32 value type | value            (arrays: u32 item type | u64 n | items)
 *   tensor infos: string name | u32 n_dims | u64 ne[n_dims] | u32 ggml type | u64 offset
 *   padding to the alignment (general.alignment, default 32)
 *   tensor data:  each tensor at its offset (relative to the data start), padded to the alignment
 *
 * A string is a u64 byte length and UTF-8 bytes, no terminator. `ne[0]` is the innermost
 * (contiguous) dimension: a Hugging Face / numpy shape [rows, cols] is written as ne = [cols, rows],
 * with the same bytes. Every shape in this module's API is row-major (outermost first).
 */

/** GGUF metadata value types, by their names in llama.cpp's gguf.h. */
export const GGUF_VALUE_TYPES = {
  uint8: 0,
  int8: 1,
  uint16: 2,
  int16: 3,
  uint32: 4,
  int32: 5,
  float32: 6,
  bool: 7,
  string: 8,
  array: 9,
  uint64: 10,
  int64: 11,
  float64: 12,
} as const;

export type GgufNumberType = "uint8" | "int8" | "uint16" | "int16" | "uint32" | "int32" | "float32" | "uint64" | "int64" | "float64";
export type GgufItemType = GgufNumberType | "bool" | "string";

/** One metadata value. 64-bit integers are JS numbers (exact up to 2^53). */
export type GgufValue =
  | { type: GgufNumberType; value: number }
  | { type: "bool"; value: boolean }
  | { type: "string"; value: string }
  | { type: "array"; itemType: GgufNumberType; value: readonly number[] }
  | { type: "array"; itemType: "bool"; value: readonly boolean[] }
  | { type: "array"; itemType: "string"; value: readonly string[] };

/** Metadata in file order (insertion order of the keys). */
export type GgufMetadata = Record<string, GgufValue>;

/** ggml tensor types this project writes and reads (ids from ggml.h's enum ggml_type). */
export const GGML_TYPES = { F32: 0, F16: 1, Q4_0: 2, Q8_0: 8 } as const;
export type GgmlTensorType = keyof typeof GGML_TYPES;

/** Default and most common alignment of the tensor data (`general.alignment` when absent). */
export const GGUF_DEFAULT_ALIGNMENT = 32;

/**
 * One tensor: float values for F32 / F16, or `quantizeRows` output for Q8_0 / Q4_0 (8 / 4 bits;
 * its rows are the shape's inner dimension, every outer index flattened: an [E, N, K] expert
 * stack is E * N rows of K).
 */
export type GgufTensorToWrite =
  | {
      name: string;
      /** Row-major shape, outermost first (written reversed, as ne[]). */
      shape: readonly number[];
      type: "F32" | "F16";
      /** The row-major float32 values; called once, when this tensor's bytes are written. */
      data: () => Float32Array;
    }
  | {
      name: string;
      shape: readonly number[];
      type: GgmlQuantType;
      /** The quantized rows; called once, when this tensor's bytes are written. */
      data: () => QuantizedRows;
    };

/**
 * Shorthands for metadata values.
 *
 * @example
 * const metadata = { "general.architecture": gguf.string("llama"), "llama.block_count": gguf.uint32(2) };
 */
export const gguf = {
  uint32: (value: number): GgufValue => ({ type: "uint32", value }),
  int32: (value: number): GgufValue => ({ type: "int32", value }),
  uint64: (value: number): GgufValue => ({ type: "uint64", value }),
  float32: (value: number): GgufValue => ({ type: "float32", value }),
  bool: (value: boolean): GgufValue => ({ type: "bool", value }),
  string: (value: string): GgufValue => ({ type: "string", value }),
  strings: (value: readonly string[]): GgufValue => ({ type: "array", itemType: "string", value }),
  int32s: (value: readonly number[]): GgufValue => ({ type: "array", itemType: "int32", value }),
  float32s: (value: readonly number[]): GgufValue => ({ type: "array", itemType: "float32", value }),
};

/**
 * Writes a GGUF v3 file: the metadata in insertion order, then the tensors in the given order,
 * each aligned to `alignment` bytes (written as `general.alignment` when not the default 32).
 * F16 tensors are rounded to nearest even; Q8_0 / Q4_0 tensors are written as ggml blocks
 * (ggml-quant-blocks.ts) of the codes and scales given. The file is written under a temporary
 * name next to `path` and renamed into place.
 *
 * @throws Error for a value out of its type's range, a duplicate tensor name, a data length that
 *         does not match the shape, an inner dimension that is not a multiple of 32 for a quantized
 *         type, or quantized rows of the other bit width
 * @example
 * writeGguf("/tmp/x.gguf", {
 *   metadata: { "general.architecture": gguf.string("llama") },
 *   tensors: [{ name: "output_norm.weight", shape: [64], type: "F32", data: () => new Float32Array(64).fill(1) }],
 * });
 */
export function writeGguf(
  path: string,
  file: { metadata: GgufMetadata; tensors: readonly GgufTensorToWrite[]; alignment?: number; onTensor?: (done: number, total: number) => void },
): void {
  const alignment = file.alignment ?? GGUF_DEFAULT_ALIGNMENT;
  if (!Number.isInteger(alignment) || alignment <= 0 || alignment % 8 !== 0) throw new Error(`GGUF alignment must be a positive multiple of 8, got ${alignment}`);
  const metadata: GgufMetadata = { ...file.metadata };
  if (alignment !== GGUF_DEFAULT_ALIGNMENT) metadata["general.alignment"] = gguf.uint32(alignment);

  const out = new ByteWriter();
  out.bytes(new TextEncoder().encode("GGUF"));
  out.u32(3);
  out.u64(file.tensors.length);
  out.u64(Object.keys(metadata).length);
  for (const [key, value] of Object.entries(metadata)) {
    out.string(key);
    writeValue(out, key, value);
  }
  const names = new Set<string>();
  let offset = 0;
  const sizes: number[] = [];
  for (const t of file.tensors) {
    if (names.has(t.name)) throw new Error(`GGUF: duplicate tensor name ${t.name}`);
    names.add(t.name);
    if (t.shape.length === 0 || t.shape.some((d) => !Number.isInteger(d) || d <= 0)) throw new Error(`GGUF: tensor ${t.name} has a bad shape [${t.shape.join(", ")}]`);
    out.string(t.name);
    out.u32(t.shape.length);
    for (let d = t.shape.length - 1; d >= 0; d--) out.u64(t.shape[d]!);
    out.u32(GGML_TYPES[t.type]);
    out.u64(offset);
    const count = t.shape.reduce((a, b) => a * b, 1);
    if (t.type === "Q8_0" || t.type === "Q4_0") {
      if (t.shape.at(-1)! % 32 !== 0) throw new Error(`GGUF: ${t.type} tensor ${t.name} has rows of ${t.shape.at(-1)} values, not a multiple of 32`);
    }
    const size = t.type === "F32" ? count * 4 : t.type === "F16" ? count * 2 : ggmlQuantBytes(t.type, count);
    sizes.push(size);
    offset += alignUp(size, alignment);
  }
  out.pad(alignment);

  const tmp = join(dirname(path), `.${basename(path)}.tmp-${process.pid}-${Date.now()}`);
  const fd = openSync(tmp, "w");
  try {
    writeAll(fd, out.finish());
    const zeros = new Uint8Array(alignment);
    file.tensors.forEach((t, i) => {
      const bytes = tensorBytes(t);
      if (bytes.length !== sizes[i]) throw new Error(`GGUF: tensor ${t.name} has ${bytes.length} bytes of data, expected ${sizes[i]}`);
      writeAll(fd, bytes);
      const padding = alignUp(sizes[i]!, alignment) - sizes[i]!;
      if (padding > 0) writeAll(fd, zeros.subarray(0, padding));
      file.onTensor?.(i + 1, file.tensors.length);
    });
    closeSync(fd);
    renameSync(tmp, path);
  } catch (e) {
    try {
      closeSync(fd);
    } catch {
      // already closed
    }
    rmSync(tmp, { force: true });
    throw e;
  }
}

/** A tensor's data bytes. @throws Error for data that does not match its shape and type */
function tensorBytes(t: GgufTensorToWrite): Uint8Array {
  const count = t.shape.reduce((a, b) => a * b, 1);
  const shape = `[${t.shape.join(", ")}]`;
  if (t.type === "Q8_0" || t.type === "Q4_0") {
    const q = t.data();
    const cols = t.shape.at(-1)!;
    if (q.bits !== quantBitsOf(t.type)) throw new Error(`GGUF: tensor ${t.name} is ${t.type} but was given ${q.bits}-bit codes`);
    if (q.cols !== cols || q.rows !== count / cols) throw new Error(`GGUF: tensor ${t.name} was given [${q.rows}, ${q.cols}] quantized rows for shape ${shape}`);
    return encodeGgmlBlocks(q);
  }
  const values = (t as Extract<GgufTensorToWrite, { type: "F32" | "F16" }>).data();
  if (values.length !== count) throw new Error(`GGUF: tensor ${t.name} has ${values.length} values for shape ${shape}`);
  return t.type === "F32" ? new Uint8Array(values.buffer, values.byteOffset, values.byteLength) : new Uint8Array(f32ToF16(values).buffer);
}

/** `n` rounded up to a multiple of `alignment`. */
export function alignUp(n: number, alignment: number): number {
  return Math.ceil(n / alignment) * alignment;
}

function writeValue(out: ByteWriter, key: string, v: GgufValue): void {
  out.u32(GGUF_VALUE_TYPES[v.type]);
  if (v.type === "array") {
    out.u32(GGUF_VALUE_TYPES[v.itemType]);
    out.u64(v.value.length);
    for (const item of v.value) writeItem(out, key, v.itemType, item);
    return;
  }
  writeItem(out, key, v.type, v.value);
}

/** One metadata item, checked against its type (no closures: this runs once per vocabulary entry). */
function writeItem(out: ByteWriter, key: string, type: GgufItemType, item: number | boolean | string): void {
  if (type === "string") {
    if (typeof item !== "string") badItem(key, type, item);
    return out.string(item);
  }
  if (type === "bool") {
    if (typeof item !== "boolean") badItem(key, type, item);
    return out.u8(item ? 1 : 0);
  }
  if (typeof item !== "number" || Number.isNaN(item)) return badItem(key, type, item);
  if (type === "float32") return out.f32(item);
  if (type === "float64") return out.f64(item);
  const [min, max] = INT_RANGES[type];
  if (!Number.isInteger(item) || item < min || item > max) badItem(key, type, item);
  switch (type) {
    case "uint8": return out.u8(item);
    case "int8": return out.i8(item);
    case "uint16": return out.u16(item);
    case "int16": return out.i16(item);
    case "uint32": return out.u32(item);
    case "int32": return out.i32(item);
    case "uint64": return out.u64(item);
    case "int64": return out.i64(item);
  }
}

const INT_RANGES: Record<Exclude<GgufItemType, "string" | "bool" | "float32" | "float64">, [number, number]> = {
  uint8: [0, 0xff],
  int8: [-0x80, 0x7f],
  uint16: [0, 0xffff],
  int16: [-0x8000, 0x7fff],
  uint32: [0, 0xffffffff],
  int32: [-0x80000000, 0x7fffffff],
  uint64: [0, Number.MAX_SAFE_INTEGER],
  int64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
};

function badItem(key: string, type: GgufItemType, item: unknown): never {
  throw new Error(`GGUF: metadata ${key}: ${JSON.stringify(item)} is not a valid ${type}`);
}

function writeAll(fd: number, bytes: Uint8Array): void {
  let done = 0;
  while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done);
}

/** A growable little-endian byte buffer. */
class ByteWriter {
  #buf = new Uint8Array(1 << 16);
  #view = new DataView(this.#buf.buffer);
  #len = 0;
  readonly #encoder = new TextEncoder();

  #reserve(n: number): number {
    if (this.#len + n > this.#buf.length) {
      let size = this.#buf.length * 2;
      while (size < this.#len + n) size *= 2;
      const next = new Uint8Array(size);
      next.set(this.#buf.subarray(0, this.#len));
      this.#buf = next;
      this.#view = new DataView(next.buffer);
    }
    const at = this.#len;
    this.#len += n;
    return at;
  }
  // #reserve may replace the buffer: take the offset before touching the view.
  u8(v: number) { const at = this.#reserve(1); this.#view.setUint8(at, v); }
  i8(v: number) { const at = this.#reserve(1); this.#view.setInt8(at, v); }
  u16(v: number) { const at = this.#reserve(2); this.#view.setUint16(at, v, true); }
  i16(v: number) { const at = this.#reserve(2); this.#view.setInt16(at, v, true); }
  u32(v: number) { const at = this.#reserve(4); this.#view.setUint32(at, v, true); }
  i32(v: number) { const at = this.#reserve(4); this.#view.setInt32(at, v, true); }
  u64(v: number) { const at = this.#reserve(8); this.#view.setUint32(at, v % 0x100000000, true); this.#view.setUint32(at + 4, Math.floor(v / 0x100000000), true); }
  i64(v: number) { const at = this.#reserve(8); this.#view.setBigInt64(at, BigInt(v), true); }
  f32(v: number) { const at = this.#reserve(4); this.#view.setFloat32(at, v, true); }
  f64(v: number) { const at = this.#reserve(8); this.#view.setFloat64(at, v, true); }
  bytes(b: Uint8Array) { const at = this.#reserve(b.length); this.#buf.set(b, at); }
  /** A u64 byte length then the UTF-8 bytes, encoded in place (at most 3 bytes per UTF-16 unit). */
  string(s: string) {
    const at = this.#reserve(8 + 3 * s.length);
    const { written } = this.#encoder.encodeInto(s, this.#buf.subarray(at + 8));
    this.#len = at + 8 + written;
    this.#view.setUint32(at, written, true);
    this.#view.setUint32(at + 4, 0, true);
  }
  pad(alignment: number) { this.#reserve(alignUp(this.#len, alignment) - this.#len); }
  finish(): Uint8Array { return this.#buf.subarray(0, this.#len); }
}
