import { DataType, type GraphBuilder } from "./graph-builder";
import { f32ToF16 } from "../quant/float-formats";
import { concatVectors } from "./weight-layout";
import { embedding, lmHeadProduct, linear, type GraphWeights } from "./linear";
import { moeMlp, pickMoeKernel } from "./moe-block";
import { applyRope, chunkedArgmax, geluTanh, type StepRope } from "./decoder-blocks";
import { EMBED_WEIGHT, FINAL_NORM_WEIGHT, LM_HEAD_WEIGHT, layerWeightNames, normWeight, ropeTables, type DecoderSpec } from "./decoder-spec";

/**
 * The paged decoder's layers with onnxruntime's fused GPU ops (the paged graph's default; the cpu
 * graph keeps `decoder-blocks.ts`' standard ops and its numbers). Per layer, dense Llama-like:
 *
 *   [Skip]SimplifiedLayerNormalization  input norm; the previous layer's MLP residual add fused in
 *   qkv product (+ bias)                one MatMul / MatMulNBits, fed to PagedAttention as its
 *                                       packed query [T, (H + 2 KVH) D] (key/value absent)
 *   PagedAttention                      do_rotary=1 over fp16 cos/sin caches [maxPositions, rotaryDim/2]
 *   o product, SkipSimplifiedLayerNorm  post-attention norm with the attention residual add fused
 *                                       (output 3 is the sum, the next residual)
 *   gate_up product, Split, QuickGelu(alpha 1) = silu, Mul, down product
 *
 * The last layer's MLP residual add is fused into the final norm. Activations are float16 end to
 * end when the weights are float16 or quantized (`GraphWeights.float16Activations`): Casts only
 * where a value leaves float16 (logits to float32 for the output and the argmax; the MoE block's
 * router and routing, float32: x cast up once, the routing weights down once). With float32 weights activations stay float32 and only the packed
 * q/k/v is cast to fp16 for PagedAttention and its output back.
 *
 * Where PagedAttention's own rotary cannot serve (onnxruntime 1.30 WebGPU: head_size a multiple
 * of 16 and rotaryDim/2 a multiple of 8; the `newKvOutputs` graph, whose new_k rows must be
 * post-rotary graph values), q and k are rotated explicitly as in `decoder-blocks.ts` (in the
 * activation type) and fed unpacked. q/k norms (Qwen3) are SimplifiedLayerNormalization over
 * [T, heads, headDim] before the rotary; they also unpack q/k/v (PagedAttention's own q/k norm
 * inputs are refused by the 1.30 WebGPU kernel).
 */
export interface FusedContext {
  g: GraphBuilder;
  spec: DecoderSpec;
  gw: GraphWeights;
  /** The activation type: FLOAT16 with float16 or quantized weights, else FLOAT. */
  dt: DataType;
  /** Whether PagedAttention rotates q/k itself (`opRotaryFits` and no new_k outputs). */
  opRotary: boolean;
  /** fp16 [maxPositions, rotaryDim/2] cos/sin caches for PagedAttention's rotary, when `opRotary`. */
  caches: { cos: string; sin: string } | null;
  /** This step's gathered tables [T, 1, rotaryDim] in `dt` for explicit rotary, when not `opRotary`. */
  stepRope: StepRope | null;
  /** Each layer's new K (post-rotary) and V are graph outputs: q/k/v go to the op unpacked. */
  newKv: boolean;
}

/** The inputs PagedAttention takes per layer besides q/k/v and the caches. */
export interface PagedInputs {
  poolK: string;
  poolV: string;
  cumulative: string;
  past: string;
  blockTable: string;
  metadata: string;
}

/** onnxruntime 1.30's WebGPU PagedAttention rotary: head_size % 16 == 0, rotaryDim/2 % 8 == 0 (probed on lavapipe). */
export function opRotaryFits(spec: DecoderSpec): boolean {
  return spec.headDim % 16 === 0 && (spec.rotaryDim / 2) % 8 === 0 && spec.rotaryDim <= spec.headDim;
}

