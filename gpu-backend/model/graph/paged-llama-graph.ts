import { DataType, GraphBuilder } from "./graph-builder";
import type { ModelSpec } from "./onnx-proto";
import { hasSlidingWindows, type DecoderSpec, type WeightSource } from "./decoder-spec";
import { pickMoeKernel } from "./moe-block";
import type { QuantizedWeights } from "../quant/quantized-weights";
import type { GraphWeights } from "./linear";
import { attentionInputs, attentionOutputAndMlp, embedTokens, layerRope, lmHead } from "./decoder-blocks";
import { fusedContext, fusedEmbed, fusedLayer, fusedLmHead, type Stream } from "./fused-blocks";

/**
 * The Llama-family decoder of `llama-graph.ts` with each layer's attention as ONE
 * `com.microsoft.PagedAttention` node over an fp16 block pool (onnxruntime 1.30, WebGPU/CUDA
 * kernels only). By default the layers are `fused-blocks.ts`' (SimplifiedLayerNormalization with
 * the residual adds fused, packed QKV, the op's own rotary, fp16 activations with fp16 or
 * quantized weights: ~11 nodes per dense layer); `fused: false` builds the unfused graph of the
 * shared blocks (float32 everywhere as in `llama-graph.ts`, q/k/v cast to fp16 for the op and its
 * output back to fp32; ~56 nodes per layer), kept for comparison.
 *
 * One run is one engine step over a flat batch of T new tokens of B sequences, in any mix of
 * decode tokens and prefill chunks (the op handles mixed batches; no masks, no gathers):
 *
 *   input_ids, position_ids  int32 [T]     tokens of sequence 0, then 1, ... (no padding)
 *   cumulative_sequence_length int32 [B+1]  0, n0, n0+n1, ...
 *   past_seqlens             int32 [B]     tokens already in the pool per sequence (= startPos)
 *   block_table              int32 [B, M]  physical blocks per sequence, padded with 0
 *   logit_index              int32 [R]     flat rows whose logits (and argmax) to compute
 *   attention_metadata       int32 [3]     host bounds of this step, for every PagedAttention node:
 *                                          [max new tokens of an entry, max past + new of an entry,
 *                                          the same again as the lower bound] (see below)
 *   kv_k_L, kv_v_L           fp16 [numBlocks, blockSize, numKvHeads, headDim]   per layer
 *
 * Outputs: `logits` [R, vocab] fp32 and `next_token` [R] int32 (their argmax, two-stage:
 * `chunkedArgmax`). PagedAttention's own cache outputs are omitted: the op then scatters this
 * step's K (after our rotary) and V into the cache INPUTS in place (onnxruntime 1.30, WebGPU and
 * CUDA kernels: "if both are omitted, update the input caches in place"). So the pool is whatever
 * buffer the executor feeds as `kv_k_L` / `kv_v_L`: a device buffer it created once (device-pool
 * executors), or a compact copy it uploads (the host-pool executor, which takes the new rows from
 * `new_k_L` / `new_v_L`). No aliasing of outputs to inputs, no copy of the pool, no 2x memory.
 *
 * `attention_metadata` is PagedAttention's input 16 (onnxruntime 1.30 schema: int32 (2) or (3) in
 * CPU memory, [max_query_len_bound, max_kv_len_bound, optional max_kv_len_lower_bound]). Without
 * it the op copies `cumulative_sequence_length` and `past_seqlens` back from the device and waits,
 * once per layer per step. The bounds only size launches and pick kernels, never enter a mask;
 * upper bounds must hold for the step (exact step values do; we capture no graphs).
 *
 * @example
 * const { model } = buildPagedLlamaGraph(spec, weights, 16);
 */
export interface PagedLlamaGraph {
  model: Uint8Array;
  /** What `model` encodes (nodes, inputs, outputs, initializers by reference): for graph tests. */
  graph: ModelSpec;
}

export interface PagedLlamaGraphOptions {
  /**
   * Also output each layer's new keys (after rotary) and values as `new_k_L` / `new_v_L`, fp16
   * [T, numKvHeads * headDim]: for an executor whose pool lives on the host (the cuda executor),
   * which writes these rows into its pool instead of downloading the op's whole cache output.
   */
  newKvOutputs?: boolean;
  /** Quantized linear weights (MatMulNBits), or float weights when absent. */
  quantized?: QuantizedWeights | null;
  /** Float weights and their products in float16 (see graph/linear.ts). */
  float16?: boolean;
  /** The fused layers of `fused-blocks.ts` (default true); false: the unfused shared blocks. */
  fused?: boolean;
}

