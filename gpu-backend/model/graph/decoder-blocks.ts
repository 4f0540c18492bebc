import type { GraphBuilder } from "./graph-builder";
import { DataType } from "./graph-builder";
import { concatVectors } from "./weight-layout";
import { atTwoRowsOrMore, embedding, lmHeadProduct, linear, type GraphWeights } from "./linear";
import { moeMlp, type MoeKernel } from "./moe-block";
import {
  EMBED_WEIGHT,
  FINAL_NORM_WEIGHT,
  LM_HEAD_WEIGHT,
  layerWeightNames,
  normWeight,
  ropeTables,
  type DecoderSpec,
  type WeightSource,
} from "./decoder-spec";

/**
 * The parts of the decoder graph every executor's graph shares (float32 activations; linear
 * weights float32 or quantized, `linear.ts`): embeddings and rotary
 * tables, the q/k/v projection with q/k norms and rotary, the attention output projection with
 * the MLP (dense or mixture of experts, with Gemma's sandwich norms where the spec says), and the
 * LM head. The graphs differ only in how attention reads the KV pool (`llama-graph.ts`: gathered
 * slots and masks; `paged-llama-graph.ts`: PagedAttention).
 */

/** One rotary table pair gathered for this step's positions, [T, 1, rotaryDim] (broadcast over heads). */
export interface StepRope {
  cos: string;
  sin: string;
}

/**
 * Token embeddings (x embedScale) and this step's rotary tables: `rope` for full-attention
 * layers, `localRope` for sliding-window layers (the same tables unless the spec gives the
 * sliding layers their own frequencies).
 */
export function embedTokens(g: GraphBuilder, spec: DecoderSpec, gw: GraphWeights, inputIds: string, positionIds: string) {
  const embed = embedding(g, gw, EMBED_WEIGHT, inputIds, spec.vocabSize, spec.hiddenSize);
  const stepRope = (name: string, invFreq: Float32Array): StepRope => {
    const { cos, sin } = ropeTables(spec, invFreq);
    const gather = (table: string) => g.op("Unsqueeze", [g.op("Gather", [table, positionIds], { attributes: { axis: 0 } }), g.int64s([1])]);
    return {
      cos: gather(g.weight(`${name}_cos`, cos, [spec.maxPositions, spec.rotaryDim])),
      sin: gather(g.weight(`${name}_sin`, sin, [spec.maxPositions, spec.rotaryDim])),
    };
  };
  const rope = stepRope("rope", spec.invFreq);
  const localRope = spec.localInvFreq ? stepRope("rope_local", spec.localInvFreq) : rope;
  let x = embed.rows; // [T, hidden]
  if (spec.embedScale !== 1) x = g.op("Mul", [x, g.scalar(spec.embedScale)]);
  return { embed, x, rope, localRope };
}

/** The rotary tables layer `l` uses, or null for a layer whose q and k do not rotate. */
export function layerRope(spec: DecoderSpec, l: number, step: { rope: StepRope; localRope: StepRope }): StepRope | null {
  if (!spec.ropeLayers[l]) return null;
  return spec.layerWindows[l] === null ? step.rope : step.localRope;
}

/**
 * Layer `l`'s input norm and fused q/k/v projection (+ bias), per-head q/k norms, rotary on q and
 * k (none when `rope` is null): q [T, nh, hd], k and v [T, nkv, hd].
 */
