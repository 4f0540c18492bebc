import { describe, expect, it } from "vitest";
import { PAGED_IO, buildPagedLlamaGraph } from "../graph/paged-llama-graph";
import { DataType } from "../graph/onnx-proto";
import { randomWeights } from "./random-weights";
import { tinySpec } from "./tiny-spec";

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
  }
});
