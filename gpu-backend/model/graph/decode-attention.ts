import { DataType, type GraphBuilder } from "./graph-builder";

/**
 * The decode group's attention: every query row is attended on its own, one row per product, so
 * a row's logits do not depend on what else is in the step (batch invariance, bit for bit on the
 * cpu provider). The group holds Bd sequences of R_b >= 1 rows each: a plain decode step has one
 * row (its new token); a verify step (speculative decoding) has 1 + k rows (the last token and a
 * k-token draft at positions startPos .. startPos + k), each attended exactly as the same token
 * decoded alone would be.
 *
 *   rows:     the group's Td flat rows, gathered into [Bd * R] (R = max_b R_b; padding rows repeat
 *             a real row) by `dec_rows`, back into Td by `dec_unpad`
 *   recent:   each row's last RECENT positions (pos - RECENT + 1 .. pos, its own key last), per row:
 *             [nkv, Bd, R, RECENT, hd], gathered from the pool (`dec_recent_slots`) with the step's
 *             new keys/values scattered in (`dec_new_rows`, `dec_new_at` (h, b, r, i)): the row's
 *             own, and the draft rows before it. Small (RECENT columns a row), so the copy costs
 *             little; shared by every context of a layer.
 *   past:     the positions before the recent ones, straight from the pool, never copied again:
 *             [nkv, Bd, Rc, Sp, hd] (`dec_ctx_slots`), column c = position lo + c; Rc = 1 (one past
 *             per sequence, all its rows read a prefix of it: full attention) or R (one per row,
 *             starting at the first position that row sees: sliding-window layers)
 *   scores:   [recent | past] per row: [nkv, Bd, R, G, RECENT + Sp] plus the mask `dec_mask`
 *             [Bd, R, 1, RECENT + Sp] (0 where visible). A row's columns depend only on its
 *             position: the same values at the same indices whatever else is in the step, and
 *             padding only after its visible past (padding placed between visible columns would
 *             shift the softmax's vector lanes and change the sums: the int8 verify differences of
 *             issue 37). Probabilities times values: recent and past products, added in that order.
 *   products: each is one row's G heads against RECENT or Sp columns (q [nkv, Bd, R, G, hd] against
 *             [nkv, Bd, R or 1, N, hd], broadcast when 1), the shapes of a lone decode step but for
 *             N (the padded width), which changes no sum.
 *
 * A verify run of more than RECENT rows cannot be attended this way (its first draft rows would
 * fall out of the last row's recent positions); the executor sends such runs to the prefill group.
 */
export const RECENT = 16;

export interface DecodeGroup {
  /** [Bd * R] int64: the decode-group row of each padded row. */
  rows: string;
  /** [Td] int64: the padded row of each decode-group row. */
  unpad: string;
  /** [Bd, R, RECENT] int64: pool slots of each row's recent positions (any slot where masked or new). */
  recentSlots: string;
  /** [U] int64: the decode-group rows whose keys/values are scattered into the recent positions. */
  newRows: string;
  /** [nkv, U, 4] int64: (head, sequence, row, column) of each. */
  newAt: string;
  /** Shape tensors: [Bd, R, nkv, G, hd] and [Bd, R, nkv, hd]. */
  qShape: string;
}

/** One attention context (all positions, or a sliding window): its past and mask. */
export interface DecodeContext {
  /** [Bd, Rc, Sp] int64 pool slots. */
  slots: string;
  /** [Bd, R, 1, RECENT + Sp] float additive mask. */
  mask: string;
  /** One past per row (Rc = R: sliding windows), else one per sequence (Rc = 1). */
  perRow: boolean;
}

export interface DecodeGroupNames {
  decRows: string;
  decUnpad: string;
  decRecentSlots: string;
  decNewRows: string;
  decNewAt: string;
}

/** The graph inputs of the decode group (shared by every layer and context). */
export function decodeGroupInputs(g: GraphBuilder, names: DecodeGroupNames, dims: { nkv: number; groups: number; hd: number }): DecodeGroup {
  const I64 = DataType.INT64;
  const recentSlots = g.input(names.decRecentSlots, I64, ["Bd", "R", RECENT]);
  const bdR = g.op("Slice", [g.op("Shape", [recentSlots]), g.int64s([0]), g.int64s([2])]);
  return {
    rows: g.input(names.decRows, I64, ["BdR"]),
    unpad: g.input(names.decUnpad, I64, ["Td"]),
    recentSlots,
    newRows: g.input(names.decNewRows, I64, ["U"]),
    newAt: g.input(names.decNewAt, I64, [dims.nkv, "U", 4]),
    qShape: g.op("Concat", [bdR, g.int64s([dims.nkv, dims.groups, dims.hd])], { attributes: { axis: 0 } }),
  };
}

