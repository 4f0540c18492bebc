import { describe, expect, it } from "vitest";
import { PAGED_IO, buildPagedLlamaGraph } from "../graph/paged-llama-graph";
import { DataType, type ModelSpec } from "../graph/onnx-proto";
import { randomWeights } from "./random-weights";
import { tinySpec } from "./tiny-spec";
import { QuantizedWeights } from "../quant/quantized-weights";
import { familySpecs } from "./family-specs";
import type { DecoderSpec } from "../graph/decoder-spec";

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
    // A getter: a fresh quantization cache per build (the builds below differ in vocabulary size).
    ["int4 weights", { get quantized() { return QuantizedWeights.open(4); } }],
    ["with new_k/new_v outputs (host-pool executor)", { newKvOutputs: true }],
    ["unfused", { fused: false }],
  ] as const;

  for (const [name, options] of variants) {
    it(`${name}: every PagedAttention node has one output: its cache outputs omitted, so it updates the fed pool in place`, () => {
      const { graph } = buildPagedLlamaGraph(spec, weights, 16, options);
      const paged = graph.nodes.filter((n) => n.opType === "PagedAttention");
      expect(paged).toHaveLength(spec.numLayers);
      for (const node of paged) expect(node.outputs.filter((o) => o !== "")).toHaveLength(1);
      // No graph output is a pool: nothing of the pool is ever fetched.
      expect(graph.outputs.filter((o) => o.name.startsWith("kv_") || o.shape[0] === "num_blocks")).toEqual([]);
    });

    it(`${name}: every PagedAttention node has attention_metadata (input 16), an int32 [3] graph input`, () => {
      const { graph } = buildPagedLlamaGraph(spec, weights, 16, options);
      const paged = graph.nodes.filter((n) => n.opType === "PagedAttention");
      expect(paged).toHaveLength(spec.numLayers);
      for (const node of paged) {
        expect(node.domain).toBe("com.microsoft");
        expect(node.inputs).toHaveLength(17);
        expect(node.inputs[16]).toBe(PAGED_IO.attentionMetadata);
        // Inputs 10-15 stay absent (slot mapping, head sink, q/k norms, k/v scales); 8-9 are the
        // rotary caches where the op rotates (fused, no new_k outputs: tinySpec's head 16 fits).
        expect(node.inputs.slice(10, 16).every((x) => x === "")).toBe(true);
        const opRotary = !("fused" in options) && !("newKvOutputs" in options);
        expect(node.inputs.slice(8, 10).every((x) => x !== "")).toBe(opRotary);
        expect(node.attributes?.do_rotary ?? 0).toBe(opRotary ? 1 : 0);
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

/** Every Cast to fp16 of a Cast to fp32, as "from -> to" node names. */
function castPairs(graph: ModelSpec): string[] {
  const producer = new Map(graph.nodes.flatMap((n) => n.outputs.map((o) => [o, n] as const)));
  return graph.nodes
    .filter((n) => n.opType === "Cast" && n.attributes?.to === DataType.FLOAT16)
    .map((n) => [producer.get(n.inputs[0]!), n] as const)
    .filter(([from]) => from?.opType === "Cast" && from.attributes?.to === DataType.FLOAT)
    .map(([from, n]) => `${from!.name} -> ${n.name}`);
}

/** The fused layers (`graph/fused-blocks.ts`): what they emit and how many nodes a layer costs. */
describe("fused paged decoder graph", () => {
  const precisions = [
    ["fp32", {}],
    ["fp16", { float16: true }],
    ["int4", { quantized: QuantizedWeights.open(4) }],
  ] as const;
  type Options = Parameters<typeof buildPagedLlamaGraph>[3];
  const build = (spec: DecoderSpec, options: Options) => buildPagedLlamaGraph(spec, randomWeights(spec, 1), 16, options).graph;
  /** Nodes one more layer adds: the graph with 2 layers less the graph with 1 (everything else equal). */
  const perLayer = (options: Options, spec: Partial<DecoderSpec> = {}) =>
    build(tinySpec({ ...spec, numLayers: 2 }), options).nodes.length - build(tinySpec({ ...spec, numLayers: 1 }), options).nodes.length;

  /**
   * The budget per dense Llama-like layer (the demo model's shape: op rotary fits, no q/k norm, no
   * bias), measured on this commit: fp32 12 (2 norms, 4 products, PagedAttention, 2 Casts around
   * it, Split, QuickGelu, Mul), fp16 and int4 10 (no Casts). The unfused graph: fp32 48 (RMSNorm
   * as 7 ops x 2, rotary 6 x 2, 6 Reshapes, 4 Casts, 2 residual Adds, ...), fp16 56 (+ a Cast pair
   * around each of the 4 products), int4 48.
   */
  const BUDGET = { fp32: 12, fp16: 10, int4: 10 };
  const UNFUSED = { fp32: 48, fp16: 56, int4: 48 };

  for (const [precision, options] of precisions) {
    it(`${precision}: a dense layer costs at most ${BUDGET[precision]} nodes (unfused: ${UNFUSED[precision]})`, () => {
      const fused = perLayer(options);
      const unfused = perLayer({ ...options, fused: false });
      console.log(`[paged graph ${precision}] nodes per dense layer: fused ${fused}, unfused ${unfused}`);
      expect(fused).toBeLessThanOrEqual(BUDGET[precision]);
      expect(unfused).toBe(UNFUSED[precision]);
    });

    it(`${precision}: RMSNorm as [Skip]SimplifiedLayerNormalization, packed QKV into PagedAttention with its own rotary`, () => {
      const spec = tinySpec();
      const graph = build(spec, options);
      const count = (op: string) => graph.nodes.filter((n) => n.opType === op).length;
      // One plain norm (layer 0's input), then every norm has a residual add fused: 2 per layer, final included.
      expect(count("SimplifiedLayerNormalization")).toBe(1);
      expect(count("SkipSimplifiedLayerNormalization")).toBe(2 * spec.numLayers);
      for (const op of ["ReduceMean", "Sqrt", "Reciprocal", "Sigmoid", "Neg"]) expect(count(op), op).toBe(0);
      for (const n of graph.nodes.filter((n) => n.opType === "SkipSimplifiedLayerNormalization")) {
        expect(n.domain).toBe("com.microsoft");
        expect(n.outputs.slice(1, 3)).toEqual(["", ""]); // mean and inv_std_var not computed
      }
      const sln = graph.nodes.find((n) => n.opType === "SimplifiedLayerNormalization")!;
      expect(sln.domain ?? "").toBe("");
      const half = spec.rotaryDim / 2;
      for (const n of graph.nodes.filter((n) => n.opType === "PagedAttention")) {
        expect(n.inputs.slice(1, 3)).toEqual(["", ""]); // packed [T, (H + 2 KVH) D]
        expect(n.attributes).toMatchObject({ do_rotary: 1, rotary_interleaved: 0 });
        for (const name of n.inputs.slice(8, 10)) {
          const cache = graph.initializers.find((t) => t.name === name)!;
          expect({ type: cache.dataType, dims: cache.dims }).toEqual({ type: DataType.FLOAT16, dims: [spec.maxPositions, half] });
        }
      }
    });

    it(`${precision}: Casts only at the edges (${precision === "fp32" ? "fp16 around PagedAttention" : "logits to fp32"}); no fp16 -> fp32 -> fp16 pair`, () => {
      const graph = build(tinySpec(), options);
      const casts = graph.nodes.filter((n) => n.opType === "Cast");
      expect(castPairs(graph)).toEqual([]);
      const toF32 = casts.filter((n) => n.attributes?.to === DataType.FLOAT);
      if (precision === "fp32") {
        expect(casts.length).toBe(2 * 2 + 1); // per layer: packed q/k/v to fp16, the output back; + argmax index to int64
      } else {
        // The logits (the chunked argmax's int64 cast aside): the only value leaving fp16.
        expect(toF32).toHaveLength(1);
        expect(casts.filter((n) => n.attributes?.to === DataType.FLOAT16)).toHaveLength(0);
        const logits = graph.nodes.find((n) => n.outputs[0] === PAGED_IO.logits)!;
        expect(logits.inputs[0]).toBe(toF32[0]!.outputs[0]);
        const fp32Floats = graph.initializers.filter((t) => t.dataType === DataType.FLOAT && t.dims.length > 0 && !t.name.startsWith("argmax_chunk"));
        expect(fp32Floats.map((t) => t.name)).toEqual([]); // norms, tables, MatMulNBits scales: fp16
      }
    });
  }

  const families = familySpecs();
  const cases: [string, DecoderSpec, { opRotary: boolean; packed: boolean }][] = [
    ["qwen3 (head 24: the 1.30 WebGPU rotary needs a multiple of 16)", families.qwen3, { opRotary: false, packed: false }],
    ["phi3 (rotary 12 of 16: rotaryDim/2 not a multiple of 8)", { ...families.phi3, layerWindows: [null, null] }, { opRotary: false, packed: false }],
    ["phi3 shaped like Phi-4-mini (rotary 16 of 32)", { ...families.phi3, layerWindows: [null, null], headDim: 32, rotaryDim: 16, invFreq: families.phi3.invFreq.slice(0, 8) }, { opRotary: true, packed: true }],
    ["qwen3_moe (q/k norms: unpacked)", families.qwen3_moe, { opRotary: true, packed: false }],
  ];
  for (const [name, spec, want] of cases) {
    it(`${name}: op rotary ${want.opRotary}, packed QKV ${want.packed}`, () => {
      const graph = build(spec, { float16: true });
      const paged = graph.nodes.filter((n) => n.opType === "PagedAttention");
      expect(paged).toHaveLength(spec.numLayers);
      for (const n of paged) {
        expect(n.attributes?.do_rotary ?? 0).toBe(want.opRotary ? 1 : 0);
        expect(n.inputs[1] === "").toBe(want.packed);
      }
      expect(castPairs(graph)).toEqual([]);
      // q/k norms: one SimplifiedLayerNormalization per layer over q and k as [T, H + KVH, headDim].
      const sln = graph.nodes.filter((n) => n.opType === "SimplifiedLayerNormalization").length;
      expect(sln).toBe(1 + (spec.qkNorm ? spec.numLayers : 0));
    });
  }

  it("smollm3: the layer without rotary takes no rotary caches (do_rotary 0), the other rotates in the op", () => {
    const graph = build(families.smollm3, { float16: true });
    const paged = graph.nodes.filter((n) => n.opType === "PagedAttention");
    expect(paged.map((n) => n.attributes?.do_rotary ?? 0)).toEqual(families.smollm3.ropeLayers.map((r) => (r ? 1 : 0)));
    expect(paged.map((n) => n.inputs[8] !== "")).toEqual(families.smollm3.ropeLayers);
  });
});
