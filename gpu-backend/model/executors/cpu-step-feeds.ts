import * as ort from "onnxruntime-node";
import { everyRow, type StepSequence } from "./executor";
import { GRAPH_IO, type ContextInputNames } from "../graph/llama-graph";
import { RECENT } from "../graph/decode-attention";
import { MASKED, prefillFeeds, visibleFrom, type GroupMember } from "./cpu-prefill-feeds";

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
  /** Rows in the prefill group (0 when it holds only the dummy row). */
  prefillRows: number;
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
  const dummy = (): GroupMember => ({ tokenIds: [0], startPos: 0, slotOf: () => -1, row: 0 });
  const decode: GroupMember[] = [];
  const prefill: GroupMember[] = [];
  const memberOf: GroupMember[] = sequences.map((s) => {
    if (s.tokenIds.length === 0) throw new Error("a step sequence needs at least one token");
    const m = { tokenIds: s.tokenIds, startPos: s.startPos, slotOf: slotOf(s), row: 0 };
    (s.tokenIds.length === 1 || (s.verify === true && s.tokenIds.length <= RECENT) ? decode : prefill).push(m);
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
    if (everyRow(s.logits)) for (let j = 0; j < n; j++) logitRows.push(first + j);
    else if (s.logits !== "none") logitRows.push(first + n - 1);
    return [from, logitRows.length];
  });
  const logitIndex = BigInt64Array.from(logitRows, (r) => BigInt(r));

  const inputs: Record<string, ort.Tensor> = {
    input_ids: new ort.Tensor("int64", inputIds, [T]),
    position_ids: new ort.Tensor("int64", positions, [T]),
    group_sizes: new ort.Tensor("int64", BigInt64Array.of(BigInt(Td), BigInt(Tp)), [2]),
    logit_index: new ort.Tensor("int64", logitIndex, [logitRows.length]),
    ...decodeRows(decode, Td, layout.numKvHeads),
    ...decodeContext(decode, null, GRAPH_IO.full),
    ...prefillFeeds(prefill, Td, dummyPrefill, [{ names: GRAPH_IO.full, window: null }, ...(layout.window === null ? [] : [{ names: GRAPH_IO.local, window: layout.window }])]),
  };
  if (layout.window !== null) Object.assign(inputs, decodeContext(decode, layout.window, GRAPH_IO.local));
  const inputBytes = Object.values(inputs).reduce((a, t) => a + (t.data as ArrayBufferView).byteLength, 0);
  return { inputs, slots, logitRanges, inputBytes, prefillRows: dummyPrefill ? 0 : Tp };
}

/**
 * The decode group's rows (decode-attention.ts): padding `dec_rows` [Bd * R] and `dec_unpad` [Td];
 * each row's recent positions `dec_recent_slots` [Bd, R, RECENT] (position pos - RECENT + 1 + i in
 * column i), and the new rows scattered into them, `dec_new_rows` [U] and `dec_new_at` [nkv, U, 4]:
 * the row's own key and those of the verify rows before it.
 */
