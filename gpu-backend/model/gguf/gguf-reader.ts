import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import type { QuantizedRows } from "../quant/block-quant";
import { DECODED_GGML_TYPES, decodedGgmlType, dequantizeGgml, ggmlByteLength, ggmlTypeName } from "./ggml-dequant";
import { decodeGgmlBlocks, ggmlQuantBytes, type GgmlQuantType } from "./ggml-quant-blocks";
import { GGML_TYPES, GGUF_DEFAULT_ALIGNMENT, GGUF_VALUE_TYPES, type GgufItemType, type GgufMetadata, type GgufValue } from "./gguf-writer";

/** One tensor's entry in a GGUF header. */
export interface GgufTensorInfo {
  name: string;
  /** Row-major shape, outermost first (the file's ne[] reversed). */
  shape: number[];
  /** ggml type id (0 = F32, 1 = F16, 2 = Q4_0, 8 = Q8_0, 30 = BF16, others quantized). */
  ggmlType: number;
  /** Absolute byte offset of the data in the file. */
  byteOffset: number;
}

/** A parsed GGUF file: header, metadata and tensor infos; tensor data read on demand. */
export interface GgufFile {
  version: number;
  metadata: GgufMetadata;
  tensors: GgufTensorInfo[];
  alignment: number;
  /** Absolute offset of the tensor data section. */
  dataOffset: number;
  /**
   * Reads a tensor as float32, dequantized as ggml does (every type of `DECODED_GGML_TYPES`:
   * F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K .. Q6_K; see ggml-dequant.ts).
   * @throws Error for an unknown name or another type
   */
  readTensor(name: string): Float32Array;
  /**
   * Reads a Q8_0 or Q4_0 tensor's codes and scales, as `quantizeRows` returns them (rows: every
   * outer dimension flattened). @throws Error for an unknown name or another type
   */
  readQuantized(name: string): QuantizedRows;
}

const ITEM_TYPE_NAMES = Object.fromEntries(Object.entries(GGUF_VALUE_TYPES).map(([name, id]) => [id, name])) as Record<number, keyof typeof GGUF_VALUE_TYPES>;

/**
 * Parses a GGUF (v2 or v3) file's header: metadata, tensor infos, alignment; tensor data is read
 * on demand. The GGUF loader (checkpoint/gguf-checkpoint.ts) and the tests read files through it.
 *
 * @throws Error for a bad magic, an unsupported version, an unknown value type, nested arrays,
 *         or a header that runs past the end of the file
 * @example
 * const file = readGguf("/tmp/x.gguf");
 * file.metadata["general.architecture"]; // { type: "string", value: "llama" }
 * file.readTensor("output_norm.weight");  // Float32Array
 * file.readQuantized("blk.0.attn_q.weight"); // { bits: 4, rows, cols, codes, scales } of a Q4_0 file
 */
export function readGguf(path: string): GgufFile {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    let window = Math.min(size, 1 << 20);
    for (;;) {
      const buf = new Uint8Array(window);
      readFully(fd, buf, 0);
      try {
        return parseHeader(path, buf, size);
      } catch (e) {
        if (!(e instanceof OutOfWindow) || window === size) throw e instanceof OutOfWindow ? new Error(`${path}: GGUF header runs past the end of the file`) : e;
        window = Math.min(size, window * 4);
      }
    }
  } finally {
    closeSync(fd);
  }
}

class OutOfWindow extends Error {}

