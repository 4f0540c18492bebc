import type { GraphBuilder } from "./graph-builder";
import { DataType } from "./graph-builder";
import {
  EMBED_WEIGHT,
  FINAL_NORM_WEIGHT,
  LM_HEAD_WEIGHT,
  layerWeightNames,
  ropeTables,
  type DecoderSpec,
  type WeightSource,
} from "./decoder-spec";

/**
 * The parts of the Llama decoder graph every executor's graph shares (float32): embeddings and
 * rotary tables, the q/k/v projection with rotary, the attention output projection with the MLP,
 * and the LM head. The graphs differ only in how attention reads the KV pool
 * (`llama-graph.ts`: gathered slots and masks; `paged-llama-graph.ts`: PagedAttention).
 */

/** Token embeddings and this step's rotary tables ([T, 1, headDim], broadcast over heads). */
export function embedTokens(g: GraphBuilder, spec: DecoderSpec, weights: WeightSource, inputIds: string, positionIds: string) {
  const embed = g.weight(EMBED_WEIGHT, weights.take(EMBED_WEIGHT), [spec.vocabSize, spec.hiddenSize]);
  const { cos, sin } = ropeTables(spec);
  const cosTable = g.weight("rope_cos", cos, [spec.maxPositions, spec.headDim]);
  const sinTable = g.weight("rope_sin", sin, [spec.maxPositions, spec.headDim]);
  const cosT = g.op("Unsqueeze", [g.op("Gather", [cosTable, positionIds], { attributes: { axis: 0 } }), g.int64s([1])]);
  const sinT = g.op("Unsqueeze", [g.op("Gather", [sinTable, positionIds], { attributes: { axis: 0 } }), g.int64s([1])]);
  const x = g.op("Gather", [embed, inputIds], { attributes: { axis: 0 } }); // [T, hidden]
  return { embed, x, cosT, sinT };
}

/** Layer `l`'s input norm and fused q/k/v projection (+ bias), rotary on q and k: q [T, nh, hd], k and v [T, nkv, hd]. */
export function attentionInputs(g: GraphBuilder, spec: DecoderSpec, weights: WeightSource, l: number, x: string, cosT: string, sinT: string) {
  const { hiddenSize: hid, numHeads: nh, numKvHeads: nkv, headDim: hd } = spec;
  const w = layerWeightNames(l);
  const h = rmsNorm(g, x, g.weight(w.inputNorm, weights.take(w.inputNorm), [hid]), spec.rmsNormEps);
  const qkvW = concatTransposed([weights.take(w.q), weights.take(w.k), weights.take(w.v)], hid);
  let qkv = g.op("MatMul", [h, g.weight(`layer${l}.qkv`, qkvW, [hid, (nh + 2 * nkv) * hd])]);
  if (spec.attentionBias) {
    const bias = concatVectors([weights.take(w.qBias), weights.take(w.kBias), weights.take(w.vBias)]);
    qkv = g.op("Add", [qkv, g.weight(`layer${l}.qkv_bias`, bias, [bias.length])]);
  }
  const [q2, k2, v2] = g.opN("Split", [qkv, g.int64s([nh * hd, nkv * hd, nkv * hd])], 3, { attributes: { axis: 1 } });
  const q = rope(g, g.op("Reshape", [q2!, g.int64s([0, nh, hd])]), cosT, sinT, hd);
  const k = rope(g, g.op("Reshape", [k2!, g.int64s([0, nkv, hd])]), cosT, sinT, hd);
  const v = g.op("Reshape", [v2!, g.int64s([0, nkv, hd])]);
  return { q, k, v };
}

/** Layer `l` after attention: output projection and residual, post norm, SwiGLU MLP and residual. */
export function attentionOutputAndMlp(g: GraphBuilder, spec: DecoderSpec, weights: WeightSource, l: number, x: string, attn: string): string {
  const { hiddenSize: hid, numHeads: nh, headDim: hd, intermediateSize: inter } = spec;
  const w = layerWeightNames(l);
  const oW = transpose(weights.take(w.o), nh * hd, hid);
  const afterAttn = g.op("Add", [x, g.op("MatMul", [attn, g.weight(`layer${l}.o`, oW, [nh * hd, hid])])]);
  const h2 = rmsNorm(g, afterAttn, g.weight(w.postNorm, weights.take(w.postNorm), [hid]), spec.rmsNormEps);
  const guW = concatTransposed([weights.take(w.gate), weights.take(w.up)], hid);
  const gu = g.op("MatMul", [h2, g.weight(`layer${l}.gate_up`, guW, [hid, 2 * inter])]);
  const [gate, up] = g.opN("Split", [gu, g.int64s([inter, inter])], 2, { attributes: { axis: 1 } });
  const act = g.op("Mul", [g.op("Mul", [gate!, g.op("Sigmoid", [gate!])]), up!]);
  const downW = transpose(weights.take(w.down), inter, hid);
  return g.op("Add", [afterAttn, g.op("MatMul", [act, g.weight(`layer${l}.down`, downW, [inter, hid])])]);
}