export function attentionInputs(g: GraphBuilder, spec: DecoderSpec, gw: GraphWeights, l: number, x: string, rope: StepRope | null) {
  const weights = gw.source;
  const { hiddenSize: hid, numHeads: nh, numKvHeads: nkv, headDim: hd } = spec;
  const w = layerWeightNames(l);
  const h = rmsNorm(g, x, normInit(g, spec, weights, w.inputNorm, hid), spec.rmsNormEps);
  let qkv = linear(g, gw, `layer${l}.qkv`, h, [w.q, w.k, w.v], hid, (nh + 2 * nkv) * hd);
  if (spec.attentionBias) {
    const bias = concatVectors([weights.take(w.qBias), weights.take(w.kBias), weights.take(w.vBias)]);
    qkv = g.op("Add", [qkv, g.weight(`layer${l}.qkv_bias`, bias, [bias.length])]);
  }
  const [q2, k2, v2] = g.opN("Split", [qkv, g.int64s([nh * hd, nkv * hd, nkv * hd])], 3, { attributes: { axis: 1 } });
  let q = g.op("Reshape", [q2!, g.int64s([0, nh, hd])]);
  let k = g.op("Reshape", [k2!, g.int64s([0, nkv, hd])]);
  if (spec.qkNorm) {
    q = rmsNorm(g, q, normInit(g, spec, weights, w.qNorm, hd), spec.rmsNormEps);
    k = rmsNorm(g, k, normInit(g, spec, weights, w.kNorm, hd), spec.rmsNormEps);
  }
  const v = g.op("Reshape", [v2!, g.int64s([0, nkv, hd])]);
  if (rope === null) return { q, k, v };
  return { q: applyRope(g, q, rope, hd, spec.rotaryDim), k: applyRope(g, k, rope, hd, spec.rotaryDim), v };
}

/**
 * Layer `l` after attention: output projection, the MLP (dense, or the mixture of experts on a
 * sparse layer) and the residuals; Llama-style (post_attention_layernorm before the MLP) or with
 * Gemma's sandwich norms (post_attention_layernorm on the attention output, pre_ and
 * post_feedforward_layernorm around the MLP).
 */
export function attentionOutputAndMlp(g: GraphBuilder, spec: DecoderSpec, gw: GraphWeights, l: number, x: string, attn: string, moeKernel: MoeKernel): string {
  const weights = gw.source;
  const { hiddenSize: hid, numHeads: nh, headDim: hd } = spec;
  const w = layerWeightNames(l);
  const norm = (value: string, name: string) => rmsNorm(g, value, normInit(g, spec, weights, name, hid), spec.rmsNormEps);
  let attnOut = linear(g, gw, `layer${l}.o`, attn, [w.o], nh * hd, hid);
  if (spec.sandwichNorms) attnOut = norm(attnOut, w.postNorm);
  const afterAttn = g.op("Add", [x, attnOut]);
  const h2 = norm(afterAttn, spec.sandwichNorms ? w.preFeedforwardNorm : w.postNorm);
  const moe = spec.moe?.sparseLayers[l] ? spec.moe : null;
  let mlpOut = moe
    ? moeMlp(g, h2, { layer: l, hiddenSize: hid, moeIntermediateSize: moe.intermediateSize, numExperts: moe.numExperts, topK: moe.topK, normTopkProb: moe.normTopkProb, weights, quantized: gw.quantized, float16: gw.float16, kernel: moeKernel })
    : denseMlp(g, spec, gw, l, h2);
  if (spec.sandwichNorms) mlpOut = norm(mlpOut, w.postFeedforwardNorm);
  return g.op("Add", [afterAttn, mlpOut]);
}

/** The gated MLP: down(act(gate(x)) * up(x)), gate and up as one MatMul. */
function denseMlp(g: GraphBuilder, spec: DecoderSpec, gw: GraphWeights, l: number, h: string): string {
  const { hiddenSize: hid, intermediateSize: inter } = spec;
  const w = layerWeightNames(l);
  const gu = linear(g, gw, `layer${l}.gate_up`, h, [w.gate, w.up], hid, 2 * inter);
  const [gate, up] = g.opN("Split", [gu, g.int64s([inter, inter])], 2, { attributes: { axis: 1 } });
  const act = g.op("Mul", [spec.mlpActivation === "silu" ? silu(g, gate!) : geluTanh(g, gate!), up!]);
  return linear(g, gw, `layer${l}.down`, act, [w.down], inter, hid);
}