export function fusedContext(g: GraphBuilder, spec: DecoderSpec, gw: GraphWeights, positionIds: string, newKvOutputs: boolean): FusedContext {
  const dt = gw.float16Activations ? DataType.FLOAT16 : DataType.FLOAT;
  const opRotary = opRotaryFits(spec) && !newKvOutputs;
  const anyRope = spec.ropeLayers.some((r) => r);
  const { cos, sin } = ropeTables(spec);
  const dim = spec.rotaryDim;
  const half = dim / 2;
  let caches: FusedContext["caches"] = null;
  let stepRope: StepRope | null = null;
  if (anyRope && opRotary) {
    // The first half of each row of the duplicated-halves tables (ropeScale already applied).
    const firstHalf = (t: Float32Array) => f32ToF16(Float32Array.from({ length: spec.maxPositions * half }, (_, i) => t[Math.floor(i / half) * dim + (i % half)]!));
    caches = { cos: g.half("rope_cos_cache", firstHalf(cos), [spec.maxPositions, half]), sin: g.half("rope_sin_cache", firstHalf(sin), [spec.maxPositions, half]) };
  } else if (anyRope) {
    const table = (name: string, t: Float32Array) => {
      const init = dt === DataType.FLOAT16 ? g.half(name, f32ToF16(t), [spec.maxPositions, dim]) : g.weight(name, t, [spec.maxPositions, dim]);
      return g.op("Unsqueeze", [g.op("Gather", [init, positionIds], { attributes: { axis: 0 } }), g.int64s([1])]);
    };
    stepRope = { cos: table("rope_cos", cos), sin: table("rope_sin", sin) };
  }
  return { g, spec, gw, dt, opRotary, caches, stepRope, newKv: newKvOutputs };
}

/** Token embeddings in the activation type (x embedScale). */
export function fusedEmbed(c: FusedContext, inputIds: string) {
  const embed = embedding(c.g, c.gw, EMBED_WEIGHT, inputIds, c.spec.vocabSize, c.spec.hiddenSize);
  const x = c.spec.embedScale === 1 ? embed.rows : c.g.op("Mul", [embed.rows, constant(c, `embed_scale`, Float32Array.of(c.spec.embedScale), [])]);
  return { embed, x };
}

/**
 * The residual stream between fused layers: `residual` plus a `pending` term (the last MLP output)
 * whose add the next norm fuses; null before the first layer.
 */
export interface Stream {
  residual: string;
  pending: string | null;
}

/**
 * One decoder layer: returns the stream after it (its MLP residual add left pending) and, for
 * `newKvOutputs`, the new keys (post-rotary) and values as fp16 [T, kvHeads * headDim].
 */
