import { DataType, GraphBuilder } from "./graph-builder";
import { layerWeightNames, type WeightSource } from "./decoder-spec";
import { concatTransposed, transpose } from "./weight-layout";
import { linear, type GraphWeights } from "./linear";
import { BLOCK_SIZE, quantizable } from "../quant/block-quant";
import type { QuantizedWeights } from "../quant/quantized-weights";

/**
 * The Qwen3-MoE sparse MLP block (transformers `Qwen3MoeSparseMoeBlock`) as an ONNX subgraph.
 * Per token row x [hidden]:
 *
 *   p   = softmax(x · Wg^T)                       fp32, over all experts
 *   top = the k largest p (k = num_experts_per_tok), renormalised to sum 1 if norm_topk_prob
 *   out = Σ_{e in top} p_e · down_e(silu(gate_e(x)) ⊙ up_e(x))
 *
 * Kernels (measured in docs/moe.md; `bench/probes/moe-probe.ts` reproduces the numbers):
 * - `ort-moe`    one `com.microsoft.MoE` node (router logits in, softmax/top-k/renorm inside, fused
 *                interleaved SwiGLU): onnxruntime's CPU kernel groups tokens by expert and runs
 *                one GEMM pair per used expert. CPU only: onnxruntime 1.30 registers no WebGPU
 *                MoE kernel (float32 or float16). With int8/int4 weights it is one
 *                `com.microsoft.QMoE` node over the same blockwise codes as every other linear
 *                (`quant/block-quant.ts`, block 32, no zero point), which onnxruntime's CPU kernel
 *                takes as they are.
 * - `gather`     standard ops: TopK, then Gather of the chosen experts' stacked weights and one
 *                batched MatMul. Reads only k experts per token, but materialises T·k copies of an
 *                expert's weights: for decode (T = 1) only.
 * - `per-expert` standard ops: per expert, TopK over its routing column (K = its token count)
 *                picks its tokens, Gather, two products; one Gather puts the rows back per token.
 *                Sparse for any T; ~12 nodes per expert. Its products are `graph/linear.ts`'s, so
 *                they take the model's weight precision (float16, MatMulNBits) like a dense MLP.
 * - `dense`      standard ops: every expert on every token (one wide MatMul, one tall MatMul,
 *                routing weights zero outside the top k). E/k times the work: comparison only.
 */
export type MoeKernel = "ort-moe" | "gather" | "per-expert" | "dense";

export const MOE_KERNELS: readonly MoeKernel[] = ["ort-moe", "gather", "per-expert", "dense"];

export type MoeProvider = "cpu" | "webgpu";

export interface MoeBlockArgs {
  layer: number;
  hiddenSize: number;
  /** `moe_intermediate_size`: each expert's SwiGLU width. */
  moeIntermediateSize: number;
  numExperts: number;
  /** `num_experts_per_tok`. */
  topK: number;
  /** `norm_topk_prob`: renormalise the k chosen probabilities to sum 1. */
  normTopkProb: boolean;
  weights: WeightSource;
  /** int8/int4 expert weights (QMoE on `ort-moe`, MatMulNBits on `per-expert`); absent: float. */
  quantized?: QuantizedWeights | null;
  /** float16 expert products on `per-expert` (webgpu, cuda). */
  float16?: boolean;
  /**
   * `x` and the result are float16 (`per-expert` only; the fused paged graph): the router and the
   * routing stay float32 (x cast up once), the expert products take and give float16 with no Cast
   * around them (`GraphWeights.float16Activations`), the routing weights are cast down once.
   */
  float16Activations?: boolean;
  /** Default: {@link pickMoeKernel}("cpu", whether `quantized` is given). */
  kernel?: MoeKernel;
}

/**
 * The fastest kernel per execution provider and weight precision, from `bench/probes/moe-probe.ts` and
 * whole-model decode (docs/moe.md): on CPU `ort-moe` for float experts (decode at a dense MLP's
 * speed, one node per layer) but `per-expert` for int8/int4 experts, whose MatMulNBits products
 * read the packed codes (onnxruntime 1.30's CPU QMoE dequantizes each used expert to float32 on
 * every call: the demo MoE decodes at 0.39x fp32 with it at int4); on WebGPU, where onnxruntime
 * 1.30 has no MoE kernel, `per-expert` (the only sparse kernel for any T there).
 *
 * @example moeMlp(g, h, { ...args, kernel: pickMoeKernel("webgpu", false) })
 */