export const PAGED_IO = {
  inputIds: "input_ids",
  positionIds: "position_ids",
  cumulative: "cumulative_sequence_length",
  past: "past_seqlens",
  blockTable: "block_table",
  logitIndex: "logit_index",
  attentionMetadata: "attention_metadata",
  kvK: (layer: number) => `kv_k_${layer}`,
  kvV: (layer: number) => `kv_v_${layer}`,
  newK: (layer: number) => `new_k_${layer}`,
  newV: (layer: number) => `new_v_${layer}`,
  logits: "logits",
  nextToken: "next_token",
} as const;

export function buildPagedLlamaGraph(spec: DecoderSpec, weights: WeightSource, blockSize: number, options: PagedLlamaGraphOptions = {}): PagedLlamaGraph {
  const gw: GraphWeights = { source: weights, quantized: options.quantized ?? null, float16: options.float16 ?? false };
  if (blockSize < 16 || (blockSize & (blockSize - 1)) !== 0)
    throw new Error(`PagedAttention needs a power-of-two block size >= 16, got ${blockSize}`);
  if (hasSlidingWindows(spec)) {
    // onnxruntime 1.30's PagedAttention kernels (WebGPU, CUDA) do not implement local windows.
    throw new Error(`${spec.modelId} has sliding-window layers, which PagedAttention in onnxruntime 1.30 cannot mask; serve it on the cpu executor`);
  }
  const g = new GraphBuilder(`${spec.modelId}-paged-decoder`);
  const { numHeads: nh, numKvHeads: nkv, headDim: hd } = spec;
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
  const metadata = g.input(PAGED_IO.attentionMetadata, I32, [3]);

  const cacheShape = ["num_blocks", blockSize, nkv, hd];
  if (options.fused ?? true) {
    // fp16 activations wherever the weights are not float32.
    const fgw: GraphWeights = { ...gw, float16Activations: gw.float16 || gw.quantized !== null };
    const c = fusedContext(g, spec, fgw, positionIds, options.newKvOutputs ?? false);
    const { embed, x } = fusedEmbed(c, inputIds);
    let stream: Stream = { residual: x, pending: null };
    for (let l = 0; l < spec.numLayers; l++) {
      const p = { poolK: g.input(PAGED_IO.kvK(l), F16, cacheShape), poolV: g.input(PAGED_IO.kvV(l), F16, cacheShape), cumulative, past, blockTable, metadata };
      const layer = fusedLayer(c, l, stream, p);
      stream = layer.stream;
      if (options.newKvOutputs) {
        g.output(layer.newK!, F16, ["T", nkv * hd], PAGED_IO.newK(l));
        g.output(layer.newV!, F16, ["T", nkv * hd], PAGED_IO.newV(l));
      }
    }
    fusedLmHead(c, embed, stream, logitIndex, { logits: PAGED_IO.logits, nextToken: PAGED_IO.nextToken });
    return { model: g.encode(), graph: g.spec() };
  }

  const step = embedTokens(g, spec, gw, inputIds, positionIds);
  const { embed, x: x0 } = step;
  let x = x0;

  for (let l = 0; l < spec.numLayers; l++) {
    const poolK = g.input(PAGED_IO.kvK(l), F16, cacheShape);
    const poolV = g.input(PAGED_IO.kvV(l), F16, cacheShape);

    const { q, k, v } = attentionInputs(g, spec, gw, l, x, layerRope(spec, l, step));
    const q16 = g.op("Cast", [g.op("Reshape", [q, g.int64s([0, nh * hd])])], toF16);
    const k16 = g.op("Cast", [g.op("Reshape", [k, g.int64s([0, nkv * hd])])], toF16);
    const v16 = g.op("Cast", [g.op("Reshape", [v, g.int64s([0, nkv * hd])])], toF16);
    if (options.newKvOutputs) {
      g.output(k16, F16, ["T", nkv * hd], PAGED_IO.newK(l));
      g.output(v16, F16, ["T", nkv * hd], PAGED_IO.newV(l));
    }

    // Inputs 8-15 (cos/sin caches, slot_mapping, head_sink, q/k norm weights, k/v scales) unused.
    const unused = Array<string>(8).fill("");
    // One output: with key_cache_out / value_cache_out omitted the op updates poolK / poolV in place.
    const out = g.op("PagedAttention", [q16, k16, v16, poolK, poolV, cumulative, past, blockTable, ...unused, metadata], {
      domain: "com.microsoft",
      attributes: { num_heads: nh, kv_num_heads: nkv, scale: { float: spec.attentionScale } },
    });

    const attn = g.op("Cast", [out], toF32); // [T, nh*hd]
    x = attentionOutputAndMlp(g, spec, gw, l, x, attn, pickMoeKernel("webgpu", gw.quantized !== null));
  }

  lmHead(g, spec, gw, embed, x, logitIndex, { logits: PAGED_IO.logits, nextToken: PAGED_IO.nextToken }, "chunked");
  return { model: g.encode(), graph: g.spec() };
}
