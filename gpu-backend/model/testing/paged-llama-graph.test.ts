import { describe, expect, it } from "vitest";
import { PAGED_IO, buildPagedLlamaGraph } from "../graph/paged-llama-graph";
import { DataType, type ModelSpec } from "../graph/onnx-proto";
import { randomWeights } from "./random-weights";
import { tinySpec } from "./tiny-spec";

type Dim = number | string;
const REDUCTIONS = ["ArgMax", "ArgMin", "ReduceMax", "ReduceMin"];

/** Numpy broadcasting of static shapes (a symbolic dim matches itself or 1). */
function broadcast(shapes: Dim[][]): Dim[] {
  const rank = Math.max(...shapes.map((s) => s.length));
  return Array.from({ length: rank }, (_, i) => {
    const dims = shapes.map((s) => s[s.length - rank + i] ?? 1).filter((d) => d !== 1);
    return dims[0] ?? 1;
  });
}

/**
 * The reduced width of every ArgMax / ArgMin / ReduceMax / ReduceMin whose input shape is known,
 * tracing static shapes forward from the declared graph outputs (the logits [R, vocab]) and the
 * initializers through the LM head's argmax ops; an ArgMax whose input stays unknown is reported
 * with width undefined.
 */
function reductionWidths(graph: ModelSpec): { node: string; op: string; width: Dim | undefined }[] {
  const shapes = new Map<string, Dim[]>();
  for (const o of graph.outputs) shapes.set(o.name, o.shape);
  for (const t of graph.initializers) shapes.set(t.name, t.dims);
  for (const n of graph.nodes) if (n.opType === "Identity" && shapes.has(n.outputs[0]!)) shapes.set(n.inputs[0]!, shapes.get(n.outputs[0]!)!);
  const ints = (name: string) => {
    const t = graph.initializers.find((i) => i.name === name);
    return t && t.dataType === DataType.INT64 ? [...new BigInt64Array(t.raw.slice().buffer)].map(Number) : undefined;
  };
  const widths: { node: string; op: string; width: Dim | undefined }[] = [];
  for (const n of graph.nodes) {
    const x = shapes.get(n.inputs[0]!);
    let out: Dim[] | undefined;
    if (REDUCTIONS.includes(n.opType)) {
      const arg = n.opType.startsWith("Arg");
      const axes = (arg ? [Number(n.attributes?.axis ?? 0)] : (n.attributes?.axes as number[])).map((a) => (x && a < 0 ? x.length + a : a));
      if (x || arg) widths.push({ node: n.name, op: n.opType, width: x?.[axes[0]!] });
      const keep = Number(n.attributes?.keepdims ?? 1) === 1;
      if (x) out = keep ? x.map((d, i) => (axes.includes(i) ? 1 : d)) : x.filter((_, i) => !axes.includes(i));
    } else if (!x) {
      continue;
    } else if (n.opType === "Pad") {
      const pads = ints(n.inputs[1]!);
      if (pads) out = x.map((d, i) => (typeof d === "number" ? d + pads[i]! + pads[i + x.length]! : d));
    } else if (n.opType === "Reshape") {
      const to = ints(n.inputs[1]!);
      if (to && !to.includes(-1)) out = to.map((d, i) => (d === 0 ? x[i]! : d));
    } else if (["Equal", "Where", "Add", "Cast"].includes(n.opType)) {
      const ins = n.inputs.map((i) => shapes.get(i));
      if (ins.every((s) => s)) out = broadcast(ins as Dim[][]);
    }
    if (out) shapes.set(n.outputs[0]!, out);
  }
  return widths;
}

/** Structure of the paged decoder graph (no session: PagedAttention has no CPU kernel). */
describe("paged decoder graph", () => {
  const spec = tinySpec();
  const weights = randomWeights(spec, 1);
  const variants = [
    ["float32 weights", {}],
    ["float16 weights", { float16: true }],
    ["with new_k/new_v outputs (cuda executor)", { newKvOutputs: true }],
  ] as const;

  for (const [name, options] of variants) {
    it(`${name}: every PagedAttention node has attention_metadata (input 16), an int32 [3] graph input`, () => {
      const { graph } = buildPagedLlamaGraph(spec, weights, 16, options);
      const paged = graph.nodes.filter((n) => n.opType === "PagedAttention");
      expect(paged).toHaveLength(spec.numLayers);
      for (const node of paged) {
        expect(node.domain).toBe("com.microsoft");
        expect(node.inputs).toHaveLength(17);
        expect(node.inputs[16]).toBe(PAGED_IO.attentionMetadata);
        // Inputs 8-15 stay absent (rotary caches, slot mapping, head sink, q/k norms, k/v scales).
        expect(node.inputs.slice(8, 16).every((x) => x === "")).toBe(true);
      }
      const input = graph.inputs.find((i) => i.name === PAGED_IO.attentionMetadata);
      expect(input).toEqual({ name: PAGED_IO.attentionMetadata, dataType: DataType.INT32, shape: [3] });
    });

    it(`${name}: no ArgMax and no max/min reduction spans a vocabulary row (onnxruntime's WebGPU ArgMax is one serial loop per row)`, () => {
      for (const vocabSize of [spec.vocabSize, 151_680]) {
        const wide = { ...spec, vocabSize };
        const { graph } = buildPagedLlamaGraph(wide, randomWeights(wide, 1), 16, options);
        const widths = reductionWidths(graph);
        // The LM head's argmax: two ReduceMax and two ReduceMin, traced from the logits.
        expect(widths.filter((w) => typeof w.width === "number").length).toBeGreaterThanOrEqual(4);
        for (const { node, width } of widths) {
          expect(typeof width, `${node}: reduced width unknown`).toBe("number");
          expect(width as number, node).toBeLessThanOrEqual(Math.ceil(Math.sqrt(vocabSize)));
        }
      }
    });
  }
});