export function pickMoeKernel(provider: MoeProvider, quantized: boolean): MoeKernel {
  return provider === "cpu" && !quantized ? "ort-moe" : "per-expert";
}

/** Hugging Face tensor names of layer `layer`'s MoE block: the router and each expert's projections. */
export function moeWeightNames(layer: number, numExperts: number) {
  const w = layerWeightNames(layer);
  return { router: w.router, experts: Array.from({ length: numExperts }, (_, e) => w.expert(e)) };
}

/**
 * The MoE MLP on `x` [T, hidden] float32; returns [T, hidden] (no residual added).
 *
 * @example
 * const y = moeMlp(g, h2, { layer: 0, hiddenSize: 512, moeIntermediateSize: 256, numExperts: 16,
 *   topK: 4, normTopkProb: true, weights });
 */
export function moeMlp(g: GraphBuilder, x: string, a: MoeBlockArgs): string {
  const { hiddenSize: hid, numExperts: E, topK: k } = a;
  if (k < 1 || k > E) throw new Error(`MoE: top-k ${k} out of 1..${E}`);
  const names = moeWeightNames(a.layer, E);
  const routerW = a.weights.take(names.router);
  checkSize(names.router, routerW, E * hid);
  const kernel = a.kernel ?? pickMoeKernel("cpu", !!a.quantized);
  if (a.float16Activations && kernel !== "per-expert") throw new Error(`MoE: the ${kernel} kernel has no float16 activations`);
  const x32 = a.float16Activations ? g.op("Cast", [x], { attributes: { to: DataType.FLOAT } }) : x;
  const logits = g.op("MatMul", [x32, g.weight(`layer${a.layer}.moe_router`, transpose(routerW, hid, E), [hid, E])]);
  if ((a.quantized && (kernel === "gather" || kernel === "dense")) || (a.float16 && kernel !== "per-expert"))
    throw new Error(`MoE: the ${kernel} kernel has no ${a.quantized ? `int${a.quantized.bits}` : "float16"} experts`);
  switch (kernel) {
    case "ort-moe":
      return ortMoe(g, x, logits, a, names.experts);
    case "gather":
      return gatherMoe(g, x, logits, a, names.experts);
    case "per-expert":
      return perExpertMoe(g, x, logits, a, names.experts);
    case "dense":
      return denseMoe(g, x, logits, a, names.experts);
  }
}

type ExpertNames = ReturnType<typeof moeWeightNames>["experts"];

/**
 * One com.microsoft.MoE node, or QMoE with quantized weights. fc1 [E, 2I, H] rows interleaved
 * gate_0, up_0, gate_1, ...; fc2 [E, H, I] (HF layout). Quantized, each is one [E * rows, cols]
 * matrix cut into blocks along its input features: the packed codes are [E, rows, cols * bits / 8]
 * and the scales [E, rows, cols / 32], as QMoE's `block_size` attribute takes them.
 */
function ortMoe(g: GraphBuilder, x: string, logits: string, a: MoeBlockArgs, experts: ExpertNames): string {
  const { hiddenSize: hid, moeIntermediateSize: inter, numExperts: E } = a;
  const l = a.layer;
  const quantized = a.quantized && quantizable(hid) && quantizable(inter) ? a.quantized : null;
  if (quantized) {
    const fc1 = quantized.get(`layer${l}.moe_fc1`, E * 2 * inter, hid, () => interleavedFc1(a, experts));
    const fc2 = quantized.get(`layer${l}.moe_fc2`, E * hid, inter, () => stackedFc2(a, experts));
    return g.op(
      "QMoE",
      [
        x,
        logits,
        g.bytes(`layer${l}.moe_fc1.packed`, fc1.packed, [E, 2 * inter, (hid * fc1.bits) / 8]),
        g.weight(`layer${l}.moe_fc1.scales`, fc1.scales, [E, 2 * inter, hid / BLOCK_SIZE]),
        "",
        g.bytes(`layer${l}.moe_fc2.packed`, fc2.packed, [E, hid, (inter * fc2.bits) / 8]),
        g.weight(`layer${l}.moe_fc2.scales`, fc2.scales, [E, hid, inter / BLOCK_SIZE]),
        "",
      ],
      { domain: "com.microsoft", attributes: { ...ortMoeAttributes(a), expert_weight_bits: fc1.bits, block_size: BLOCK_SIZE } },
    );
  }
  return g.op(
    "MoE",
    [x, logits, g.weight(`layer${l}.moe_fc1`, interleavedFc1(a, experts), [E, 2 * inter, hid]), "", g.weight(`layer${l}.moe_fc2`, stackedFc2(a, experts), [E, hid, inter])],
    { domain: "com.microsoft", attributes: ortMoeAttributes(a) },
  );
}

