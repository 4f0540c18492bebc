import {
  DataType,
  encodeModel,
  type AttributeValue,
  type ModelSpec,
  type NodeSpec,
  type TensorSpec,
  type ValueInfoSpec,
} from "./onnx-proto";

/**
 * A tiny ONNX graph builder: `op()` adds a node and returns its output name(s), initializers are
 * added from typed arrays without copying until the final encode.
 *
 * @example
 * const g = new GraphBuilder("demo");
 * const x = g.input("x", DataType.FLOAT, ["n", 4]);
 * g.output(g.op("Relu", [x]), DataType.FLOAT, ["n", 4]);
 * const bytes = g.encode();
 */
export class GraphBuilder {
  private nodes: NodeSpec[] = [];
  private initializers: TensorSpec[] = [];
  private inputs: ValueInfoSpec[] = [];
  private outputs: ValueInfoSpec[] = [];
  private counter = 0;
  private constants = new Map<string, string>();

  constructor(private readonly name: string) {}

  input(name: string, dataType: DataType, shape: (number | string)[]): string {
    this.inputs.push({ name, dataType, shape });
    return name;
  }

  output(value: string, dataType: DataType, shape: (number | string)[], name?: string): string {
    const outName = name ?? value;
    if (outName !== value) this.op("Identity", [value], { outputName: outName });
    this.outputs.push({ name: outName, dataType, shape });
    return outName;
  }

  /** Adds a float32 initializer (the array's bytes are referenced, not copied). */
  weight(name: string, data: Float32Array, dims: number[]): string {
    const expected = dims.reduce((a, b) => a * b, 1);
    if (expected !== data.length) throw new Error(`weight ${name}: ${data.length} values for dims [${dims}]`);
    this.initializers.push({
      name,
      dataType: DataType.FLOAT,
      dims,
      raw: new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
    });
    return name;
  }

  /** Adds a float16 initializer from already-encoded half words (referenced, not copied). */
  half(name: string, words: Uint16Array, dims: number[]): string {
    const expected = dims.reduce((a, b) => a * b, 1);
    if (expected !== words.length) throw new Error(`initializer ${name}: ${words.length} values for dims [${dims}]`);
    this.initializers.push({ name, dataType: DataType.FLOAT16, dims, raw: new Uint8Array(words.buffer, words.byteOffset, words.byteLength) });
    return name;
  }

  /** Adds a uint8 initializer (packed quantized weights; the bytes are referenced, not copied). */
  bytes(name: string, data: Uint8Array, dims: number[]): string {
    const expected = dims.reduce((a, b) => a * b, 1);
    if (expected !== data.length) throw new Error(`initializer ${name}: ${data.length} bytes for dims [${dims}]`);
    this.initializers.push({ name, dataType: DataType.UINT8, dims, raw: data });
    return name;
  }

  /** Adds an int8 initializer (integer GEMM weights; the bytes are referenced, not copied). */
  int8(name: string, data: Int8Array, dims: number[]): string {
    const expected = dims.reduce((a, b) => a * b, 1);
    if (expected !== data.length) throw new Error(`initializer ${name}: ${data.length} values for dims [${dims}]`);
    this.initializers.push({ name, dataType: DataType.INT8, dims, raw: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) });
    return name;
  }

  /** An int64 constant initializer, deduplicated by value. */
  int64s(values: number[]): string {
    const key = `i64:${values.join(",")}`;
    const existing = this.constants.get(key);
    if (existing) return existing;
    const name = `const_${this.constants.size}`;
    const data = BigInt64Array.from(values.map((v) => BigInt(v)));
    this.initializers.push({ name, dataType: DataType.INT64, dims: [values.length], raw: new Uint8Array(data.buffer) });
    this.constants.set(key, name);
    return name;
  }

  /** A float32 scalar constant, deduplicated by value. */
  scalar(value: number): string {
    const key = `f32:${value}`;
    const existing = this.constants.get(key);
    if (existing) return existing;
    const name = `const_${this.constants.size}`;
    const data = Float32Array.of(value);
    this.initializers.push({ name, dataType: DataType.FLOAT, dims: [], raw: new Uint8Array(data.buffer) });
    this.constants.set(key, name);
    return name;
  }

  op(
    opType: string,
    inputs: string[],
    options: { attributes?: Record<string, AttributeValue>; domain?: string; outputName?: string } = {},
  ): string {
    return this.opN(opType, inputs, 1, options)[0]!;
  }

  /** `emptyOutputs`: optional outputs left unnamed (not computed), returned as "". */
  opN(
    opType: string,
    inputs: string[],
    numOutputs: number,
    options: { attributes?: Record<string, AttributeValue>; domain?: string; outputName?: string; emptyOutputs?: number[] } = {},
  ): string[] {
    const id = this.counter++;
    const outputs = Array.from({ length: numOutputs }, (_, i) =>
      options.emptyOutputs?.includes(i) ? "" : i === 0 && options.outputName ? options.outputName : `${opType.toLowerCase()}_${id}_${i}`,
    );
    const node: NodeSpec = { opType, inputs, outputs, name: `${opType}_${id}` };
    if (options.attributes) node.attributes = options.attributes;
    if (options.domain) node.domain = options.domain;
    this.nodes.push(node);
    return outputs;
  }

  encode(opsetVersion = 17): Uint8Array {
    return encodeModel(this.spec(opsetVersion));
  }

  /** The model as `encode` writes it (nodes, initializers, inputs, outputs by reference): for graph tests. */
  spec(opsetVersion = 17): ModelSpec {
    return {
      graphName: this.name,
      nodes: this.nodes,
      initializers: this.initializers,
      inputs: this.inputs,
      outputs: this.outputs,
      opsets: [
        { domain: "", version: opsetVersion },
        { domain: "com.microsoft", version: 1 },
      ],
      irVersion: 8,
      producer: "agent-edge",
    };
  }
}

export { DataType };