export function silu(g: GraphBuilder, x: string): string {
  return g.op("Mul", [x, g.op("Sigmoid", [x])]);
}

/** GELU, tanh approximation (transformers' gelu_pytorch_tanh): 0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³))). */
export function geluTanh(g: GraphBuilder, x: string): string {
  const cube = g.op("Mul", [g.op("Mul", [x, x]), x]);
  const inner = g.op("Mul", [g.op("Add", [x, g.op("Mul", [cube, g.scalar(0.044715)])]), g.scalar(Math.sqrt(2 / Math.PI))]);
  return g.op("Mul", [g.op("Mul", [x, g.scalar(0.5)]), g.op("Add", [g.op("Tanh", [inner]), g.scalar(1)])]);
}

/** An RMSNorm weight as an initializer (Gemma's 1 + w folded in). */
function normInit(g: GraphBuilder, spec: DecoderSpec, weights: WeightSource, name: string, dim: number): string {
  return g.weight(name, normWeight(spec, weights.take(name)), [dim]);
}

/**
 * Final norm and LM head for the rows in `logitIndex` only, as outputs `logits` [R, vocab] and
 * `next_token` [R] (their argmax: greedy decoding reads only this; int32 from the chunked form,
 * 4 bytes a row down from the GPU, int64 from ArgMax). `argmax`: "chunked"
 * (`chunkedArgmax`, for the GPU providers, whose ArgMax is one serial loop per row) or "argmax"
 * (one ArgMax node: the cpu graph, where the chunked form measured ~1 ms slower per batch-8 decode
 * step on the demo model, 17.3 vs 16.2 ms, and the same at batch 1).
 */
export function lmHead(
  g: GraphBuilder,
  spec: DecoderSpec,
  gw: GraphWeights,
  embed: { head: (x: string) => string },
  x: string,
  logitIndex: string,
  names: { logits: string; nextToken: string },
  argmax: "chunked" | "argmax",
): void {
  const last = g.op("Gather", [x, logitIndex], { attributes: { axis: 0 } });
  const normed = rmsNorm(g, last, normInit(g, spec, gw.source, FINAL_NORM_WEIGHT, spec.hiddenSize), spec.rmsNormEps);
  const logits = atTwoRowsOrMore(g, normed, gw.padOneRow, (rows) => (spec.tieWordEmbeddings ? embed.head(rows) : lmHeadProduct(g, gw, LM_HEAD_WEIGHT, rows, spec.vocabSize, spec.hiddenSize)));
  g.output(logits, DataType.FLOAT, ["R", spec.vocabSize], names.logits);
  if (argmax === "chunked") g.output(chunkedArgmax(g, logits, spec.vocabSize), DataType.INT32, ["R"], names.nextToken);
  else g.output(g.op("ArgMax", [logits], { attributes: { axis: 1, keepdims: 0 } }), DataType.INT64, ["R"], names.nextToken);
}

/**
 * ArgMax over the last axis of `rows` [R, width] float32, as int32 [R]: the same index as
 * `ArgMax(axis=1)` (the first index of the maximum on ties), with no reduction wider than
 * ~sqrt(width). onnxruntime's WebGPU ArgMax runs one thread per output that loops over the whole
 * axis: over a 151,680-wide row, one thread looping 151,680 times. Here:
 *
 *   chunks  [R, N, C]  the row padded with -inf to N*C (C = ceil(sqrt(width)), N = ceil(width / C))
 *   cmax    [R, N, 1]  ReduceMax within each chunk
 *   cfirst  [R, N]     ReduceMin within each chunk of (row index where the entry equals cmax, else +inf):
 *                      the chunk's first maximum, as a row index
 *   rmax    [R, 1]     ReduceMax over the chunks' maxima
 *   first   [R]        ReduceMin over the chunks of (cfirst where cmax equals rmax, else +inf)
 *
 * `first` is the smallest index holding the row's maximum, exactly ArgMax's answer (comparisons
 * and min/max are exact; indices are floats, exact below 2^24). Padding (-inf) sits after every
 * real entry, so it never beats an equal real value. No ArgMax and no int64 arithmetic either:
 * onnxruntime's WebGPU provider (1.30, without its enableInt64 option) has no int64 Mul, Add,
 * GatherElements, Reshape or Cast-from-int64 kernel; the result is cast to int32 last (a token id
 * fits; half the bytes of int64 to download).
 */
