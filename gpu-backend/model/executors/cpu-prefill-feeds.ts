import * as ort from "onnxruntime-node";
import { GRAPH_IO, type ContextInputNames } from "../graph/llama-graph";
import { prefillBundles } from "../../scheduler/prefill-group-cost";

/** A member of the decode or prefill group: a step sequence, or a dummy row (token 0 at position 0, no blocks). */
export interface GroupMember {
  tokenIds: ArrayLike<number>;
  startPos: number;
  slotOf: (pos: number) => number;
  /** First flat row of the step. */
  row: number;
}

/** Additive mask value for keys a query must not see (finite so padded rows stay NaN-free). */
export const MASKED = -1e30;

/** The first position a query at `pos` sees: 0, or the start of its sliding window. */
export const visibleFrom = (window: number | null) => (pos: number) => (window === null ? 0 : Math.max(0, pos - window + 1));

/**
 * The prefill group's inputs, its chunks in the bundles `prefillBundles` picks (the layout that
 * scores fewer keys, which the scheduler's cost counts too): `pre_rows` [Bp * Tm], the group row
 * of each padded row, padding repeating the bundle's first row; `pre_unpad` [Tp], the padded row
 * of each group row; per attention context, `pre_ctx_slots` [Bp, Sm] (a bundle's members'
 * visible contexts one after another, padding slot 0) and `pre_mask` [Bp, 1, Tm, Sm + Tm]: each
 * token sees its own sequence's visible context and the new tokens of its own sequence at
 * positions <= its own; padding is masked (a dummy row sees everything: it is alone).
 * `rowOffset` is the group's first flat row (the decode group comes first).
 */
export function prefillFeeds(members: readonly GroupMember[], rowOffset: number, dummy: boolean, windows: { names: ContextInputNames; window: number | null }[]): Record<string, ort.Tensor> {
  const bundles = prefillBundles(members.map((m) => ({ chunk: m.tokenIds.length, context: m.startPos })));
  const Tp = members.reduce((a, m) => a + m.tokenIds.length, 0);
  const rowsOf = (b: number[]) => b.reduce((a, i) => a + members[i]!.tokenIds.length, 0);
  const Tm = Math.max(...bundles.map(rowsOf));
  const Bp = bundles.length;
  const rows = new BigInt64Array(Bp * Tm);
  const unpad = new BigInt64Array(Tp);
  bundles.forEach((bundle, b) => {
    let r = 0;
    for (const i of bundle) {
      const m = members[i]!;
      for (let j = 0; j < m.tokenIds.length; j++, r++) {
        rows[b * Tm + r] = BigInt(m.row - rowOffset + j);
        unpad[m.row - rowOffset + j] = BigInt(b * Tm + r);
      }
    }
    for (; r < Tm; r++) rows[b * Tm + r] = rows[b * Tm]!;
  });
  const inputs: Record<string, ort.Tensor> = {
    [GRAPH_IO.preRows]: new ort.Tensor("int64", rows, [Bp * Tm]),
    [GRAPH_IO.preUnpad]: new ort.Tensor("int64", unpad, [Tp]),
  };
  for (const { names, window } of windows) Object.assign(inputs, prefillContext(members, bundles, Tm, dummy, window, names));
  return inputs;
}

/** One attention context of the prefill group's bundles (see `prefillFeeds`). */
function prefillContext(members: readonly GroupMember[], bundles: number[][], Tm: number, dummy: boolean, window: number | null, names: ContextInputNames): Record<string, ort.Tensor> {
  const firstVisible = visibleFrom(window);
  const contextOf = (m: GroupMember) => m.startPos - firstVisible(m.startPos);
  const Sm = Math.max(...bundles.map((b) => b.reduce((a, i) => a + contextOf(members[i]!), 0)));
  const Bp = bundles.length;
  const width = Sm + Tm;
  const slots = new BigInt64Array(Bp * Sm);
  const slots32 = new Int32Array(slots.buffer);
  const mask = new Float32Array(Bp * Tm * width).fill(dummy ? 0 : MASKED);
  bundles.forEach((bundle, b) => {
    let ctxOff = 0;
    let newOff = 0;
    for (const i of bundle) {
      const m = members[i]!;
      const lo = firstVisible(m.startPos);
      for (let p = lo; p < m.startPos; p++) slots32[2 * (b * Sm + ctxOff + p - lo)] = m.slotOf(p);
      for (let j = 0; j < m.tokenIds.length; j++) {
        const r = (b * Tm + newOff + j) * width;
        const from = firstVisible(m.startPos + j); // first position this query sees
        if (from < m.startPos) mask.fill(0, r + ctxOff + from - lo, r + ctxOff + m.startPos - lo);
        mask.fill(0, r + Sm + newOff + Math.max(0, from - m.startPos), r + Sm + newOff + j + 1);
      }
      ctxOff += m.startPos - lo;
      newOff += m.tokenIds.length;
    }
  });
  return {
    [names.preSlots]: new ort.Tensor("int64", slots, [Bp, Sm]),
    [names.preMask]: new ort.Tensor("float32", mask, [Bp, 1, Tm, width]),
  };
}
