import { closeSync, fstatSync, openSync, readSync, renameSync, writeSync } from "node:fs";
import { ModelLoadError } from "./model-load-error";
import { f32ToBf16, f32ToF16, halfToF32Table } from "../quant/float-formats";

/** The float conversions live with the quantizer (quant/float-formats.ts); re-exported for readers of this file's API. */
export { bf16ToF32, f16ToF32, f32BitsToBf16, f32ToBf16, f32ToF16 } from "../quant/float-formats";

/**
 * Reading and writing `.safetensors` files:
 *
 *   [u64 LE: header length N][N bytes: JSON header, space-padded][tensor bytes ...]
 *
 * The header maps each tensor name to { dtype, shape, data_offsets: [begin, end] } with offsets
 * relative to the first byte after the header; an optional "__metadata__" maps strings to
 * strings. Reading opens the file at each `read` and reads only that tensor's bytes.
 */

/** The dtypes this project writes (U8: raw bytes, e.g. packed quantized weights; read with `readBytes`). */
export type SafetensorsDtype = "F32" | "F16" | "BF16" | "U8";

/** One tensor's entry in a safetensors header. */
export interface SafetensorsTensorInfo {
  /** The dtype as stored; only F32, F16 and BF16 can be `read`. */
  dtype: string;
  shape: number[];
  /** Absolute byte range in the file. */
  byteOffset: number;
  byteLength: number;
}

/** An open safetensors file: its header, and tensors read on demand. */
export interface SafetensorsFile {
  path: string;
  tensorNames: string[];
  metadata: Record<string, string>;
  /** @throws ModelLoadError when the file has no such tensor */
  info(name: string): SafetensorsTensorInfo;
  /** Reads one tensor, converted to float32. @throws ModelLoadError (no such tensor, dtype, I/O) */
  read(name: string): Float32Array;
  /** Reads one tensor's bytes as stored. @throws ModelLoadError (no such tensor, I/O) */
  readBytes(name: string): Uint8Array;
}

/** A tensor to write. `data` is float32 values, or, for F16/BF16, already-encoded 16-bit words, or for U8 bytes. */
export interface SafetensorsTensorToWrite {
  dtype: SafetensorsDtype;
  shape: number[];
  data: Float32Array | Uint16Array | Uint8Array;
}

const DTYPE_BYTES: Record<string, number> = {
  BOOL: 1, U8: 1, I8: 1, F8_E5M2: 1, F8_E4M3: 1, F8_E8M0: 1,
  I16: 2, U16: 2, F16: 2, BF16: 2,
  I32: 4, U32: 4, F32: 4,
  I64: 8, U64: 8, F64: 8,
};
const READABLE = new Set(["F32", "F16", "BF16"]);
const MAX_HEADER_BYTES = 100 * 1024 * 1024;

/**
 * Opens a safetensors file and validates its header: the header length fits the file, the JSON
 * parses, every tensor has a known dtype, a shape of non-negative integers, and data_offsets
 * inside the data section whose length equals shape × dtype size. Tensor bytes are not read.
 *
 * @throws ModelLoadError naming the file (and the tensor where one is at fault)
 * @example
 * const file = openSafetensors("/models/x/model.safetensors");
 * const embed = file.read("model.embed_tokens.weight"); // Float32Array
 * file.info("model.embed_tokens.weight").shape;          // [vocab, hidden]
 */
