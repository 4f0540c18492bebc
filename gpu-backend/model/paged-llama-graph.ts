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
import { concatTransposed, concatVectors, rmsNorm, rope, transpose } from "./llama-graph";

/**
 * The Llama-family decoder of `llama-graph.ts` with each layer's attention as ONE
 * `com.microsoft.PagedAttention` node over an fp16 block pool (onnxruntime 1.30, WebGPU/CUDA
 * kernels only). Everything else (embeddings, rotary, MLP, norms, LM head) is float32 as in
 * `llama-graph.ts`; only q/k/v are cast to fp16 for the op and its output back to fp32.
 *
 * One run is one engine step over a flat batch of T new tokens of B sequences, in any mix of
 * decode tokens and prefill chunks (the op handles mixed batches; no masks, no gathers):
 *
 *   input_ids, position_ids  int32 [T]     tokens of sequence 0, then 1, ... (no padding)
 *   cumulative_sequence_length int32 [B+1]  0, n0, n0+n1, ...
 *   past_seqlens             int32 [B]     tokens already in the pool per sequence (= startPos)
 *   block_table              int32 [B, M]  physical blocks per sequence, padded with 0
 *   logit_index              int32 [R]     flat rows whose logits (and argmax) to compute
 *   kv_k_L, kv_v_L           fp16 [numBlocks, blockSize, numKvHeads, headDim]   per layer
 *
 * Outputs: `logits` [R, vocab] fp32, `next_token` [R] int64 (ArgMax), and per layer the op's
 * cache outputs, named `cacheOutputs.k[L]` / `.v[L]` (the op's own output names: a renaming
 * Identity would give the output its own buffer and break the in-place aliasing). Bind the same
 * device buffer as `kv_k_L` input and as that preallocated output: the op then scatters this
 * step's K (after our rotary) and V into the pool in place.
 *
 * @example
 * const { model, cacheOutputs } = buildPagedLlamaGraph(spec, weights, 16);
 */
export interface PagedLlamaGraph {
  model: Uint8Array;
  /** Graph output names of the per-layer cache outputs (aliases of kv_k_L / kv_v_L). */
  cacheOutputs: { k: string[]; v: string[] };
}

export const PAGED_IO = {
  inputIds: "input_ids",
  positionIds: "position_ids",
  cumulative: "cumulative_sequence_length",
  past: "past_seqlens",
  blockTable: "block_table",
  logitIndex: "logit_index",
  kvK: (layer: number) => `kv_k_${layer}`,
  kvV: (layer: number) => `kv_v_${layer}`,
  logits: "logits",
  nextToken: "next_token",
} as const;

export function buildPagedLlamaGraph(spec: DecoderSpec, weights: WeightSource, blockSize: number): PagedLlamaGraph {
  if (blockSize < 16 || (blockSize & (blockSize - 1)) !== 0)
    throw new Error(`PagedAttention needs a power-of-two block size >= 16, got ${blockSize}`);
  const g = new GraphBuilder(`${spec.modelId}-paged-decoder`);
  const { hiddenSize: hid, numHeads: nh, numKvHeads: nkv, headDim: hd } = spec;
  if (!Number.isInteger(nh / nkv)) throw new Error(`numHeads ${nh} is not a multiple of numKvHeads ${nkv}`);
  const F = DataType.FLOAT;
  const F16 = DataType.FLOAT16;
  const I32 = DataType.INT32;
  const toF16 = { attributes: { to: F16 } };
  const toF32 = { attributes: { to: F } };

  const inputIds = g.input(PAGED_IO.inputIds, I32, ["T"]);
  const positionIds = g.input(PAGED_IO.positionIds, I32, ["T"]);
  const cumulative = g.input(PAGED_IO.cumulative, I32, ["B1"]);
  const past = g.input(PAGED_IO.past, I32, ["B"]);
  const blockTable = g.input(PAGED_IO.blockTable, I32, ["B", "M"]);
  const logitIndex = g.input(PAGED_IO.logitIndex, I32, ["R"]);

  const embed = g.weight(EMBED_WEIGHT, weights.take(EMBED_WEIGHT), [spec.vocabSize, hid]);
  const { cos, sin } = ropeTables(spec);
  const cosTable = g.weight("rope_cos", cos, [spec.maxPositions, hd]);
  const sinTable = g.weight("rope_sin", sin, [spec.maxPositions, hd]);
  const cosT = g.op("Unsqueeze", [g.op("Gather", [cosTable, positionIds], { attributes: { axis: 0 } }), g.int64s([1])]);
  const sinT = g.op("Unsqueeze", [g.op("Gather", [sinTable, positionIds], { attributes: { axis: 0 } }), g.int64s([1])]);

  let x = g.op("Gather", [embed, inputIds], { attributes: { axis: 0 } }); // [T, hid]
  const cacheShape = ["num_blocks", blockSize, nkv, hd];
  const cacheOutputs: PagedLlamaGraph["cacheOutputs"] = { k: [], v: [] };

  for (let l = 0; l < spec.numLayers; l++) {
    const w = layerWeightNames(l);
    const poolK = g.input(PAGED_IO.kvK(l), F16, cacheShape);
    const poolV = g.input(PAGED_IO.kvV(l), F16, cacheShape);

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
    const q16 = g.op("Cast", [g.op("Reshape", [q, g.int64s([0, nh * hd])])], toF16);
    const k16 = g.op("Cast", [g.op("Reshape", [k, g.int64s([0, nkv * hd])])], toF16);
    const v16 = g.op("Cast", [v2!], toF16);

    const [out, kOut, vOut] = g.opN("PagedAttention", [q16, k16, v16, poolK, poolV, cumulative, past, blockTable], 3, {
      domain: "com.microsoft",
      attributes: { num_heads: nh, kv_num_heads: nkv, scale: { float: 1 / Math.sqrt(hd) } },
    });
    g.output(kOut!, F16, cacheShape);
    g.output(vOut!, F16, cacheShape);
    cacheOutputs.k.push(kOut!);
    cacheOutputs.v.push(vOut!);

    const attn = g.op("Cast", [out!], toF32); // [T, nh*hd]
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
  g.output(logits, F, ["R", spec.vocabSize], PAGED_IO.logits);
  g.output(g.op("ArgMax", [logits], { attributes: { axis: 1, keepdims: 0 } }), DataType.INT64, ["R"], PAGED_IO.nextToken);
  return { model: g.encode(), cacheOutputs };
}
