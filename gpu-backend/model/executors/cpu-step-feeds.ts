import * as ort from "onnxruntime-node";
import type { StepSequence } from "./executor";
import { GRAPH_IO, type ContextInputNames } from "../graph/llama-graph";

/** Additive mask value for keys a query must not see (finite so padded rows stay NaN-free). */
const MASKED = -1e30;

/** What the feeds depend on besides the step: the pool's block size, the KV heads, the sliding window (or null). */
export interface FeedLayout {
  blockSize: number;
  numKvHeads: number;
  window: number | null;
}

/** One engine step as the decoder graph's inputs (llama-graph.ts), plus what the executor needs to read the outputs back. */
export interface StepFeeds {
  inputs: Record<string, ort.Tensor>;
  /** Pool slot of each flat row (-1: a dummy row, its KV discarded). */
  slots: Int32Array;
  /** Per sequence, in the caller's order: its rows of the `logits` output [from, to). */
  logitRanges: [number, number][];
  inputBytes: number;
}

/** A member of the decode or prefill group: a step sequence, or a dummy row (token 0 at position 0, no blocks). */
interface Member {
  tokenIds: ArrayLike<number>;
  startPos: number;
  slotOf: (pos: number) => number;
  /** First flat row. */
  row: number;
}

/**
 * The graph's inputs for one step. Sequences with one new token, and verify runs (`verify`), form
 * the decode group (each row attended on its own: decode-attention.ts), the rest the prefill
 * group, in that flat order. An empty group traps onnxruntime's CPU kernels (SIGFPE on zero-sized
 * shapes), so a step without one carries a dummy row there: token 0 at position 0, attending only
 * to itself, its KV discarded (slot -1) and no logits read from it.
 */
export function stepFeeds(sequences: readonly StepSequence[], layout: FeedLayout): StepFeeds {
  const slotOf = (seq: StepSequence) => (pos: number) => {
    const block = seq.blockTable[Math.floor(pos / layout.blockSize)];
    if (block === undefined) throw new Error(`block table too short for position ${pos}`);
    return block * layout.blockSize + (pos % layout.blockSize);
  };
  const dummy = (): Member => ({ tokenIds: [0], startPos: 0, slotOf: () => -1, row: 0 });
  const decode: Member[] = [];
  const prefill: Member[] = [];
  const memberOf: Member[] = sequences.map((s) => {
    if (s.tokenIds.length === 0) throw new Error("a step sequence needs at least one token");
    const m = { tokenIds: s.tokenIds, startPos: s.startPos, slotOf: slotOf(s), row: 0 };
    (s.tokenIds.length === 1 || s.verify === true ? decode : prefill).push(m);
    return m;
  });
  if (decode.length === 0) decode.push(dummy());
  const dummyPrefill = prefill.length === 0;
  if (dummyPrefill) prefill.push(dummy());

  const T = [...decode, ...prefill].reduce((a, m) => a + m.tokenIds.length, 0);
  const inputIds = new BigInt64Array(T);
  const positions = new BigInt64Array(T);
  const ids32 = new Int32Array(inputIds.buffer);
  const pos32 = new Int32Array(positions.buffer);
  const slots = new Int32Array(T);
  let row = 0;
  for (const m of [...decode, ...prefill]) {
    m.row = row;
    for (let j = 0; j < m.tokenIds.length; j++, row++) {
      ids32[2 * row] = m.tokenIds[j]!;
      pos32[2 * row] = m.startPos + j;
      slots[row] = m.slotOf(m.startPos + j);
    }
  }
  const Td = decode.reduce((a, m) => a + m.tokenIds.length, 0);
  const Tp = T - Td;

  // Logit rows, per sequence in the caller's order.
  const logitRows: number[] = [];
  const logitRanges: [number, number][] = sequences.map((s, i) => {
    const from = logitRows.length;
    const n = s.tokenIds.length;
    const first = memberOf[i]!.row;
    if (s.logits === "all") for (let j = 0; j < n; j++) logitRows.push(first + j);
    else if (s.logits !== "none") logitRows.push(first + n - 1);
    return [from, logitRows.length];
  });
  const logitIndex = BigInt64Array.from(logitRows, (r) => BigInt(r));

  const inputs: Record<string, ort.Tensor> = {
    input_ids: new ort.Tensor("int64", inputIds, [T]),
    position_ids: new ort.Tensor("int64", positions, [T]),
    group_sizes: new ort.Tensor("int64", BigInt64Array.of(BigInt(Td), BigInt(Tp)), [2]),
    logit_index: new ort.Tensor("int64", logitIndex, [logitRows.length]),
    ...decodeRows(decode, Td),
    ...decodeContext(decode, layout, null, GRAPH_IO.full),
    ...prefillContext(prefill, Tp, dummyPrefill, null, GRAPH_IO.full),
  };
  if (layout.window !== null) {
    Object.assign(inputs, decodeContext(decode, layout, layout.window, GRAPH_IO.local), prefillContext(prefill, Tp, dummyPrefill, layout.window, GRAPH_IO.local));
  }
  const inputBytes = Object.values(inputs).reduce((a, t) => a + (t.data as ArrayBufferView).byteLength, 0);
  return { inputs, slots, logitRanges, inputBytes };
}