/**
 * Final norm and LM head for the rows in `logitIndex` only, as outputs `logits` [R, vocab] and
 * `next_token` [R] (their argmax: greedy decoding reads only this).
 */
export function lmHead(g: GraphBuilder, spec: DecoderSpec, weights: WeightSource, embed: string, x: string, logitIndex: string, names: { logits: string; nextToken: string }): void {
  const last = g.op("Gather", [x, logitIndex], { attributes: { axis: 0 } });
  const normed = rmsNorm(g, last, g.weight(FINAL_NORM_WEIGHT, weights.take(FINAL_NORM_WEIGHT), [spec.hiddenSize]), spec.rmsNormEps);
  const head = spec.tieWordEmbeddings ? embed : g.weight(LM_HEAD_WEIGHT, weights.take(LM_HEAD_WEIGHT), [spec.vocabSize, spec.hiddenSize]);
  const logits = g.op("Gemm", [normed, head], { attributes: { transB: 1 } });
  g.output(logits, DataType.FLOAT, ["R", spec.vocabSize], names.logits);
  g.output(g.op("ArgMax", [logits], { attributes: { axis: 1, keepdims: 0 } }), DataType.INT64, ["R"], names.nextToken);
}

export function rmsNorm(g: GraphBuilder, x: string, weight: string, eps: number): string {
  const meanSq = g.op("ReduceMean", [g.op("Mul", [x, x])], { attributes: { axes: [-1], keepdims: 1 } });
  const inv = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [meanSq, g.scalar(eps)])])]);
  return g.op("Mul", [g.op("Mul", [x, inv]), weight]);
}

/** HF Llama rotary: x * cos + rotate_half(x) * sin, on [T, heads, hd] with cos/sin [T, 1, hd]. */
export function rope(g: GraphBuilder, x: string, cos: string, sin: string, hd: number): string {
  const [x1, x2] = g.opN("Split", [x, g.int64s([hd / 2, hd / 2])], 2, { attributes: { axis: -1 } });
  const rotated = g.op("Concat", [g.op("Neg", [x2!]), x1!], { attributes: { axis: -1 } });
  return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rotated, sin])]);
}

/** [out, in] (HF linear layout) -> [in, out] for MatMul. */
export function transpose(w: Float32Array, inDim: number, outDim: number): Float32Array {
  if (w.length !== inDim * outDim) throw new Error(`weight has ${w.length} values, expected ${outDim}x${inDim}`);
  const out = new Float32Array(w.length);
  for (let o = 0; o < outDim; o++) {
    const row = o * inDim;
    for (let i = 0; i < inDim; i++) out[i * outDim + o] = w[row + i]!;
  }
  return out;
}

/** Several [out_k, in] weights -> one [in, sum(out_k)] matrix, so one MatMul computes them all. */
export function concatTransposed(ws: Float32Array[], inDim: number): Float32Array {
  const outs = ws.map((w) => w.length / inDim);
  const total = outs.reduce((a, b) => a + b, 0);
  const out = new Float32Array(inDim * total);
  let col = 0;
  ws.forEach((w, k) => {
    const outDim = outs[k]!;
    for (let o = 0; o < outDim; o++) {
      const row = o * inDim;
      for (let i = 0; i < inDim; i++) out[i * total + col + o] = w[row + i]!;
    }
    col += outDim;
  });
  return out;
}

export function concatVectors(vs: Float32Array[]): Float32Array {
  const out = new Float32Array(vs.reduce((a, v) => a + v.length, 0));
  let off = 0;
  for (const v of vs) {
    out.set(v, off);
    off += v.length;
  }
  return out;
}
