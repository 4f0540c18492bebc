import { DataType, type GraphBuilder } from "./graph-builder";

/**
 * The decode group's attention: every query row is attended on its own, one row per product, so
 * a row's logits do not depend on what else is in the step (batch invariance, bit for bit on the
 * cpu provider). The group holds Bd sequences of R_b >= 1 rows each: a plain decode step has one
 * row (its new token); a verify step (speculative decoding) has 1 + k rows (the last token and a
 * k-token draft at positions startPos .. startPos + k), each attended exactly as the same token
 * decoded alone would be.
 *
 *   rows:    the group's Td flat rows, gathered into [Bd * R] (R = max_b R_b; padding rows repeat
 *            a real row and see only themselves) by `dec_rows`, back into Td by `dec_unpad`
 *   past:    per sequence, its context gathered from the pool, [nkv, Bd, Rc, Sd, hd]: column c is
 *            position lo + c; the step's own new keys/values of the rows before a row are scattered
 *            into their columns (`dec_new_rows`, `dec_new_at` (h, b, rc, c)), so row r sees the
 *            draft rows before it as past, like a decode step after them would. Rc = 1 (one past
 *            per sequence, read by all its rows: full attention) or R (one past per row, starting
 *            at the first position that row sees: sliding-window layers, whose rows see different
 *            first positions and whose past is bounded by the window). Sd has one spare column,
 *            never visible, that takes a dummy update when no row has an earlier row in the step
 *            (an empty ScatterND traps onnxruntime's CPU kernels, as zero-sized Gathers do).
 *   scores:  [self | past] per row: [nkv, Bd, R, G, 1 + Sd]; the mask `dec_mask` [Bd, R, 1, 1 + Sd]
 *            is 0 on the self column and the visible past, masked after. The past columns a row
 *            sees start at column 1 and end before the padding: padding placed between them would
 *            shift the softmax's vector lanes and change the sums (the cause of the int8 verify
 *            differences in issue 37).
 *   products: q [nkv, Bd, R, G, hd] x past [nkv, Bd, Rc, Sd, hd] (broadcast when Rc = 1): each product
 *            is one row's G heads against its sequence's past, the same shapes as a lone decode
 *            step's (M = G), only N (the padded width) differs, which changes no sum.
 */
export interface DecodeGroup {
  /** [Bd * R] int64: the decode-group row of each padded row. */
  rows: string;
  /** [Td] int64: the padded row of each decode-group row. */
  unpad: string;
}

/** One attention context (all positions, or a sliding window): its gathered past and mask. */
export interface DecodeContext {
  /** [Bd, Rc, Sd] int64 pool slots. */
  slots: string;
  /** [Bd, R, 1, 1 + Sd] float additive mask. */
  mask: string;
  /** [U] int64: the decode-group rows whose keys/values are scattered into the past (U >= 1). */
  newRows: string;
  /** [nkv, U, 4] int64: (head, sequence, past row, column) of each scattered row. */
  newAt: string;
  /** Shape tensors derived once per step: [Bd, R, nkv, G, hd] and [Bd, R, nkv, hd]. */
  qShape: string;
  kvShape: string;
}

/** The graph inputs of the decode group (shared by every layer and context). */
export function decodeGroupInputs(g: GraphBuilder, names: { decRows: string; decUnpad: string }): DecodeGroup {
  return { rows: g.input(names.decRows, DataType.INT64, ["BdR"]), unpad: g.input(names.decUnpad, DataType.INT64, ["Td"]) };
}

/** The graph inputs of one context and its shape tensors. */
export function decodeContextInputs(
  g: GraphBuilder,
  names: { decSlots: string; decMask: string; decNewRows: string; decNewAt: string },
  dims: { nkv: number; groups: number; hd: number },
): DecodeContext {
  const slots = g.input(names.decSlots, DataType.INT64, ["Bd", `${names.decSlots}_rows`, `${names.decSlots}_width`]);
  const mask = g.input(names.decMask, DataType.FLOAT, ["Bd", "R", 1, `${names.decMask}_width`]);
  const newRows = g.input(names.decNewRows, DataType.INT64, [`${names.decNewRows}_count`]);
  const newAt = g.input(names.decNewAt, DataType.INT64, [dims.nkv, `${names.decNewRows}_count`, 4]);
  const bdR = g.op("Slice", [g.op("Shape", [mask]), g.int64s([0]), g.int64s([2])]);
  return {
    slots,
    mask,
    newRows,
    newAt,
    qShape: g.op("Concat", [bdR, g.int64s([dims.nkv, dims.groups, dims.hd])], { attributes: { axis: 0 } }),
    kvShape: g.op("Concat", [bdR, g.int64s([dims.nkv, dims.hd])], { attributes: { axis: 0 } }),
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
  const padded = (x: string) => g.op("Gather", [x, group.rows], { attributes: { axis: 0 } });
  const q5 = g.op("Transpose", [g.op("Reshape", [padded(a.q), context.qShape])], { attributes: { perm: [2, 0, 1, 3, 4] } }); // [nkv, Bd, R, G, hd]
  const own = (x: string) => g.op("Transpose", [g.op("Reshape", [padded(x), context.kvShape])], { attributes: { perm: [2, 0, 1, 3] } }); // [nkv, Bd, R, hd]
  const past = (pool: string, x: string) => {
    const gathered = g.op("Gather", [pool, context.slots], { attributes: { axis: 1 } }); // [nkv, Bd, Rc, Sd, hd]
    const updates = g.op("Transpose", [g.op("Gather", [x, context.newRows], { attributes: { axis: 0 } })], { attributes: { perm: [1, 0, 2] } }); // [nkv, U, hd]
    return g.op("ScatterND", [gathered, context.newAt, updates]);
  };
  const kPast = past(a.poolK, a.k);
  const vPast = past(a.poolV, a.v);
  const scoresSelf = g.op("MatMul", [q5, g.op("Unsqueeze", [own(a.k), g.int64s([-1])])]); // [nkv, Bd, R, G, 1]
  const scoresPast = g.op("FusedMatMul", [q5, kPast], { domain: "com.microsoft", attributes: { transB: 1 } }); // [nkv, Bd, R, G, Sd]
  const scores = g.op("Add", [g.op("Concat", [scoresSelf, scoresPast], { attributes: { axis: -1 } }), context.mask]);
  const probs = g.op("Softmax", [scores], { attributes: { axis: -1 } });
  const pSelf = g.op("Slice", [probs, g.int64s([0]), g.int64s([1]), g.int64s([-1])]);
  const pPast = g.op("Slice", [probs, g.int64s([1]), g.int64s([2 ** 31 - 1]), g.int64s([-1])]);
  const vSelf = g.op("Unsqueeze", [own(a.v), g.int64s([3])]); // [nkv, Bd, R, 1, hd]
  const out = g.op("Add", [g.op("MatMul", [pPast, vPast]), g.op("Mul", [pSelf, vSelf])]); // [nkv, Bd, R, G, hd]
  const flat = g.op("Reshape", [g.op("Transpose", [out], { attributes: { perm: [1, 2, 0, 3, 4] } }), g.int64s([-1, nkv * groups * hd])]);
  return g.op("Gather", [flat, group.unpad], { attributes: { axis: 0 } });
}