/** The graph inputs of one context. */
export function decodeContextInputs(g: GraphBuilder, names: { decSlots: string; decMask: string }, perRow: boolean): DecodeContext {
  return {
    perRow,
    slots: g.input(names.decSlots, DataType.INT64, ["Bd", `${names.decSlots}_rows`, `${names.decSlots}_width`]),
    mask: g.input(names.decMask, DataType.FLOAT, ["Bd", "R", 1, `${names.decMask}_width`]),
  };
}

export interface DecodeAttentionArgs {
  /** The decode group's rows: q [Td, nh * hd] (scaled), k and v [Td, nkv, hd] (after rotary). */
  q: string;
  k: string;
  v: string;
  poolK: string;
  poolV: string;
  group: DecodeGroup;
  context: DecodeContext;
  nkv: number;
  groups: number;
  hd: number;
}

/** The decode group's attention output, [Td, nh * hd] in its rows' order. */
export function decodeAttention(g: GraphBuilder, a: DecodeAttentionArgs): string {
  const { nkv, groups, hd, group, context } = a;
  // The pasts' gathers come first in the graph: onnxruntime's default order then runs each just
  // before its product (created after the scores, the V past ran beside the K past, and both
  // products read their 7 MB from memory instead of cache: 1.4x slower decode at batch 8).
  const kPast = g.op("Gather", [a.poolK, context.slots], { attributes: { axis: 1 } }); // [nkv, Bd, Rc, Sp, hd]
  const vPast = g.op("Gather", [a.poolV, context.slots], { attributes: { axis: 1 } });
  const q = g.op("Transpose", [g.op("Reshape", [g.op("Gather", [a.q, group.rows], { attributes: { axis: 0 } }), group.qShape])], { attributes: { perm: [2, 0, 1, 3, 4] } }); // [nkv, Bd, R, G, hd]
  // One query head per KV head: each head twice, so that no product has a single row. MLAS has its
  // own kernel for one-row products, whose sums depend on the padded width (it unrolls the inner
  // dimension), which would make a row's values depend on its neighbours' lengths.
  const G = groups === 1 ? 2 : groups;
  const q5 = groups === 1 ? g.op("Concat", [q, q], { attributes: { axis: 3 } }) : q;
  const recent = (pool: string, x: string) => {
    const gathered = g.op("Gather", [pool, group.recentSlots], { attributes: { axis: 1 } }); // [nkv, Bd, R, RECENT, hd]
    const updates = g.op("Transpose", [g.op("Gather", [x, group.newRows], { attributes: { axis: 0 } })], { attributes: { perm: [1, 0, 2] } }); // [nkv, U, hd]
    return g.op("ScatterND", [gathered, group.newAt, updates]);
  };
  // A sequence's rows against its one past: one product of R * G query rows (each row's sums as in
  // a product of G rows), not R products that would each pack the past again.
  const rowsTogether = (x: string) => (context.perRow ? x : g.op("Reshape", [x, g.int64s([0, 0, 1, -1, 0])])); // [nkv, Bd, 1, R * G, N]
  const rowsApart = (x: string) => (context.perRow ? x : g.op("Reshape", [x, g.int64s([0, 0, -1, G, 0])])); // [nkv, Bd, R, G, N]
  const scoresOf = (q: string, keys: string) => g.op("FusedMatMul", [q, keys], { domain: "com.microsoft", attributes: { transB: 1 } });
  const scores = g.op("Concat", [scoresOf(q5, recent(a.poolK, a.k)), rowsApart(scoresOf(rowsTogether(q5), kPast))], { attributes: { axis: -1 } }); // [nkv, Bd, R, G, RECENT + Sp]
  const probs = g.op("Softmax", [g.op("Add", [scores, context.mask])], { attributes: { axis: -1 } });
  const pRecent = g.op("Slice", [probs, g.int64s([0]), g.int64s([RECENT]), g.int64s([-1])]);
  const pPast = g.op("Slice", [probs, g.int64s([RECENT]), g.int64s([2 ** 31 - 1]), g.int64s([-1])]);
  const both = g.op("Add", [g.op("MatMul", [pRecent, recent(a.poolV, a.v)]), rowsApart(g.op("MatMul", [rowsTogether(pPast), vPast]))]); // [nkv, Bd, R, G, hd]
  const out = groups === 1 ? g.op("Slice", [both, g.int64s([0]), g.int64s([1]), g.int64s([3])]) : both;
  const flat = g.op("Reshape", [g.op("Transpose", [out], { attributes: { perm: [1, 2, 0, 3, 4] } }), g.int64s([-1, nkv * groups * hd])]);
  return g.op("Gather", [flat, group.unpad], { attributes: { axis: 0 } });
}