const visibleFrom = (window: number | null) => (pos: number) => (window === null ? 0 : Math.max(0, pos - window + 1));

/** The decode group's padding: `dec_rows` [Bd * R] and `dec_unpad` [Td]. */
function decodeRows(decode: readonly Member[], Td: number): Record<string, ort.Tensor> {
  const R = Math.max(...decode.map((m) => m.tokenIds.length));
  const rows = new BigInt64Array(decode.length * R);
  const unpad = new BigInt64Array(Td);
  decode.forEach((m, b) => {
    const n = m.tokenIds.length;
    for (let r = 0; r < R; r++) rows[b * R + r] = BigInt(m.row + (r < n ? r : 0));
    for (let r = 0; r < n; r++) unpad[m.row + r] = BigInt(b * R + r);
  });
  return { [GRAPH_IO.decRows]: new ort.Tensor("int64", rows, [rows.length]), [GRAPH_IO.decUnpad]: new ort.Tensor("int64", unpad, [Td]) };
}

/**
 * One context of the decode group (decode-attention.ts): the past slots [Bd, Rc, Sd], one past per
 * sequence (Rc = 1, full attention) or one per row (Rc = R, a sliding window: each row's past
 * starts at the first position it sees); column c of a past is position lo + c. The mask
 * [Bd, R, 1, 1 + Sd]: the self column, then the visible past from column 1, masked after. The rows
 * scattered into the pasts, `dec_new_rows` [U] and `dec_new_at` [nkv, U, 4]: each verify row's
 * new key, in the past of every later row of its sequence. The last column is a spare no row
 * sees, for the dummy update.
 */
