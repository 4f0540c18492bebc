import * as ort from "onnxruntime-node";
import { GRAPH_IO, type ContextInputNames } from "../graph/llama-graph";

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
 * How the prefill group's members are laid out for attention (llama-graph.ts `prefillAttention`):
 * in bundles, each bundle its members' visible contexts one after another, then their new tokens,
 * every bundle padded to the widest (Bp bundles of Tm rows against Sm context columns).
 * - one bundle of all members: no padding, but every query is scored against every member's
 *   context (masked): (sum of chunks) x (sum of contexts);
 * - one bundle per member: each query only against its own context, but every member padded to
 *   the longest chunk and the longest context: Bp x Tm x (Sm + Tm).
 * 8 agent turns of 300 new tokens after 2,000 shared-prompt tokens each: 44.2 M scores a head in
 * one bundle, 5.5 M in eight; a 2,000-token prompt beside a 10-token turn after 5,000: 14.1 M in
 * one, 28.0 M in two. The layout with fewer scores (what attention's time follows) is chosen.
 *
 * @example
 * bundlesOf([{ chunk: 300, context: 2000 }, { chunk: 300, context: 2000 }]); // [[0], [1]]
 */
export function bundlesOf(members: readonly { chunk: number; context: number }[]): number[][] {
  const chunks = members.reduce((a, m) => a + m.chunk, 0);
  const contexts = members.reduce((a, m) => a + m.context, 0);
  const together = chunks * (contexts + chunks);
  const tm = Math.max(...members.map((m) => m.chunk));
  const sm = Math.max(...members.map((m) => m.context));
  const apart = members.length * tm * (sm + tm);
  return apart < together ? members.map((_, i) => [i]) : [members.map((_, i) => i)];
}

/**
 * The prefill group's inputs: its rows padded into bundles (`pre_rows` [Bp * Tm]: the group row
 * of each padded row, padding repeating the bundle's first row; `pre_unpad` [Tp]: the padded row
 * of each group row) and, per attention context, `pre_ctx_slots` [Bp, Sm] (a bundle's members'
 * visible contexts one after another, padding slot 0) and `pre_mask` [Bp, 1, Tm, Sm + Tm]: each
 * token sees its own sequence's visible context and the new tokens of its own sequence at
 * positions <= its own; padding is masked (a dummy row sees everything: it is alone).
 * `rowOffset` is the group's first flat row (the decode group comes first).
 */
export function prefillFeeds(members: readonly GroupMember[], rowOffset: number, dummy: boolean, windows: { names: ContextInputNames; window: number | null }[]): Record<string, ort.Tensor> {
  const full = visibleFrom(null);
  const bundles = bundlesOf(members.map((m) => ({ chunk: m.tokenIds.length, context: m.startPos - full(m.startPos) })));
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