export function fusedLayer(c: FusedContext, l: number, s: Stream, p: PagedInputs): { stream: Stream; newK: string | null; newV: string | null } {
  const { g, spec, gw } = c;
  const { hiddenSize: hid, numHeads: nh, numKvHeads: nkv, headDim: hd } = spec;
  const w = layerWeightNames(l);
  const { y: h, sum: x } = norm(c, s.residual, s.pending, w.inputNorm, hid);
  let qkv = linear(g, gw, `layer${l}.qkv`, h, [w.q, w.k, w.v], hid, (nh + 2 * nkv) * hd);
  if (spec.attentionBias) {
    const bias = concatVectors([gw.source.take(w.qBias), gw.source.take(w.kBias), gw.source.take(w.vBias)]);
    qkv = g.op("Add", [qkv, constant(c, `layer${l}.qkv_bias`, bias, [bias.length])]);
  }
  const rotate = spec.ropeLayers[l]!;
  const opRotary = rotate && c.opRotary;
  const to16 = (v: string) => (c.dt === DataType.FLOAT16 ? v : g.op("Cast", [v], { attributes: { to: DataType.FLOAT16 } }));
  let qkvIn: [string, string, string];
  let newK: string | null = null;
  let newV: string | null = null;
  if (!spec.qkNorm && (opRotary || !rotate) && !c.newKv) {
    qkvIn = [to16(qkv), "", ""]; // packed QKV
  } else {
    // q and k as one [T, H + KVH, D] tensor: one norm (+ Mul by the q/k weights per head) and one rotary for both.
    let [qk, v] = g.opN("Split", [qkv, g.int64s([(nh + nkv) * hd, nkv * hd])], 2, { attributes: { axis: 1 } }) as [string, string];
    if (spec.qkNorm || (rotate && !opRotary)) {
      qk = g.op("Reshape", [qk, g.int64s([0, nh + nkv, hd])]);
      if (spec.qkNorm) qk = g.op("Mul", [norm(c, qk, null, null, hd).y, qkNormWeights(c, l)]);
      if (rotate && !opRotary) qk = applyRope(g, qk, c.stepRope!, hd, spec.rotaryDim);
      qk = g.op("Reshape", [qk, g.int64s([0, (nh + nkv) * hd])]);
    }
    const [q, k] = g.opN("Split", [to16(qk), g.int64s([nh * hd, nkv * hd])], 2, { attributes: { axis: 1 } });
    qkvIn = [q!, k!, to16(v)];
    [newK, newV] = [qkvIn[1], qkvIn[2]];
  }
  const rotary = opRotary ? [c.caches!.cos, c.caches!.sin] : ["", ""];
  // Inputs 10-15 (slot_mapping, head_sink, q/k norm weights, k/v scales) unused; one output:
  // the op updates poolK / poolV in place.
  const attn16 = g.op("PagedAttention", [...qkvIn, p.poolK, p.poolV, p.cumulative, p.past, p.blockTable, ...rotary, "", "", "", "", "", "", p.metadata], {
    domain: "com.microsoft",
    attributes: { num_heads: nh, kv_num_heads: nkv, scale: { float: spec.attentionScale }, ...(opRotary ? { do_rotary: 1, rotary_interleaved: 0 } : {}) },
  });
  const attn = c.dt === DataType.FLOAT16 ? attn16 : g.op("Cast", [attn16], { attributes: { to: DataType.FLOAT } });
  let attnOut = linear(g, gw, `layer${l}.o`, attn, [w.o], nh * hd, hid);
  if (spec.sandwichNorms) attnOut = norm(c, attnOut, null, w.postNorm, hid).y;
  const { y: h2, sum: afterAttn } = norm(c, x, attnOut, spec.sandwichNorms ? w.preFeedforwardNorm : w.postNorm, hid);
  let mlpOut = mlp(c, l, h2);
  if (spec.sandwichNorms) mlpOut = norm(c, mlpOut, null, w.postFeedforwardNorm, hid).y;
  return { stream: { residual: afterAttn, pending: mlpOut }, newK, newV };
}

/** The dense gated MLP (silu as one QuickGelu with alpha 1), or the MoE block (float32 inside). */
function mlp(c: FusedContext, l: number, h: string): string {
  const { g, spec, gw } = c;
  const { hiddenSize: hid, intermediateSize: inter } = spec;
  const moe = spec.moe?.sparseLayers[l] ? spec.moe : null;
  if (moe) {
    // onnxruntime 1.30 has no WebGPU MoE kernel: the per-expert block (routing in float32, experts in the activation type).
    return moeMlp(g, h, {
      layer: l, hiddenSize: hid, moeIntermediateSize: moe.intermediateSize, numExperts: moe.numExperts, topK: moe.topK, normTopkProb: moe.normTopkProb,
      weights: gw.source, quantized: gw.quantized, float16: gw.float16, float16Activations: c.dt === DataType.FLOAT16, kernel: pickMoeKernel("webgpu", gw.quantized !== null),
    });
  }
  const w = layerWeightNames(l);
  const gu = linear(g, gw, `layer${l}.gate_up`, h, [w.gate, w.up], hid, 2 * inter);
  const [gate, up] = g.opN("Split", [gu, g.int64s([inter, inter])], 2, { attributes: { axis: 1 } });
  const act = spec.mlpActivation === "silu" ? g.op("QuickGelu", [gate!], { domain: "com.microsoft", attributes: { alpha: { float: 1 } } }) : geluTanh(g, gate!);
  return linear(g, gw, `layer${l}.down`, g.op("Mul", [act, up!]), [w.down], inter, hid);
}