function ortMoeAttributes(a: MoeBlockArgs) {
  return {
    k: a.topK,
    activation_type: "swiglu",
    swiglu_fusion: 1,
    // silu(g) * (u + beta) with sigmoid(alpha * g): Qwen's SwiGLU is alpha 1, beta 0, no clamp.
    activation_alpha: { float: 1 },
    activation_beta: { float: 0 },
    normalize_routing_weights: a.normTopkProb ? 1 : 0,
  };
}

/** fc1 [E, 2I, H]: each expert's gate and up rows interleaved (gate_0, up_0, gate_1, ...). */
function interleavedFc1(a: MoeBlockArgs, experts: ExpertNames): Float32Array {
  const { hiddenSize: hid, moeIntermediateSize: inter, numExperts: E } = a;
  const fc1 = new Float32Array(E * 2 * inter * hid);
  experts.forEach((n, e) => {
    const gate = takeChecked(a.weights, n.gate, inter * hid);
    const up = takeChecked(a.weights, n.up, inter * hid);
    for (let i = 0; i < inter; i++) {
      fc1.set(gate.subarray(i * hid, (i + 1) * hid), (e * 2 * inter + 2 * i) * hid);
      fc1.set(up.subarray(i * hid, (i + 1) * hid), (e * 2 * inter + 2 * i + 1) * hid);
    }
  });
  return fc1;
}

/** fc2 [E, H, I]: each expert's down projection in Hugging Face layout. */
function stackedFc2(a: MoeBlockArgs, experts: ExpertNames): Float32Array {
  const { hiddenSize: hid, moeIntermediateSize: inter, numExperts: E } = a;
  const fc2 = new Float32Array(E * hid * inter);
  experts.forEach((n, e) => fc2.set(takeChecked(a.weights, n.down, hid * inter), e * hid * inter));
  return fc2;
}

/** Softmax over experts, top k: values [T, k] (renormalised when asked) and expert ids [T, k] int64. */
function route(g: GraphBuilder, logits: string, a: MoeBlockArgs): { weights: string; ids: string } {
  const probs = g.op("Softmax", [logits], { attributes: { axis: -1 } });
  const [values, ids] = g.opN("TopK", [probs, g.int64s([a.topK])], 2, { attributes: { axis: -1, largest: 1, sorted: 1 } });
  const weights = a.normTopkProb ? g.op("Div", [values!, g.op("ReduceSum", [values!, g.int64s([-1])], { attributes: { keepdims: 1 } })]) : values!;
  return { weights, ids: ids! };
}

function silu(g: GraphBuilder, gate: string, up: string): string {
  return g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up]);
}

/** Stacked [E, H, 2I] (gate columns then up columns) and [E, I, H] for MatMul. */
function stackedExperts(a: MoeBlockArgs, experts: ExpertNames): { gateUp: Float32Array; down: Float32Array } {
  const { hiddenSize: hid, moeIntermediateSize: inter, numExperts: E } = a;
  const gateUp = new Float32Array(E * hid * 2 * inter);
  const down = new Float32Array(E * inter * hid);
  experts.forEach((n, e) => {
    const gu = concatTransposed([takeChecked(a.weights, n.gate, inter * hid), takeChecked(a.weights, n.up, inter * hid)], hid);
    gateUp.set(gu, e * hid * 2 * inter);
    down.set(transpose(takeChecked(a.weights, n.down, hid * inter), inter, hid), e * inter * hid);
  });
  return { gateUp, down };
}

function gatherMoe(g: GraphBuilder, x: string, logits: string, a: MoeBlockArgs, experts: ExpertNames): string {
  const { hiddenSize: hid, moeIntermediateSize: inter, numExperts: E, topK: k, layer: l } = a;
  const { weights, ids } = route(g, logits, a);
  const { gateUp, down } = stackedExperts(a, experts);
  const gateUpW = g.weight(`layer${l}.moe_gate_up`, gateUp, [E, hid, 2 * inter]);
  const downW = g.weight(`layer${l}.moe_down`, down, [E, inter, hid]);
  const xRows = g.op("Reshape", [x, g.int64s([-1, 1, 1, hid])]); // [T, 1, 1, H]
  const gu = g.op("MatMul", [xRows, g.op("Gather", [gateUpW, ids], { attributes: { axis: 0 } })]); // [T, k, 1, 2I]
  const [gate, up] = g.opN("Split", [gu, g.int64s([inter, inter])], 2, { attributes: { axis: -1 } });
  const y = g.op("MatMul", [silu(g, gate!, up!), g.op("Gather", [downW, ids], { attributes: { axis: 0 } })]); // [T, k, 1, H]
  const yk = g.op("Reshape", [y, g.int64s([-1, k, hid])]); // [T, k, H]
  const w = g.op("Reshape", [weights, g.int64s([-1, 1, k])]); // [T, 1, k]
  return g.op("Reshape", [g.op("MatMul", [w, yk]), g.int64s([-1, hid])]);
}

