import { DataType, GraphBuilder } from "./graph-builder";
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
 * The Llama-family decoder as an ONNX graph of standard ops (the portable "cpu" path), reading a
 * paged KV pool through slot indices.
 *
 * One run is one engine step over a flat batch of T new tokens from several sequences:
 *
 *   flat tokens:  [ d0 d1 ... d(Bd-1) | p0 p1 ... p(Tp-1) ]
 *                   decode group:        prefill group:
 *                   one token per seq    the chunks of one or more sequences, in order
 *
 *   KV pool (per layer, input kv_k_L / kv_v_L):  [numKvHeads, numSlots, headDim]
 *       slot = blockId * blockSize + offset     (the engine's block tables)
 *
 *   decode group:  keys of seq b = pool[dec_ctx_slots[b, 0..Sd)] ++ its own new key
 *                  dec_mask [1,Bd,1,Sd+1]: 0 where allowed, -1e30 on padding; the past and the
 *                  token's own key are scored separately, so the gathered past is never copied
 *                  again (no concat, no transpose: FusedMatMul reads K transposed)
 *   prefill group: keys = pool[pre_ctx_slots[0..Sp)] ++ all Tp new keys
 *                  pre_mask [1,1,Tp,Sp+Tp]: each token sees its own sequence's context and the
 *                  new tokens of its own sequence at positions <= its own
 *
 * Outputs: logits for the rows in `logit_index` (and their argmax, `next_token`), and each layer's new keys (after rotary) and
 * values [T, numKvHeads, headDim], which the executor writes into the pool at the tokens' slots.
 * The graph never copies the pool: it only gathers the context slots a step attends to.
 */
export function buildLlamaGraph(spec: DecoderSpec, weights: WeightSource): Uint8Array {
  const g = new GraphBuilder(`${spec.modelId}-decoder`);
  const { hiddenSize: hid, numHeads: nh, numKvHeads: nkv, headDim: hd } = spec;
  const groups = nh / nkv;
  if (!Number.isInteger(groups)) throw new Error(`numHeads ${nh} is not a multiple of numKvHeads ${nkv}`);
  const F = DataType.FLOAT;
  const I64 = DataType.INT64;

  const inputIds = g.input("input_ids", I64, ["T"]);
  const positionIds = g.input("position_ids", I64, ["T"]);
  const groupSizes = g.input("group_sizes", I64, [2]);
  const decSlots = g.input("dec_ctx_slots", I64, ["Bd", "Sd"]);
  const decMask = g.input("dec_mask", F, [1, "Bd", 1, "Sd1"]);
  const preSlots = g.input("pre_ctx_slots", I64, ["Sp"]);
  const preMask = g.input("pre_mask", F, [1, 1, "Tp", "Sp1"]);
  const logitIndex = g.input("logit_index", I64, ["R"]);

  const embed = g.weight(EMBED_WEIGHT, weights.take(EMBED_WEIGHT), [spec.vocabSize, hid]);
  const { cos, sin } = ropeTables(spec);
  const cosTable = g.weight("rope_cos", cos, [spec.maxPositions, hd]);
  const sinTable = g.weight("rope_sin", sin, [spec.maxPositions, hd]);

  // Rotary tables for this step's positions: [T, 1, hd], broadcast over heads.
  const cosT = g.op("Unsqueeze", [g.op("Gather", [cosTable, positionIds], { attributes: { axis: 0 } }), g.int64s([1])]);
  const sinT = g.op("Unsqueeze", [g.op("Gather", [sinTable, positionIds], { attributes: { axis: 0 } }), g.int64s([1])]);
  const scale = g.scalar(1 / Math.sqrt(hd));

  let x = g.op("Gather", [embed, inputIds], { attributes: { axis: 0 } }); // [T, hid]

  for (let l = 0; l < spec.numLayers; l++) {
    const w = layerWeightNames(l);
    const poolK = g.input(`kv_k_${l}`, F, [nkv, "S", hd]);
    const poolV = g.input(`kv_v_${l}`, F, [nkv, "S", hd]);

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
    g.output(k, F, ["T", nkv, hd], `new_k_${l}`);
    g.output(v, F, ["T", nkv, hd], `new_v_${l}`);

    const qScaled = g.op("Mul", [q, scale]);
    const [qd, qp] = g.opN("Split", [qScaled, groupSizes], 2, { attributes: { axis: 0 } });
    const [kd, kp] = g.opN("Split", [k, groupSizes], 2, { attributes: { axis: 0 } });
    const [vd, vp] = g.opN("Split", [v, groupSizes], 2, { attributes: { axis: 0 } });
    const decOut = decodeAttention(g, { q: qd!, k: kd!, v: vd!, poolK, poolV, slots: decSlots, mask: decMask, nkv, groups, hd });
    const preOut = prefillAttention(g, { q: qp!, k: kp!, v: vp!, poolK, poolV, slots: preSlots, mask: preMask, nkv, groups, hd });

    const attn = g.op("Concat", [decOut, preOut], { attributes: { axis: 0 } });
    const oW = transpose(weights.take(w.o), nh * hd, hid);
    x = g.op("Add", [x, g.op("MatMul", [attn, g.weight(`layer${l}.o`, oW, [nh * hd, hid])])]);

    const h2 = rmsNorm(g, x, g.weight(w.postNorm, weights.take(w.postNorm), [hid]), spec.rmsNormEps);
    const inter = spec.intermediateSize;
    const guW = concatTransposed([weights.take(w.gate), weights.take(w.up)], hid);
    const gu = g.op("MatMul", [h2, g.weight(`layer${l}.gate_up`, guW, [hid, 2 * inter])]);
    const [gate, up] = g.opN("Split", [gu, g.int64s([inter, inter])], 2, { attributes: { axis: 1 } });
    const act = g.op("Mul", [g.op("Mul", [gate!, g.op("Sigmoid", [gate!])]), up!]);
    const downW = transpose(weights.take(w.down), inter, hid);
    x = g.op("Add", [x, g.op("MatMul", [act, g.weight(`layer${l}.down`, downW, [inter, hid])])]);
  }

  const last = g.op("Gather", [x, logitIndex], { attributes: { axis: 0 } });
  const normed = rmsNorm(g, last, g.weight(FINAL_NORM_WEIGHT, weights.take(FINAL_NORM_WEIGHT), [hid]), spec.rmsNormEps);
  const head = spec.tieWordEmbeddings ? embed : g.weight(LM_HEAD_WEIGHT, weights.take(LM_HEAD_WEIGHT), [spec.vocabSize, hid]);
  const logits = g.op("Gemm", [normed, head], { attributes: { transB: 1 } });
  g.output(logits, F, ["R", spec.vocabSize], "logits");
  // Greedy decoding reads only this: the step need not fetch R x vocab logits at all.
  g.output(g.op("ArgMax", [logits], { attributes: { axis: 1, keepdims: 0 } }), DataType.INT64, ["R"], "next_token");
  return g.encode();
}

/** Input and output names of the graph, for executors. */
export const GRAPH_IO = {
  kvK: (layer: number) => `kv_k_${layer}`,
  kvV: (layer: number) => `kv_v_${layer}`,
  newK: (layer: number) => `new_k_${layer}`,
  newV: (layer: number) => `new_v_${layer}`,
  logits: "logits",
  nextToken: "next_token",
} as const;

interface AttentionArgs {
  q: string;
  k: string;
  v: string;
  poolK: string;
  poolV: string;
  slots: string;
  mask: string;
  nkv: number;
  groups: number;
  hd: number;
}

/** One new token per sequence: q [Bd, nh, hd] against its gathered past and its own key. */
function decodeAttention(g: GraphBuilder, a: AttentionArgs): string {
  const { nkv, groups, hd } = a;
  const q4 = g.op("Transpose", [g.op("Reshape", [a.q, g.int64s([-1, nkv, groups, hd])])], { attributes: { perm: [1, 0, 2, 3] } }); // [nkv, Bd, G, hd]
  const kPast = g.op("Gather", [a.poolK, a.slots], { attributes: { axis: 1 } }); // [nkv, Bd, Sd, hd]
  const vPast = g.op("Gather", [a.poolV, a.slots], { attributes: { axis: 1 } });
  const scoresPast = g.op("FusedMatMul", [q4, kPast], { domain: "com.microsoft", attributes: { transB: 1 } }); // [nkv, Bd, G, Sd]
  const kSelf = g.op("Unsqueeze", [g.op("Transpose", [a.k], { attributes: { perm: [1, 0, 2] } }), g.int64s([-1])]); // [nkv, Bd, hd, 1]
  const scoresSelf = g.op("MatMul", [q4, kSelf]); // [nkv, Bd, G, 1]
  const scores = g.op("Add", [g.op("Concat", [scoresPast, scoresSelf], { attributes: { axis: -1 } }), a.mask]);
  const probs = g.op("Softmax", [scores], { attributes: { axis: -1 } });
  const pPast = g.op("Slice", [probs, g.int64s([0]), g.int64s([-1]), g.int64s([-1])]);
  const pSelf = g.op("Slice", [probs, g.int64s([-1]), g.int64s([2 ** 31 - 1]), g.int64s([-1])]);
  const vSelf = g.op("Unsqueeze", [g.op("Transpose", [a.v], { attributes: { perm: [1, 0, 2] } }), g.int64s([2])]); // [nkv, Bd, 1, hd]
  const out = g.op("Add", [g.op("MatMul", [pPast, vPast]), g.op("Mul", [pSelf, vSelf])]); // [nkv, Bd, G, hd]
  return g.op("Reshape", [g.op("Transpose", [out], { attributes: { perm: [1, 0, 2, 3] } }), g.int64s([-1, nkv * groups * hd])]);
}

/** Chunks of one or more sequences, flat: q [Tp, nh, hd] against gathered context ++ new keys. */
function prefillAttention(g: GraphBuilder, a: AttentionArgs): string {
  const { nkv, groups, hd } = a;
  const q4 = g.op("Transpose", [g.op("Reshape", [a.q, g.int64s([-1, nkv, groups, hd])])], { attributes: { perm: [1, 2, 0, 3] } }); // [nkv, G, Tp, hd]
  const q3 = g.op("Reshape", [q4, g.int64s([nkv, -1, hd])]); // [nkv, G*Tp, hd]
  const kAll = g.op("Concat", [g.op("Gather", [a.poolK, a.slots], { attributes: { axis: 1 } }), g.op("Transpose", [a.k], { attributes: { perm: [1, 0, 2] } })], {
    attributes: { axis: 1 },
  }); // [nkv, Sp+Tp, hd]
  const vAll = g.op("Concat", [g.op("Gather", [a.poolV, a.slots], { attributes: { axis: 1 } }), g.op("Transpose", [a.v], { attributes: { perm: [1, 0, 2] } })], {
    attributes: { axis: 1 },
  });
  const scores = g.op("FusedMatMul", [q3, kAll], { domain: "com.microsoft", attributes: { transB: 1 } }); // [nkv, G*Tp, S2]
  const s2 = g.op("Slice", [g.op("Shape", [kAll]), g.int64s([1]), g.int64s([2])]);
  const shape4 = g.op("Concat", [g.int64s([nkv, groups, -1]), s2], { attributes: { axis: 0 } });
  const shape3 = g.op("Concat", [g.int64s([nkv, -1]), s2], { attributes: { axis: 0 } });
  const masked = g.op("Add", [g.op("Reshape", [scores, shape4]), a.mask]); // [nkv, G, Tp, S2]
  const probs = g.op("Reshape", [g.op("Softmax", [masked], { attributes: { axis: -1 } }), shape3]);
  const out = g.op("Reshape", [g.op("MatMul", [probs, vAll]), g.int64s([nkv, groups, -1, hd])]); // [nkv, G, Tp, hd]
  return g.op("Reshape", [g.op("Transpose", [out], { attributes: { perm: [2, 0, 1, 3] } }), g.int64s([-1, nkv * groups * hd])]);
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
