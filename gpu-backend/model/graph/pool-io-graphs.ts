import { DataType, GraphBuilder } from "./graph-builder";
import type { DecoderSpec } from "./decoder-spec";
import { PAGED_IO } from "./paged-llama-graph";

/**
 * The small graphs a device-resident KV pool needs besides the decoder (`paged-llama-graph.ts`),
 * for onnxruntime-node's WebGPU provider, whose JavaScript API can neither allocate a device
 * tensor nor copy into or out of one except by running a session:
 *
 *   - `poolAllocGraph`: one pool tensor (layer, kind) of zeros, made on the device (an Expand of one
 *     fp16 zero), returned as a `gpu-buffer` output the executor keeps;
 *   - `blockGatherGraph` (read): the pool tensors and `block_ids` int32 [n] in, the blocks out as
 *     [n, 2 x layers, blockSize, kvHeads, headDim] fp16 on the host: per block, layer 0 K, layer 0
 *     V, layer 1 K, ... which is `BlockIO`'s byte layout (`f16/kv-layer-slot-head-dim`);
 *   - `blockScatterGraph` (write): the pool tensors, `blocks` fp16 [n, 2 x layers, blockSize x
 *     kvHeads x headDim] and a one-block table per block in; each layer's PagedAttention (cache
 *     outputs omitted, as in the decoder) scatters the block's rows into its slots in place. The
 *     attention it computes on the way is discarded (its query is the keys repeated per group);
 *     only a [layers, 1] corner of it leaves the graph, so no optimizer prunes the node.
 *
 * Inputs named as the decoder's (`kv_k_L`, `kv_v_L`), so the same tensors feed every session.
 *
 * @example const alloc = poolAllocGraph(spec, numBlocks, 16);
 */
export const POOL_IO = {
  pool: "pool",
  blockIds: "block_ids",
  blocks: "blocks",
  written: "written",
} as const;

export function poolAllocGraph(spec: DecoderSpec, numBlocks: number, blockSize: number): Uint8Array {
  const g = new GraphBuilder("kv-pool-alloc");
  const shape = [numBlocks, blockSize, spec.numKvHeads, spec.headDim];
  const zero = g.half("zero", new Uint16Array(1), [1]);
  g.output(g.op("Expand", [zero, g.int64s(shape)]), DataType.FLOAT16, shape, POOL_IO.pool);
  return g.encode();
}

function poolInputs(g: GraphBuilder, spec: DecoderSpec, blockSize: number): string[] {
  const shape = ["num_blocks", blockSize, spec.numKvHeads, spec.headDim];
  const names: string[] = [];
  for (let l = 0; l < spec.numLayers; l++) {
    names.push(g.input(PAGED_IO.kvK(l), DataType.FLOAT16, shape), g.input(PAGED_IO.kvV(l), DataType.FLOAT16, shape));
  }
  return names;
}

export function blockGatherGraph(spec: DecoderSpec, blockSize: number): Uint8Array {
  const g = new GraphBuilder("kv-block-gather");
  const pools = poolInputs(g, spec, blockSize);
  const ids = g.input(POOL_IO.blockIds, DataType.INT32, ["n"]);
  const parts = pools.map((pool) => g.op("Unsqueeze", [g.op("Gather", [pool, ids], { attributes: { axis: 0 } }), g.int64s([1])]));
  const blocks = parts.length === 1 ? parts[0]! : g.op("Concat", parts, { attributes: { axis: 1 } });
  g.output(blocks, DataType.FLOAT16, ["n", 2 * spec.numLayers, blockSize, spec.numKvHeads, spec.headDim], POOL_IO.blocks);
  return g.encode();
}

export function blockScatterGraph(spec: DecoderSpec, blockSize: number): Uint8Array {
  const { numHeads: nh, numKvHeads: nkv, headDim: hd } = spec;
  const g = new GraphBuilder("kv-block-scatter");
  const pools = poolInputs(g, spec, blockSize);
  const blocks = g.input(POOL_IO.blocks, DataType.FLOAT16, ["n", 2 * spec.numLayers, blockSize * nkv * hd]);
  const cumulative = g.input(PAGED_IO.cumulative, DataType.INT32, ["n1"]);
  const past = g.input(PAGED_IO.past, DataType.INT32, ["n"]);
  const table = g.input(PAGED_IO.blockTable, DataType.INT32, ["n", 1]);
  const metadata = g.input(PAGED_IO.attentionMetadata, DataType.INT32, [3]);
  const rows = (index: number) => g.op("Reshape", [g.op("Gather", [blocks, g.int64s([index])], { attributes: { axis: 1 } }), g.int64s([-1, nkv * hd])]);
  const unused = Array<string>(8).fill("");
  const corners: string[] = [];
  for (let l = 0; l < spec.numLayers; l++) {
    const k = rows(2 * l);
    const v = rows(2 * l + 1);
    const q = nh === nkv ? k : g.op("Concat", Array<string>(nh / nkv).fill(k), { attributes: { axis: 1 } });
    const out = g.op("PagedAttention", [q, k, v, pools[2 * l]!, pools[2 * l + 1]!, cumulative, past, table, ...unused, metadata], {
      domain: "com.microsoft",
      attributes: { num_heads: nh, kv_num_heads: nkv },
    });
    corners.push(g.op("Slice", [out, g.int64s([0, 0]), g.int64s([1, 1])]));
  }
  const written = corners.length === 1 ? corners[0]! : g.op("Concat", corners, { attributes: { axis: 0 } });
  g.output(written, DataType.FLOAT16, [spec.numLayers, 1], POOL_IO.written);
  return g.encode();
}