export function openSafetensors(path: string): SafetensorsFile {
  const fail = (detail: string): never => {
    throw new ModelLoadError(path, detail);
  };
  const fd = openFile(path);
  let headerText: string;
  let headerLength: number;
  let fileSize: number;
  try {
    fileSize = fstatSync(fd).size;
    if (fileSize < 8) fail(`not a safetensors file: ${fileSize} bytes, shorter than the 8-byte header length`);
    const lengthBytes = readExactly(fd, 0, 8, path);
    headerLength = Number(new DataView(lengthBytes.buffer).getBigUint64(0, true));
    if (8 + headerLength > fileSize) fail(`header length ${headerLength} runs past the end of the file (${fileSize} bytes): truncated or not a safetensors file`);
    if (headerLength > MAX_HEADER_BYTES) fail(`header length ${headerLength} is larger than ${MAX_HEADER_BYTES} bytes`);
    headerText = new TextDecoder().decode(readExactly(fd, 8, headerLength, path));
  } finally {
    closeSync(fd);
  }

  let header: unknown;
  try {
    header = JSON.parse(headerText);
  } catch (e) {
    return fail(`header is not valid JSON (${(e as Error).message})`);
  }
  if (typeof header !== "object" || header === null || Array.isArray(header)) return fail("header is not a JSON object");

  const dataStart = 8 + headerLength;
  const dataLength = fileSize - dataStart;
  const tensors = new Map<string, SafetensorsTensorInfo>();
  let metadata: Record<string, string> = {};
  for (const [name, entry] of Object.entries(header as Record<string, unknown>)) {
    if (name === "__metadata__") {
      if (typeof entry !== "object" || entry === null || Array.isArray(entry)) fail("__metadata__ must be an object");
      metadata = Object.fromEntries(Object.entries(entry as Record<string, unknown>).map(([k, v]) => [k, String(v)]));
      continue;
    }
    tensors.set(name, parseEntry(name, entry, dataStart, dataLength, fail));
  }

  const info = (name: string): SafetensorsTensorInfo => {
    const t = tensors.get(name);
    if (!t) return fail(`no tensor named ${name}`);
    return t;
  };
  return {
    path,
    tensorNames: [...tensors.keys()],
    metadata,
    info,
    readBytes(name) {
      const t = info(name);
      const out = new Uint8Array(t.byteLength);
      readInto(path, out, t.byteOffset);
      return out;
    },
    read(name) {
      const t = info(name);
      if (!READABLE.has(t.dtype)) fail(`tensor ${name} has dtype ${t.dtype}; only F32, F16 and BF16 are supported`);
      const out = new Float32Array(t.byteLength / DTYPE_BYTES[t.dtype]!);
      if (t.dtype === "F32") {
        readInto(path, new Uint8Array(out.buffer), t.byteOffset);
        return out;
      }
      // The 16-bit words are read into the upper half of the output and widened in place, front
      // to back: float i (bytes 4i..4i+3) is written after word i (bytes 2n+2i..) is read.
      const n = out.length;
      readInto(path, new Uint8Array(out.buffer, 2 * n, 2 * n), t.byteOffset);
      const words = new Uint16Array(out.buffer);
      const bits = new Uint32Array(out.buffer);
      if (t.dtype === "BF16") {
        for (let i = 0; i < n; i++) bits[i] = words[n + i]! << 16;
      } else {
        const table = halfToF32Table();
        for (let i = 0; i < n; i++) out[i] = table[words[n + i]!]!;
      }
      return out;
    },
  };
}

/**
 * Writes a safetensors file (tensors in the given order, header padded to 8 bytes). F16 and BF16
 * values given as float32 are rounded to nearest, ties to even; a Uint16Array is written as is.
 * The file is written next to `path` and renamed over it, so readers never see half a file.
 *
 * @example
 * writeSafetensors("/tmp/w.safetensors", {
 *   "model.norm.weight": { dtype: "BF16", shape: [4], data: new Float32Array([1, 1, 1, 1]) },
 * }, { format: "pt" });
 */