function decodeContext(decode: readonly Member[], layout: FeedLayout, window: number | null, names: ContextInputNames): Record<string, ort.Tensor> {
  const firstVisible = visibleFrom(window);
  const nkv = layout.numKvHeads;
  const R = Math.max(...decode.map((m) => m.tokenIds.length));
  const Rc = window === null ? 1 : R;
  // Per (sequence, past row): its first position lo and the rows whose past it is.
  const pastOf = (m: Member, rc: number) => {
    const last = Rc === 1 ? m.tokenIds.length - 1 : Math.min(rc, m.tokenIds.length - 1);
    return { lo: firstVisible(m.startPos + (Rc === 1 ? 0 : last)), last };
  };
  let Sd = 0;
  for (const m of decode)
    for (let rc = 0; rc < Rc; rc++) {
      const { lo, last } = pastOf(m, rc);
      Sd = Math.max(Sd, m.startPos + last - lo + 1);
    }
  const W = Sd + 1;
  const ctxSlots = new BigInt64Array(decode.length * Rc * Sd);
  const ctxSlots32 = new Int32Array(ctxSlots.buffer);
  const mask = new Float32Array(decode.length * R * W).fill(MASKED);
  const scattered: [number, number, number, number][] = []; // (flat row, sequence, past row, column)
  decode.forEach((m, b) => {
    for (let rc = 0; rc < Rc; rc++) {
      const { lo, last } = pastOf(m, rc);
      const at = (b * Rc + rc) * Sd;
      for (let p = lo; p < m.startPos; p++) ctxSlots32[2 * (at + p - lo)] = m.slotOf(p);
      for (let j = Math.max(0, lo - m.startPos); j < last; j++) scattered.push([m.row + j, b, rc, m.startPos + j - lo]);
    }
    for (let r = 0; r < R; r++) {
      const at = (b * R + r) * W;
      mask[at] = 0;
      if (r >= m.tokenIds.length) continue; // a padding row sees only itself
      const pos = m.startPos + r;
      const lo = pastOf(m, r).lo;
      mask.fill(0, at + 1 + firstVisible(pos) - lo, at + 1 + pos - lo);
    }
  });
  if (scattered.length === 0) scattered.push([0, 0, 0, Sd - 1]);
  const U = scattered.length;
  const newAt = new BigInt64Array(nkv * U * 4);
  for (let h = 0; h < nkv; h++)
    scattered.forEach(([, b, rc, c], u) => newAt.set([BigInt(h), BigInt(b), BigInt(rc), BigInt(c)], (h * U + u) * 4));
  return {
    [names.decSlots]: new ort.Tensor("int64", ctxSlots, [decode.length, Rc, Sd]),
    [names.decMask]: new ort.Tensor("float32", mask, [decode.length, R, 1, W]),
    [names.decNewRows]: new ort.Tensor("int64", BigInt64Array.from(scattered, ([row]) => BigInt(row)), [U]),
    [names.decNewAt]: new ort.Tensor("int64", newAt, [nkv, U, 4]),
  };
}

/**
 * The prefill group's context: the visible context slots of each sequence, then all Tp new
 * tokens; mask [1, 1, Tp, Sp + Tp]: each token sees its own sequence's context and the new tokens
 * of its own sequence at positions <= its own (a dummy row sees everything: it is alone).
 */
function prefillContext(prefill: readonly Member[], Tp: number, dummy: boolean, window: number | null, names: ContextInputNames): Record<string, ort.Tensor> {
  const firstVisible = visibleFrom(window);
  const Sp = prefill.reduce((a, m) => a + m.startPos - firstVisible(m.startPos), 0);
  const preSlots = new BigInt64Array(Sp);
  const preSlots32 = new Int32Array(preSlots.buffer);
  const width = Sp + Tp;
  const preMask = new Float32Array(Tp * width).fill(dummy ? 0 : MASKED);
  let ctxOff = 0;
  let newOff = 0;
  for (const m of prefill) {
    const lo = firstVisible(m.startPos);
    for (let p = lo; p < m.startPos; p++) preSlots32[2 * (ctxOff + p - lo)] = m.slotOf(p);
    for (let j = 0; j < m.tokenIds.length; j++) {
      const r = (newOff + j) * width;
      const from = firstVisible(m.startPos + j); // first position this query sees
      if (from < m.startPos) preMask.fill(0, r + ctxOff + from - lo, r + ctxOff + m.startPos - lo);
      preMask.fill(0, r + Sp + newOff + Math.max(0, from - m.startPos), r + Sp + newOff + j + 1);
    }
    ctxOff += m.startPos - lo;
    newOff += m.tokenIds.length;
  }
  return {
    [names.preSlots]: new ort.Tensor("int64", preSlots, [Sp]),
    [names.preMask]: new ort.Tensor("float32", preMask, [1, 1, Tp, width]),
  };
}