/*
 * per-expert: rows grouped by expert without NonZero or int64 Concat (no WebGPU kernels):
 *
 *   mask [T, E]   1 where token t chose expert e          (ScatterElements of the top-k ids)
 *   rank [T, E]   t's place among e's tokens              (CumSum(mask, axis 0) - 1)
 *   offset [E]    rows of experts before e                (exclusive CumSum of count + 1)
 *   pos [T, k]    offset[e] + rank[t, e] at the chosen e  (GatherElements, Cast to int64)
 *
 *   expert e: TopK(mask[:, e] * (T - t), K = count_e) -> its tokens in ascending order ->
 *             Gather x rows -> gate/up MatMul -> SwiGLU -> down MatMul -> ys_e [count_e, H],
 *             plus one zero row: onnxruntime 1.30's WebGPU Concat fails ("number of element of
 *             uniform variable must be greater than 0") on many inputs when some are empty
 *   ys = Concat(ys_0 .. ys_E-1) [T*k + E, H];  out[t] = Σ_j w[t, j] · ys[pos[t, j]]
 */
function perExpertMoe(g: GraphBuilder, x: string, logits: string, a: MoeBlockArgs, experts: ExpertNames): string {
  const { hiddenSize: hid, moeIntermediateSize: inter, topK: k, layer: l } = a;
  const half16 = a.float16Activations ?? false;
  const gw: GraphWeights = { source: checkedSource(a), quantized: a.quantized ?? null, float16: a.float16, float16Activations: half16 };
  const { weights, ids } = route(g, logits, a);
  const zeros = g.op("Mul", [logits, g.scalar(0)]); // [T, E]
  const mask = g.op("ScatterElements", [zeros, ids, g.op("Add", [g.op("Mul", [weights, g.scalar(0)]), g.scalar(1)])], { attributes: { axis: -1 } });
  const rank = g.op("Sub", [g.op("CumSum", [mask, g.int64s([0])]), g.scalar(1)]);
  const counts = g.op("ReduceSum", [mask, g.int64s([0])], { attributes: { keepdims: 1 } }); // [1, E]
  const slots = g.op("Add", [counts, g.scalar(1)]); // each expert's rows + one zero row
  const offsets = g.op("Sub", [g.op("CumSum", [slots, g.int64s([1])]), slots]);
  const pos = g.op("Cast", [g.op("GatherElements", [g.op("Add", [rank, offsets]), ids], { attributes: { axis: 1 } })], { attributes: { to: DataType.INT64 } });
  const ones = g.op("Add", [g.op("Gather", [zeros, g.int64s([0])], { attributes: { axis: 1 } }), g.scalar(1)]); // [T, 1]
  const descending = g.op("Sub", [g.op("ReduceSum", [ones, g.int64s([0])], { attributes: { keepdims: 1 } }), g.op("Sub", [g.op("CumSum", [ones, g.int64s([0])]), g.scalar(1)])]); // T - t
  const keys = g.op("Mul", [mask, descending]); // [T, E]
  const zeroRow = half16 ? g.half(`layer${l}.moe_zero_row`, new Uint16Array(hid), [1, hid]) : g.weight(`layer${l}.moe_zero_row`, new Float32Array(hid), [1, hid]);
  const ys = experts.map((n, e) => {
    const column = g.op("Squeeze", [g.op("Gather", [keys, g.int64s([e])], { attributes: { axis: 1 } }), g.int64s([1])]); // [T]
    const count = g.op("Cast", [g.op("Reshape", [g.op("Gather", [counts, g.int64s([e])], { attributes: { axis: 1 } }), g.int64s([1])])], { attributes: { to: DataType.INT64 } });
    const [, tokens] = g.opN("TopK", [column, count], 2, { attributes: { axis: 0, largest: 1, sorted: 1 } });
    const xe = g.op("Gather", [x, tokens!], { attributes: { axis: 0 } }); // [n_e, H]
    const gu = linear(g, gw, `layer${l}.moe_e${e}_gate_up`, xe, [n.gate, n.up], hid, 2 * inter);
    const [gate, up] = g.opN("Split", [gu, g.int64s([inter, inter])], 2, { attributes: { axis: -1 } });
    const ye = linear(g, gw, `layer${l}.moe_e${e}_down`, silu(g, gate!, up!), [n.down], inter, hid);
    return g.op("Concat", [ye, zeroRow], { attributes: { axis: 0 } });
  });
  const picked = g.op("Gather", [g.op("Concat", ys, { attributes: { axis: 0 } }), pos], { attributes: { axis: 0 } }); // [T, k, H]
  const w = g.op("Reshape", [half16 ? g.op("Cast", [weights], { attributes: { to: DataType.FLOAT16 } }) : weights, g.int64s([-1, 1, k])]);
  return g.op("Reshape", [g.op("MatMul", [w, picked]), g.int64s([-1, hid])]);
}

