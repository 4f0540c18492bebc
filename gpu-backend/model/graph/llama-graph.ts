import { DataType, GraphBuilder } from "./graph-builder";
import type { DecoderSpec, WeightSource } from "./decoder-spec";
import { pickMoeKernel } from "./moe-block";
import type { QuantizedWeights } from "../quant/quantized-weights";
import type { GraphWeights } from "./linear";
import { attentionInputs, attentionOutputAndMlp, embedTokens, layerRope, lmHead } from "./decoder-blocks";
import { decodeAttention, decodeContextInputs, decodeGroupInputs } from "./decode-attention";

/**
 * The Llama-family decoder as an ONNX graph of standard ops (the portable "cpu" path), reading a
 * paged KV pool through slot indices.
 *
 * One run is one engine step over a flat batch of T new tokens from several sequences:
 *
 *   flat tokens:  [ d0 d1 ... d(Td-1) | p0 p1 ... p(Tp-1) ]
 *                   decode group:        prefill group:
 *                   one token per seq,   the chunks of one or more sequences, in order
 *                   or a verify run
 *
 *   KV pool (per layer, input kv_k_L / kv_v_L):  [numKvHeads, numSlots, headDim]
 *       slot = blockId * blockSize + offset     (the engine's block tables)
 *
 *   decode group:  each row attended on its own against its recent positions (its own key, the
 *                  step's earlier verify rows, the pool's) and the pool's older ones
 *                  pool[dec_ctx_slots[b, .., 0..Sp)], so its logits are those of the token
 *                  decoded alone, bit for bit: see decode-attention.ts
 *   prefill group: keys = pool[pre_ctx_slots[0..Sp)] ++ all Tp new keys
 *                  pre_mask [1,1,Tp,Sp+Tp]: each token sees its own sequence's context and the
 *                  new tokens of its own sequence at positions <= its own
 *   sliding-window layers (window W) read the same way from `*_local` inputs that gather only
 *                  the last W - 1 context positions and mask keys at q - k >= W, so their cost
 *                  stays bounded by the window however long the context grows
 *
 * Outputs: logits for the rows in `logit_index` (and their argmax, `next_token`), and each layer's new keys (after rotary) and
 * values [T, numKvHeads, headDim], which the executor writes into the pool at the tokens' slots.
 * The graph never copies the pool: it only gathers the context slots a step attends to.
 */
export function buildLlamaGraph(spec: DecoderSpec, weights: WeightSource, quantized: QuantizedWeights | null = null, options: { integerPrefill?: boolean } = {}): Uint8Array {
  const g = new GraphBuilder(`${spec.modelId}-decoder`);
  const { numHeads: nh, numKvHeads: nkv, headDim: hd } = spec;
  const groups = nh / nkv;
  if (!Number.isInteger(groups)) throw new Error(`numHeads ${nh} is not a multiple of numKvHeads ${nkv}`);
  const F = DataType.FLOAT;
  const I64 = DataType.INT64;

  const inputIds = g.input("input_ids", I64, ["T"]);
  const positionIds = g.input("position_ids", I64, ["T"]);
  const groupSizes = g.input("group_sizes", I64, [2]);
  const gw: GraphWeights = { source: weights, quantized, rowGroups: options.integerPrefill ? groupSizes : undefined };
  const decGroup = decodeGroupInputs(g, GRAPH_IO, { nkv, groups, hd });
  const decContext = decodeContextInputs(g, GRAPH_IO.full, false);
  const preSlots = g.input(GRAPH_IO.full.preSlots, I64, ["Sp"]);
  const preMask = g.input(GRAPH_IO.full.preMask, F, [1, 1, "Tp", "Sp1"]);
  // Sliding-window layers read only the keys inside their window: their own, narrower context.
  const local = slidingWindowOf(spec) === null
    ? null
    : {
        decContext: decodeContextInputs(g, GRAPH_IO.local, true),
        preSlots: g.input(GRAPH_IO.local.preSlots, I64, ["Wp"]),
        preMask: g.input(GRAPH_IO.local.preMask, F, [1, 1, "Tp", "Wp1"]),
      };
  const logitIndex = g.input("logit_index", I64, ["R"]);

  const step = embedTokens(g, spec, gw, inputIds, positionIds);
  const { embed, x: x0 } = step;
  const scale = g.scalar(spec.attentionScale);
  let x = x0;

  for (let l = 0; l < spec.numLayers; l++) {
    const poolK = g.input(`kv_k_${l}`, F, [nkv, "S", hd]);
    const poolV = g.input(`kv_v_${l}`, F, [nkv, "S", hd]);
    const { q, k, v } = attentionInputs(g, spec, gw, l, x, layerRope(spec, l, step));
    g.output(k, F, ["T", nkv, hd], `new_k_${l}`);
    g.output(v, F, ["T", nkv, hd], `new_v_${l}`);

    const qScaled = g.op("Mul", [q, scale]);
    const [qd, qp] = g.opN("Split", [qScaled, groupSizes], 2, { attributes: { axis: 0 } });
    const [kd, kp] = g.opN("Split", [k, groupSizes], 2, { attributes: { axis: 0 } });
    const [vd, vp] = g.opN("Split", [v, groupSizes], 2, { attributes: { axis: 0 } });
    const ctx = spec.layerWindows[l] !== null && local ? local : { decContext, preSlots, preMask };
    const decOut = decodeAttention(g, { q: qd!, k: kd!, v: vd!, poolK, poolV, group: decGroup, context: ctx.decContext, nkv, groups, hd });
    const preOut = prefillAttention(g, { q: qp!, k: kp!, v: vp!, poolK, poolV, slots: ctx.preSlots, mask: ctx.preMask, nkv, groups, hd });

    const attn = g.op("Concat", [decOut, preOut], { attributes: { axis: 0 } });
    x = attentionOutputAndMlp(g, spec, gw, l, x, attn, pickMoeKernel("cpu", gw.quantized !== null));
  }

  lmHead(g, spec, gw, embed, x, logitIndex, { logits: "logits", nextToken: "next_token" }, "argmax");
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
  /** The context every full-attention layer reads. */
  full: { decSlots: "dec_ctx_slots", decMask: "dec_mask", preSlots: "pre_ctx_slots", preMask: "pre_mask" },
  /** The sliding-window layers' context (present when the spec has such layers). */
  local: { decSlots: "dec_ctx_slots_local", decMask: "dec_mask_local", preSlots: "pre_ctx_slots_local", preMask: "pre_mask_local" },
  /** The decode group's rows (decode-attention.ts). */
  decRows: "dec_rows",
  decUnpad: "dec_unpad",
  decRecentSlots: "dec_recent_slots",
  decNewRows: "dec_new_rows",
  decNewAt: "dec_new_at",
} as const;

/** The input names of one attention context. */
export type ContextInputNames = (typeof GRAPH_IO)["full"] | (typeof GRAPH_IO)["local"];

/**
 * The one sliding window of the spec's windowed layers, or null when every layer attends fully.
 * @throws when layers have different windows (no supported family has that)
 */
export function slidingWindowOf(spec: DecoderSpec): number | null {
  const windows = new Set(spec.layerWindows.filter((w): w is number => w !== null));
  if (windows.size > 1) throw new Error(`layers with different sliding windows (${[...windows].join(", ")}) are not supported`);
  return windows.size === 0 ? null : [...windows][0]!;
}

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
