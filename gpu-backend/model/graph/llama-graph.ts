import { DataType, GraphBuilder } from "./graph-builder";
import type { DecoderSpec, WeightSource } from "./decoder-spec";
import { pickMoeKernel } from "./moe-block";
import type { QuantizedWeights } from "../quant/quantized-weights";
import type { GraphWeights, IntegerKernel } from "./linear";
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
 *   prefill group: chunks of one or more sequences in Bp bundles of Tm padded rows (pre_rows,
 *                  pre_unpad; cpu-prefill-feeds.ts), per bundle keys = pool[pre_ctx_slots[b]]
 *                  ++ its new keys, pre_mask [Bp,1,Tm,Sm+Tm]: each token sees its own
 *                  sequence's context and its new tokens at positions <= its own
 *   sliding-window layers (window W) read the same way from `*_local` inputs that gather only
 *                  the last W - 1 context positions and mask keys at q - k >= W, so their cost
 *                  stays bounded by the window however long the context grows
 *
 * Outputs: logits for the rows in `logit_index` (and their argmax, `next_token`), and each layer's new keys (after rotary) and
 * values [T, numKvHeads, headDim], which the executor writes into the pool at the tokens' slots.
 * The graph never copies the pool: it only gathers the context slots a step attends to.
 */
export function buildLlamaGraph(spec: DecoderSpec, weights: WeightSource, quantized: QuantizedWeights | null = null, options: { integerPrefill?: IntegerKernel; padOneRow?: boolean } = {}): Uint8Array {
  const g = new GraphBuilder(`${spec.modelId}-decoder`);
  const { numHeads: nh, numKvHeads: nkv, headDim: hd } = spec;
  const groups = nh / nkv;
  if (!Number.isInteger(groups)) throw new Error(`numHeads ${nh} is not a multiple of numKvHeads ${nkv}`);
  const F = DataType.FLOAT;
  const I64 = DataType.INT64;

  const inputIds = g.input("input_ids", I64, ["T"]);
  const positionIds = g.input("position_ids", I64, ["T"]);
  const groupSizes = g.input("group_sizes", I64, [2]);
  const gw: GraphWeights = { source: weights, quantized, rowGroups: options.integerPrefill ? { sizes: groupSizes, kernel: options.integerPrefill } : undefined, padOneRow: options.padOneRow };
  const decGroup = decodeGroupInputs(g, GRAPH_IO, { nkv, groups, hd });
  const decContext = decodeContextInputs(g, GRAPH_IO.full, false);
  const preRows = { rows: g.input(GRAPH_IO.preRows, I64, ["BpTm"]), unpad: g.input(GRAPH_IO.preUnpad, I64, ["Tp"]) };
  const preSlots = g.input(GRAPH_IO.full.preSlots, I64, ["Bp", "Sm"]);
  const preMask = g.input(GRAPH_IO.full.preMask, F, ["Bp", 1, "Tm", "Sm1"]);
  // Sliding-window layers read only the keys inside their window: their own, narrower context.
  const local = slidingWindowOf(spec) === null
    ? null
    : {
        decContext: decodeContextInputs(g, GRAPH_IO.local, true),
        preSlots: g.input(GRAPH_IO.local.preSlots, I64, ["Bp", "Wm"]),
        preMask: g.input(GRAPH_IO.local.preMask, F, ["Bp", 1, "Tm", "Wm1"]),
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
    const preOut = prefillAttention(g, { q: qp!, k: kp!, v: vp!, poolK, poolV, ...preRows, slots: ctx.preSlots, mask: ctx.preMask, nkv, groups, hd });

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
  /** The prefill group's rows padded into bundles, and back (cpu-prefill-feeds.ts). */
  preRows: "pre_rows",
  preUnpad: "pre_unpad",
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
  /** [Bp * Tm]: the prefill-group row of each padded row; [Tp]: the padded row of each group row. */
  rows: string;
  unpad: string;
  /** [Bp, Sm] pool slots; [Bp, 1, Tm, Sm + Tm] additive mask. */
  slots: string;
  mask: string;
  nkv: number;
  groups: number;
  hd: number;
}

/**
 * The prefill group (chunks of one or more sequences) in Bp bundles of Tm padded rows
 * (cpu-prefill-feeds.ts): each bundle's queries [nkv, Bp, G * Tm, hd] against its context slots
 * gathered from the pool ++ its new keys, [nkv, Bp, Sm + Tm, hd], under its mask.
 */
function prefillAttention(g: GraphBuilder, a: AttentionArgs): string {
  const { nkv, groups, hd } = a;
  const bp = g.op("Slice", [g.op("Shape", [a.slots]), g.int64s([0]), g.int64s([1])]);
  const bundled = (x: string, inner: number[]) => g.op("Reshape", [g.op("Gather", [x, a.rows], { attributes: { axis: 0 } }), g.op("Concat", [bp, g.int64s([-1, ...inner])], { attributes: { axis: 0 } })]);
  const q5 = g.op("Transpose", [bundled(a.q, [nkv, groups, hd])], { attributes: { perm: [2, 0, 3, 1, 4] } }); // [nkv, Bp, G, Tm, hd]
  const q4 = g.op("Reshape", [q5, g.int64s([0, 0, -1, hd])]); // [nkv, Bp, G*Tm, hd]
  const all = (pool: string, fresh: string) =>
    g.op("Concat", [g.op("Gather", [pool, a.slots], { attributes: { axis: 1 } }), g.op("Transpose", [bundled(fresh, [nkv, hd])], { attributes: { perm: [2, 0, 1, 3] } })], {
      attributes: { axis: 2 },
    }); // [nkv, Bp, Sm+Tm, hd]
  const kAll = all(a.poolK, a.k);
  const vAll = all(a.poolV, a.v);
  const scores = g.op("FusedMatMul", [q4, kAll], { domain: "com.microsoft", attributes: { transB: 1 } }); // [nkv, Bp, G*Tm, S2]
  const s2 = g.op("Slice", [g.op("Shape", [kAll]), g.int64s([2]), g.int64s([3])]);
  const shape5 = g.op("Concat", [g.int64s([nkv]), bp, g.int64s([groups, -1]), s2], { attributes: { axis: 0 } });
  const shape4 = g.op("Concat", [g.int64s([nkv]), bp, g.int64s([-1]), s2], { attributes: { axis: 0 } });
  const masked = g.op("Add", [g.op("Reshape", [scores, shape5]), a.mask]); // [nkv, Bp, G, Tm, S2]
  const probs = g.op("Reshape", [g.op("Softmax", [masked], { attributes: { axis: -1 } }), shape4]);
  const out = g.op("Reshape", [g.op("MatMul", [probs, vAll]), g.int64s([0, 0, groups, -1, hd])]); // [nkv, Bp, G, Tm, hd]
  const padded = g.op("Reshape", [g.op("Transpose", [out], { attributes: { perm: [1, 3, 0, 2, 4] } }), g.int64s([-1, nkv * groups * hd])]); // [Bp*Tm, nh*hd]
  return g.op("Gather", [padded, a.unpad], { attributes: { axis: 0 } });
}