function parseHeader(path: string, buf: Uint8Array, fileSize: number): GgufFile {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const decoder = new TextDecoder("utf-8", { fatal: true });
  let at = 0;
  const take = (n: number) => {
    if (at + n > buf.length) throw new OutOfWindow();
    const p = at;
    at += n;
    return p;
  };
  const u32 = () => view.getUint32(take(4), true);
  const u64 = () => {
    const v = view.getBigUint64(take(8), true);
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`${path}: a 64-bit count or size ${v} is too large`);
    return Number(v);
  };
  const string = () => {
    const n = u64();
    return decoder.decode(buf.subarray(take(n), at));
  };
  const item = (type: GgufItemType): number | boolean | string => {
    switch (type) {
      case "uint8": return view.getUint8(take(1));
      case "int8": return view.getInt8(take(1));
      case "uint16": return view.getUint16(take(2), true);
      case "int16": return view.getInt16(take(2), true);
      case "uint32": return view.getUint32(take(4), true);
      case "int32": return view.getInt32(take(4), true);
      case "float32": return view.getFloat32(take(4), true);
      case "bool": return view.getUint8(take(1)) !== 0;
      case "string": return string();
      case "uint64": return u64();
      case "int64": return Number(view.getBigInt64(take(8), true));
      case "float64": return view.getFloat64(take(8), true);
    }
  };
  const typeName = (id: number, key: string) => {
    const name = ITEM_TYPE_NAMES[id];
    if (name === undefined) throw new Error(`${path}: metadata ${key} has unknown value type ${id}`);
    return name;
  };

  const magic = decoder.decode(buf.subarray(take(4), at));
  if (magic !== "GGUF") throw new Error(`${path}: not a GGUF file (magic ${JSON.stringify(magic)})`);
  const version = u32();
  if (version !== 2 && version !== 3) throw new Error(`${path}: GGUF version ${version} is not supported (2 or 3)`);
  const tensorCount = u64();
  const kvCount = u64();
  const metadata: GgufMetadata = {};
  for (let i = 0; i < kvCount; i++) {
    const key = string();
    const type = typeName(u32(), key);
    if (type === "array") {
      const itemType = typeName(u32(), key);
      if (itemType === "array") throw new Error(`${path}: metadata ${key}: nested arrays are not supported`);
      const n = u64();
      const values: (number | boolean | string)[] = new Array(n);
      for (let j = 0; j < n; j++) values[j] = item(itemType);
      metadata[key] = { type: "array", itemType, value: values } as GgufValue;
    } else {
      metadata[key] = { type, value: item(type) } as GgufValue;
    }
  }
  const alignmentValue = metadata["general.alignment"];
  const alignment = alignmentValue?.type === "uint32" ? alignmentValue.value : GGUF_DEFAULT_ALIGNMENT;
  const infos: { name: string; shape: number[]; ggmlType: number; offset: number }[] = [];
  for (let i = 0; i < tensorCount; i++) {
    const name = string();
    const nDims = u32();
    const ne: number[] = [];
    for (let d = 0; d < nDims; d++) ne.push(u64());
    const ggmlType = u32();
    const offset = u64();
    infos.push({ name, shape: ne.reverse(), ggmlType, offset });
  }
  const dataOffset = Math.ceil(at / alignment) * alignment;
  const tensors = infos.map((t): GgufTensorInfo => {
    if (t.offset % alignment !== 0) throw new Error(`${path}: tensor ${t.name} offset ${t.offset} is not aligned to ${alignment}`);
    return { name: t.name, shape: t.shape, ggmlType: t.ggmlType, byteOffset: dataOffset + t.offset };
  });
  const byName = new Map(tensors.map((t) => [t.name, t]));

  return {
    version,
    metadata,
    tensors,
    alignment,
    dataOffset,
    readTensor(name) {
      const t = info(name);
      const type = decodedGgmlType(t.ggmlType);
      if (!type) throw new Error(`${path}: tensor ${name} has ggml type ${ggmlTypeName(t.ggmlType)} (${t.ggmlType}), which is not decoded (decoded: ${DECODED_GGML_TYPES.join(", ")})`);
      return dequantizeGgml(type, readBytes(t, ggmlByteLength(type, count(t))), count(t));
    },
    readQuantized(name) {
      return readQuantized(info(name));
    },
  };

  function info(name: string): GgufTensorInfo {
    const t = byName.get(name);
    if (!t) throw new Error(`${path}: no tensor ${name}`);
    return t;
  }
  function readQuantized(t: GgufTensorInfo): QuantizedRows {
    const type: GgmlQuantType | undefined = t.ggmlType === GGML_TYPES.Q8_0 ? "Q8_0" : t.ggmlType === GGML_TYPES.Q4_0 ? "Q4_0" : undefined;
    if (!type) throw new Error(`${path}: tensor ${t.name} has ggml type ${t.ggmlType}; only Q4_0 (2) and Q8_0 (8) hold quantized rows`);
    const cols = t.shape.at(-1)!;
    return decodeGgmlBlocks(type, readBytes(t, ggmlQuantBytes(type, count(t))), count(t) / cols, cols);
  }
  function readBytes(t: GgufTensorInfo, length: number): Uint8Array {
    const bytes = new Uint8Array(length);
    if (t.byteOffset + length > fileSize) throw new Error(`${path}: tensor ${t.name} runs past the end of the file`);
    const fd = openSync(path, "r");
    try {
      readFully(fd, bytes, t.byteOffset);
    } finally {
      closeSync(fd);
    }
    return bytes;
  }
}

function count(t: GgufTensorInfo): number {
  return t.shape.reduce((a, b) => a * b, 1);
}

function readFully(fd: number, into: Uint8Array, position: number): void {
  let done = 0;
  while (done < into.length) {
    const n = readSync(fd, into, done, into.length - done, position + done);
    if (n === 0) throw new Error("unexpected end of file");
    done += n;
  }
}
