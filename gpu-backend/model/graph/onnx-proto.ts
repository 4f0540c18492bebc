/**
 * A minimal ONNX protobuf writer: just the messages a decoder graph needs (ModelProto, GraphProto,
 * NodeProto, AttributeProto, TensorProto, ValueInfoProto). Field numbers follow onnx/onnx.proto.
 *
 * Messages are encoded bottom-up into lists of byte chunks so that large initializers (hundreds
 * of MB) are copied exactly once, into the final buffer.
 */

export const enum DataType {
  FLOAT = 1,
  UINT8 = 2,
  INT8 = 3,
  INT32 = 6,
  INT64 = 7,
  BOOL = 9,
  FLOAT16 = 10,
}

export type AttributeValue = number | bigint | string | number[] | { ints: number[] } | { float: number };

export interface NodeSpec {
  opType: string;
  inputs: string[];
  outputs: string[];
  name: string;
  domain?: string;
  attributes?: Record<string, AttributeValue>;
}

export interface TensorSpec {
  name: string;
  dataType: DataType;
  dims: number[];
  /** Raw little-endian bytes of the tensor. */
  raw: Uint8Array;
}

export interface ValueInfoSpec {
  name: string;
  dataType: DataType;
  /** A number is a fixed size, a string a symbolic dimension. */
  shape: (number | string)[];
}

export interface ModelSpec {
  graphName: string;
  nodes: NodeSpec[];
  initializers: TensorSpec[];
  inputs: ValueInfoSpec[];
  outputs: ValueInfoSpec[];
  opsets: { domain: string; version: number }[];
  irVersion: number;
  producer: string;
}

/**
 * Serialize a model to ONNX protobuf bytes.
 *
 * @example
 * const bytes = encodeModel({ graphName: "g", nodes, initializers, inputs, outputs,
 *   opsets: [{ domain: "", version: 17 }], irVersion: 8, producer: "agent-edge" });
 * await InferenceSession.create(bytes);
 */
export function encodeModel(spec: ModelSpec): Uint8Array {
  const graph = new Message();
  for (const n of spec.nodes) graph.message(1, encodeNode(n));
  graph.string(2, spec.graphName);
  for (const t of spec.initializers) graph.message(5, encodeTensor(t));
  for (const v of spec.inputs) graph.message(11, encodeValueInfo(v));
  for (const v of spec.outputs) graph.message(12, encodeValueInfo(v));

  const model = new Message();
  model.varint(1, spec.irVersion);
  model.string(2, spec.producer);
  model.string(3, "1");
  model.message(7, graph);
  for (const o of spec.opsets) {
    const opset = new Message();
    if (o.domain) opset.string(1, o.domain);
    opset.varint(2, o.version);
    model.message(8, opset);
  }
  return model.finish();
}

function encodeNode(n: NodeSpec): Message {
  const m = new Message();
  for (const i of n.inputs) m.string(1, i);
  for (const o of n.outputs) m.string(2, o);
  m.string(3, n.name);
  m.string(4, n.opType);
  for (const [name, value] of Object.entries(n.attributes ?? {})) m.message(5, encodeAttribute(name, value));
  if (n.domain) m.string(7, n.domain);
  return m;
}

const ATTR_FLOAT = 1;
const ATTR_INT = 2;
const ATTR_STRING = 3;
const ATTR_INTS = 7;

function encodeAttribute(name: string, value: AttributeValue): Message {
  const m = new Message();
  m.string(1, name);
  if (typeof value === "number") {
    if (!Number.isInteger(value)) throw new Error(`attribute ${name}: use { float } for non-integers`);
    m.varint(3, value);
    m.varint(20, ATTR_INT);
  } else if (typeof value === "bigint") {
    m.varint(3, value);
    m.varint(20, ATTR_INT);
  } else if (typeof value === "string") {
    m.string(4, value);
    m.varint(20, ATTR_STRING);
  } else if (Array.isArray(value) || "ints" in value) {
    const ints = Array.isArray(value) ? value : value.ints;
    for (const v of ints) m.varint(8, v);
    m.varint(20, ATTR_INTS);
  } else {
    m.float32(2, value.float);
    m.varint(20, ATTR_FLOAT);
  }
  return m;
}

function encodeTensor(t: TensorSpec): Message {
  const m = new Message();
  for (const d of t.dims) m.varint(1, d);
  m.varint(2, t.dataType);
  m.string(8, t.name);
  m.bytes(9, t.raw);
  return m;
}

function encodeValueInfo(v: ValueInfoSpec): Message {
  const shape = new Message();
  for (const d of v.shape) {
    const dim = new Message();
    if (typeof d === "number") dim.varint(1, d);
    else dim.string(2, d);
    shape.message(1, dim);
  }
  const tensorType = new Message();
  tensorType.varint(1, v.dataType);
  tensorType.message(2, shape);
  const type = new Message();
  type.message(1, tensorType);
  const m = new Message();
  m.string(1, v.name);
  m.message(2, type);
  return m;
}

const textEncoder = new TextEncoder();

/** A protobuf message under construction: a list of chunks and their total length. */
class Message {
  private chunks: Uint8Array[] = [];
  length = 0;
  private scratch: number[] = [];

  varint(field: number, value: number | bigint): void {
    this.tag(field, 0);
    this.rawVarint(BigInt(value));
    this.flush();
  }

  float32(field: number, value: number): void {
    this.tag(field, 5);
    this.flush();
    const b = new Uint8Array(4);
    new DataView(b.buffer).setFloat32(0, value, true);
    this.push(b);
  }

  string(field: number, value: string): void {
    this.bytes(field, textEncoder.encode(value));
  }

  bytes(field: number, value: Uint8Array): void {
    this.tag(field, 2);
    this.rawVarint(BigInt(value.length));
    this.flush();
    this.push(value);
  }

  message(field: number, sub: Message): void {
    this.tag(field, 2);
    this.rawVarint(BigInt(sub.length));
    this.flush();
    for (const c of sub.chunks) this.push(c);
  }

  finish(): Uint8Array {
    const out = new Uint8Array(this.length);
    let offset = 0;
    for (const c of this.chunks) {
      out.set(c, offset);
      offset += c.length;
    }
    return out;
  }

  private tag(field: number, wireType: number): void {
    this.rawVarint(BigInt((field << 3) | wireType));
  }

  private rawVarint(v: bigint): void {
    // Negative int64 values are written as 10-byte two's complement, as protobuf requires.
    let x = v < 0n ? (1n << 64n) + v : v;
    while (x >= 0x80n) {
      this.scratch.push(Number(x & 0x7fn) | 0x80);
      x >>= 7n;
    }
    this.scratch.push(Number(x));
  }

  private flush(): void {
    if (this.scratch.length === 0) return;
    this.push(Uint8Array.from(this.scratch));
    this.scratch = [];
  }

  private push(c: Uint8Array): void {
    this.chunks.push(c);
    this.length += c.length;
  }
}