/** Routing weights as a dense [T, E] matrix: the top-k weights at their experts, 0 elsewhere. */
function denseRouting(g: GraphBuilder, logits: string, a: MoeBlockArgs): string {
  const { weights, ids } = route(g, logits, a);
  return g.op("ScatterElements", [g.op("Mul", [logits, g.scalar(0)]), ids, weights], { attributes: { axis: -1 } });
}

function denseMoe(g: GraphBuilder, x: string, logits: string, a: MoeBlockArgs, experts: ExpertNames): string {
  const { hiddenSize: hid, moeIntermediateSize: inter, numExperts: E, layer: l } = a;
  const dense = denseRouting(g, logits, a); // [T, E]
  const gate = concatTransposed(experts.map((n) => takeChecked(a.weights, n.gate, inter * hid)), hid);
  const up = concatTransposed(experts.map((n) => takeChecked(a.weights, n.up, inter * hid)), hid);
  const g1 = g.op("MatMul", [x, g.weight(`layer${l}.moe_all_gate`, gate, [hid, E * inter])]);
  const u1 = g.op("MatMul", [x, g.weight(`layer${l}.moe_all_up`, up, [hid, E * inter])]);
  const act = g.op("Reshape", [silu(g, g1, u1), g.int64s([-1, E, inter])]); // [T, E, I]
  const scaled = g.op("Reshape", [g.op("Mul", [act, g.op("Unsqueeze", [dense, g.int64s([-1])])]), g.int64s([-1, E * inter])]);
  const down = new Float32Array(E * inter * hid);
  experts.forEach((n, e) => down.set(transpose(takeChecked(a.weights, n.down, hid * inter), inter, hid), e * inter * hid));
  return g.op("MatMul", [scaled, g.weight(`layer${l}.moe_all_down`, down, [E * inter, hid])]);
}

/** The expert weights with their sizes checked as they are taken (the products in linear.ts take them). */
function checkedSource(a: MoeBlockArgs): WeightSource {
  const { hiddenSize: hid, moeIntermediateSize: inter } = a;
  const sizes = new Map<string, number>();
  for (const n of moeWeightNames(a.layer, a.numExperts).experts) {
    sizes.set(n.gate, inter * hid);
    sizes.set(n.up, inter * hid);
    sizes.set(n.down, hid * inter);
  }
  return { take: (name) => (sizes.has(name) ? takeChecked(a.weights, name, sizes.get(name)!) : a.weights.take(name)), has: (name) => a.weights.has(name) };
}

function takeChecked(w: WeightSource, name: string, size: number): Float32Array {
  const t = w.take(name);
  checkSize(name, t, size);
  return t;
}

function checkSize(name: string, t: Float32Array, size: number): void {
  if (t.length !== size) throw new Error(`MoE weight ${name}: ${t.length} values, expected ${size}`);
}

/**
 * A standalone model around the block: input `x` [T, hidden] float32, output `y` [T, hidden]
 * (tests and `bench/probes/moe-probe.ts`).
 *
 * @example const session = await ort.InferenceSession.create(moeBlockModel(args));
 */
export function moeBlockModel(a: MoeBlockArgs): Uint8Array {
  const g = new GraphBuilder(`moe_${a.kernel ?? "default"}`);
  const x = g.input("x", DataType.FLOAT, ["T", a.hiddenSize]);
  g.output(moeMlp(g, x, a), DataType.FLOAT, ["T", a.hiddenSize], "y");
  return g.encode();
}