function decodeRows(decode: readonly GroupMember[], Td: number, nkv: number): Record<string, ort.Tensor> {
  const R = Math.max(...decode.map((m) => m.tokenIds.length));
  const rows = new BigInt64Array(decode.length * R);
  const unpad = new BigInt64Array(Td);
  const recentSlots = new BigInt64Array(decode.length * R * RECENT);
  const recentSlots32 = new Int32Array(recentSlots.buffer);
  const scattered: [number, number, number, number][] = []; // (flat row, sequence, row, column)
  decode.forEach((m, b) => {
    const n = m.tokenIds.length;
    for (let r = 0; r < R; r++) rows[b * R + r] = BigInt(m.row + (r < n ? r : 0));
    for (let r = 0; r < n; r++) {
      unpad[m.row + r] = BigInt(b * R + r);
      const first = m.startPos + r - RECENT + 1;
      for (let i = 0; i < RECENT; i++) {
        const p = first + i;
        if (p >= m.startPos) scattered.push([m.row + p - m.startPos, b, r, i]);
        else if (p >= 0) recentSlots32[2 * ((b * R + r) * RECENT + i)] = m.slotOf(p);
      }
    }
  });
  const U = scattered.length;
  const newAt = new BigInt64Array(nkv * U * 4);
  for (let h = 0; h < nkv; h++) scattered.forEach(([, b, r, i], u) => newAt.set([BigInt(h), BigInt(b), BigInt(r), BigInt(i)], (h * U + u) * 4));
  return {
    [GRAPH_IO.decRows]: new ort.Tensor("int64", rows, [rows.length]),
    [GRAPH_IO.decUnpad]: new ort.Tensor("int64", unpad, [Td]),
    [GRAPH_IO.decRecentSlots]: new ort.Tensor("int64", recentSlots, [decode.length, R, RECENT]),
    [GRAPH_IO.decNewRows]: new ort.Tensor("int64", BigInt64Array.from(scattered, ([row]) => BigInt(row)), [U]),
    [GRAPH_IO.decNewAt]: new ort.Tensor("int64", newAt, [nkv, U, 4]),
  };
}

/**
 * One context of the decode group: the pasts (positions before each row's recent ones) as pool
 * slots [Bd, Rc, Sp], one per sequence (Rc = 1, full attention: its rows see prefixes of it) or
 * one per row (Rc = R, a sliding window: each starting at the first position its row sees);
 * column c of a past is position lo + c. The mask [Bd, R, 1, RECENT + Sp]: the visible recent
 * positions, then the visible past from its first column, masked after. A padding row sees only
 * its last recent column. Sp >= 1: a zero-width Gather traps onnxruntime's CPU kernels.
 */
function decodeContext(decode: readonly GroupMember[], window: number | null, names: ContextInputNames): Record<string, ort.Tensor> {
  const firstVisible = visibleFrom(window);
  const R = Math.max(...decode.map((m) => m.tokenIds.length));
  const Rc = window === null ? 1 : R;
  // A row's past: positions [lo, end), end its first recent position; lo where its past tensor starts.
  const pastOf = (m: GroupMember, r: number) => {
    const pos = m.startPos + r;
    return { lo: Rc === 1 ? firstVisible(m.startPos) : firstVisible(pos), from: firstVisible(pos), end: pos - RECENT + 1 };
  };
  const lastRow = (m: GroupMember, rc: number) => (Rc === 1 ? m.tokenIds.length - 1 : Math.min(rc, m.tokenIds.length - 1));
  let Sp = 1;
  for (const m of decode)
    for (let rc = 0; rc < Rc; rc++) {
      const { lo, end } = pastOf(m, lastRow(m, rc));
      Sp = Math.max(Sp, end - lo);
    }
  const W = RECENT + Sp;
  const ctxSlots = new BigInt64Array(decode.length * Rc * Sp);
  const ctxSlots32 = new Int32Array(ctxSlots.buffer);
  const mask = new Float32Array(decode.length * R * W).fill(MASKED);
  decode.forEach((m, b) => {
    for (let rc = 0; rc < Rc; rc++) {
      const { lo, end } = pastOf(m, lastRow(m, rc));
      const at = (b * Rc + rc) * Sp;
      for (let p = lo; p < end; p++) ctxSlots32[2 * (at + p - lo)] = m.slotOf(p);
    }
    for (let r = 0; r < R; r++) {
      const at = (b * R + r) * W;
      if (r >= m.tokenIds.length) {
        mask[at + RECENT - 1] = 0;
        continue;
      }
      const { lo, from, end } = pastOf(m, r);
      const pos = m.startPos + r;
      mask.fill(0, at + Math.max(0, from - (pos - RECENT + 1)), at + RECENT);
      if (end > from) mask.fill(0, at + RECENT + from - lo, at + RECENT + end - lo);
    }
  });
  return {
    [names.decSlots]: new ort.Tensor("int64", ctxSlots, [decode.length, Rc, Sp]),
    [names.decMask]: new ort.Tensor("float32", mask, [decode.length, R, 1, W]),
  };
}