export function writeSafetensors(path: string, tensors: Record<string, SafetensorsTensorToWrite>, metadata: Record<string, string> = { format: "pt" }): void {
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const [name, t] of Object.entries(tensors)) {
    const count = t.shape.reduce((a, b) => a * b, 1);
    if (t.data.length !== count) throw new Error(`writeSafetensors: ${name} has ${t.data.length} values but shape [${t.shape.join(", ")}] holds ${count}`);
    if (t.data instanceof Uint16Array && t.dtype === "F32") throw new Error(`writeSafetensors: ${name} is F32 but its data is 16-bit words`);
    if ((t.data instanceof Uint8Array) !== (t.dtype === "U8")) throw new Error(`writeSafetensors: ${name} is ${t.dtype}; U8 tensors and only they take a Uint8Array`);
    const bytes = count * DTYPE_BYTES[t.dtype]!;
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let headerBytes = Buffer.from(JSON.stringify(header), "utf8");
  const padding = (8 - (headerBytes.length % 8)) % 8;
  if (padding > 0) headerBytes = Buffer.concat([headerBytes, Buffer.alloc(padding, 0x20)]);

  const tmp = `${path}.tmp-${process.pid}`;
  const fd = openSync(tmp, "w");
  try {
    const prefix = Buffer.alloc(8);
    prefix.writeBigUInt64LE(BigInt(headerBytes.length));
    writeAll(fd, prefix);
    writeAll(fd, headerBytes);
    for (const t of Object.values(tensors)) {
      const data = encode(t);
      writeAll(fd, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    }
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
}



function encode(t: SafetensorsTensorToWrite): Float32Array | Uint16Array | Uint8Array {
  if (t.dtype === "F32" || t.dtype === "U8" || !(t.data instanceof Float32Array)) return t.data;
  return t.dtype === "F16" ? f32ToF16(t.data) : f32ToBf16(t.data);
}

function parseEntry(name: string, entry: unknown, dataStart: number, dataLength: number, fail: (detail: string) => never): SafetensorsTensorInfo {
  if (typeof entry !== "object" || entry === null || Array.isArray(entry)) return fail(`tensor ${name}: header entry is not an object`);
  const { dtype, shape, data_offsets: offsets } = entry as Record<string, unknown>;
  if (typeof dtype !== "string" || DTYPE_BYTES[dtype] === undefined) return fail(`tensor ${name} has unknown dtype ${JSON.stringify(dtype)}`);
  if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= 0)) return fail(`tensor ${name} has an invalid shape ${JSON.stringify(shape)}`);
  if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isInteger(o) && o >= 0) || offsets[0] > offsets[1]) {
    return fail(`tensor ${name} has invalid data_offsets ${JSON.stringify(offsets)}`);
  }
  const [begin, end] = offsets as [number, number];
  const expected = (shape as number[]).reduce((a, b) => a * b, 1) * DTYPE_BYTES[dtype]!;
  if (end - begin !== expected) {
    return fail(`tensor ${name}: data_offsets [${begin}, ${end}] hold ${end - begin} bytes but ${dtype} [${shape.join(", ")}] needs ${expected}`);
  }
  if (end > dataLength) return fail(`tensor ${name}: data_offsets [${begin}, ${end}] run past the end of the data (${dataLength} bytes): the file is truncated`);
  return { dtype, shape: shape as number[], byteOffset: dataStart + begin, byteLength: expected };
}

function openFile(path: string): number {
  try {
    return openSync(path, "r");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new ModelLoadError(path, code === "ENOENT" ? "file not found" : `cannot open (${(e as Error).message})`, { cause: e });
  }
}

function readExactly(fd: number, position: number, length: number, path: string): Uint8Array {
  const bytes = new Uint8Array(length);
  fillFrom(fd, bytes, position, path);
  return bytes;
}

function readInto(path: string, target: Uint8Array, position: number): void {
  const fd = openFile(path);
  try {
    fillFrom(fd, target, position, path);
  } finally {
    closeSync(fd);
  }
}

function fillFrom(fd: number, target: Uint8Array, position: number, path: string): void {
  const chunk = 1 << 30;
  let done = 0;
  while (done < target.length) {
    const n = readSync(fd, target, done, Math.min(chunk, target.length - done), position + done);
    if (n === 0) throw new ModelLoadError(path, `unexpected end of file at byte ${position + done}: the file is truncated`);
    done += n;
  }
}

function writeAll(fd: number, bytes: Uint8Array): void {
  let done = 0;
  while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done);
}