export function chunkedArgmax(g: GraphBuilder, rows: string, width: number): string {
  if (!(width >= 1 && width < 2 ** 24)) throw new Error(`chunkedArgmax: width ${width} outside [1, 2^24)`);
  const C = Math.ceil(Math.sqrt(width));
  const N = Math.ceil(width / C);
  const pad = N * C - width;
  const padded = pad > 0 ? g.op("Pad", [rows, g.int64s([0, 0, 0, pad]), g.scalar(-Infinity)]) : rows;
  const chunks = g.op("Reshape", [padded, g.int64s([0, N, C])]);
  // Row index of every chunk entry, [N, C] = [N, 1] + [C] (onnxruntime folds it into a constant).
  const base = g.weight(`argmax_chunk_base_${width}`, Float32Array.from({ length: N }, (_, n) => n * C), [N, 1]);
  const iota = g.weight(`argmax_chunk_iota_${width}`, Float32Array.from({ length: C }, (_, c) => c), [C]);
  const index = g.op("Add", [base, iota]);
  const inf = g.scalar(Infinity);
  const cmax = g.op("ReduceMax", [chunks], { attributes: { axes: [2], keepdims: 1 } });
  const cfirst = g.op("ReduceMin", [g.op("Where", [g.op("Equal", [chunks, cmax]), index, inf])], { attributes: { axes: [2], keepdims: 0 } });
  const chunkMax = g.op("Reshape", [cmax, g.int64s([0, N])]);
  const rmax = g.op("ReduceMax", [chunkMax], { attributes: { axes: [1], keepdims: 1 } });
  const first = g.op("ReduceMin", [g.op("Where", [g.op("Equal", [chunkMax, rmax]), cfirst, inf])], { attributes: { axes: [1], keepdims: 0 } });
  return g.op("Cast", [first], { attributes: { to: DataType.INT32 } });
}

export function rmsNorm(g: GraphBuilder, x: string, weight: string, eps: number): string {
  const meanSq = g.op("ReduceMean", [g.op("Mul", [x, x])], { attributes: { axes: [-1], keepdims: 1 } });
  const inv = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [meanSq, g.scalar(eps)])])]);
  return g.op("Mul", [g.op("Mul", [x, inv]), weight]);
}

/**
 * HF rotary: x * cos + rotate_half(x) * sin on [T, heads, hd] with cos/sin [T, 1, rotaryDim]; with
 * partial rotary only the first rotaryDim dimensions turn and the rest pass through.
 */
export function applyRope(g: GraphBuilder, x: string, rope: StepRope, hd: number, rotaryDim: number): string {
  if (rotaryDim === hd) return rotate(g, x, rope, hd);
  const [rot, pass] = g.opN("Split", [x, g.int64s([rotaryDim, hd - rotaryDim])], 2, { attributes: { axis: -1 } });
  return g.op("Concat", [rotate(g, rot!, rope, rotaryDim), pass!], { attributes: { axis: -1 } });
}

function rotate(g: GraphBuilder, x: string, rope: StepRope, dim: number): string {
  const [x1, x2] = g.opN("Split", [x, g.int64s([dim / 2, dim / 2])], 2, { attributes: { axis: -1 } });
  const rotated = g.op("Concat", [g.op("Neg", [x2!]), x1!], { attributes: { axis: -1 } });
  return g.op("Add", [g.op("Mul", [x, rope.cos]), g.op("Mul", [rotated, rope.sin])]);
}