/**
 * Final norm (the last MLP residual add fused in) over all T rows, then the rows in `logitIndex`
 * through the LM head; logits float32 [R, vocab] and their chunked argmax.
 */
export function fusedLmHead(c: FusedContext, embed: { head: (x: string) => string }, s: Stream, logitIndex: string, names: { logits: string; nextToken: string }): void {
  const { g, spec, gw } = c;
  const normed = norm(c, s.residual, s.pending, FINAL_NORM_WEIGHT, spec.hiddenSize).y;
  const rows = g.op("Gather", [normed, logitIndex], { attributes: { axis: 0 } });
  const head = spec.tieWordEmbeddings ? embed.head(rows) : lmHeadProduct(g, gw, LM_HEAD_WEIGHT, rows, spec.vocabSize, spec.hiddenSize);
  const logits = c.dt === DataType.FLOAT16 ? g.op("Cast", [head], { attributes: { to: DataType.FLOAT } }) : head;
  g.output(logits, DataType.FLOAT, ["R", spec.vocabSize], names.logits);
  g.output(chunkedArgmax(g, logits, spec.vocabSize), DataType.INT32, ["R"], names.nextToken);
}

/** Layer l's q and k norm weights (Gemma's 1 + w folded in) per head: [H + KVH, D], q's heads first. */
function qkNormWeights(c: FusedContext, l: number): string {
  const { numHeads: nh, numKvHeads: nkv, headDim: hd } = c.spec;
  const w = layerWeightNames(l);
  const q = normWeight(c.spec, c.gw.source.take(w.qNorm));
  const k = normWeight(c.spec, c.gw.source.take(w.kNorm));
  return constant(c, `layer${l}.qk_norm`, concatVectors([...Array<Float32Array>(nh).fill(q), ...Array<Float32Array>(nkv).fill(k)]), [nh + nkv, hd]);
}

/**
 * RMSNorm of `x` (+ `skip`, fused: SkipSimplifiedLayerNormalization, whose output 3 is the sum)
 * over the last axis with the weight `name` (Gemma's 1 + w folded in; null: ones, the caller
 * multiplies): y, and the normed input.
 */
function norm(c: FusedContext, x: string, skip: string | null, name: string | null, dim: number): { y: string; sum: string } {
  const weight = name === null ? constant(c, `ones_${dim}`, new Float32Array(dim).fill(1), [dim], true) : constant(c, name, normWeight(c.spec, c.gw.source.take(name)), [dim]);
  const epsilon = { float: c.spec.rmsNormEps };
  if (skip === null) return { y: c.g.op("SimplifiedLayerNormalization", [x, weight], { attributes: { axis: -1, epsilon } }), sum: x };
  // Outputs 1 and 2 (mean, inv_std_var) are not asked for.
  const [y, , , sum] = c.g.opN("SkipSimplifiedLayerNormalization", [x, skip, weight], 4, { domain: "com.microsoft", attributes: { epsilon }, emptyOutputs: [1, 2] });
  return { y: y!, sum: sum! };
}

/** A float initializer in the activation type (`shared`: added once per graph under `name`). */
function constant(c: FusedContext, name: string, data: Float32Array, dims: number[], shared = false): string {
  if (shared) {
    const names = sharedNames.get(c.g) ?? new Set<string>();
    sharedNames.set(c.g, names);
    if (names.has(name)) return name;
    names.add(name);
  }
  return c.dt === DataType.FLOAT16 ? c.g.half(name, f32ToF16(data), dims) : c.g.weight(name, data, dims);
}

const sharedNames = new WeakMap<GraphBuilder, Set<string>>();
