import * as ort from "onnxruntime-node";
import { describe, expect, it } from "vitest";
import { GraphBuilder, DataType } from "./graph-builder";
import { chunkedArgmax } from "./decoder-blocks";

/**
 * chunkedArgmax against ONNX ArgMax (first index on ties) on onnxruntime's CPU provider, on rows
 * built to hit the edge cases: ties inside a chunk, across chunks, at chunk borders, at the last
 * real entry next to the -inf padding, all-equal rows, -inf entries, widths divisible and not.
 */
async function compare(width: number, rows: Float32Array[]): Promise<{ got: number[]; want: number[] }> {
  const g = new GraphBuilder("argmax");
  const x = g.input("x", DataType.FLOAT, ["R", width]);
  g.output(chunkedArgmax(g, x, width), DataType.INT32, ["R"], "chunked");
  g.output(g.op("ArgMax", [x], { attributes: { axis: 1, keepdims: 0 } }), DataType.INT64, ["R"], "full");
  const session = await ort.InferenceSession.create(g.encode(), { executionProviders: ["cpu"], logSeverityLevel: 3 });
  const flat = new Float32Array(rows.length * width);
  rows.forEach((r, i) => flat.set(r, i * width));
  const out = await session.run({ x: new ort.Tensor("float32", flat, [rows.length, width]) });
  await session.release();
  return { got: [...(out.chunked!.data as Int32Array)], want: [...(out.full!.data as BigInt64Array)].map(Number) };
}

function rowsFor(width: number, seed: number): Float32Array[] {
  let s = seed;
  const rand = () => ((s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1;
  const C = Math.ceil(Math.sqrt(width));
  const rows: Float32Array[] = [];
  const random = () => Float32Array.from({ length: width }, rand);
  rows.push(random(), random());
  rows.push(new Float32Array(width).fill(0.5)); // all equal: index 0
  rows.push(new Float32Array(width).fill(-Infinity)); // all -inf: index 0, not padding
  for (const spots of [[width - 1], [0, width - 1], [C - 1, C], [C, 2 * C - 1], [width - 1, width - 2], [1, C + 1, width - 1], [Math.floor(width / 2), Math.floor(width / 2) + 1]]) {
    const r = random();
    for (const i of spots) if (i >= 0 && i < width) r[i] = 3; // ties at the maximum
    rows.push(r);
  }
  const low = new Float32Array(width).fill(-Infinity);
  low[width - 1] = -1e30; // only the last real entry is finite, right before the padding
  rows.push(low);
  return rows;
}

describe("chunkedArgmax", () => {
  for (const width of [1, 2, 3, 10, 97, 100, 101, 1000, 4099]) {
    it(`width ${width}: the same indices as ArgMax, ties to the lowest index`, async () => {
      const { got, want } = await compare(width, rowsFor(width, width));
      expect(got).toEqual(want);
    });
  }

  it("lays a 151,680-wide row out as 389 chunks of 390 (no reduction wider than 390)", () => {
    const g = new GraphBuilder("argmax");
    const x = g.input("x", DataType.FLOAT, ["R", 151680]);
    g.output(chunkedArgmax(g, x, 151680), DataType.INT32, ["R"], "y");
    const spec = g.spec();
    const reshape = spec.nodes.find((n) => n.opType === "Reshape")!;
    const dims = spec.initializers.find((t) => t.name === reshape.inputs[1])!;
    const shape = [...new BigInt64Array(dims.raw.buffer.slice(dims.raw.byteOffset, dims.raw.byteOffset + dims.raw.byteLength))].map(Number);
    expect(shape).toEqual([0, 389, 390]); // 389 chunks of 390 (151,710 with 30 -inf)
  });
});
