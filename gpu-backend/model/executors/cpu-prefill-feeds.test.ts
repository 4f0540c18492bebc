import { describe, expect, it } from "vitest";
import { MASKED } from "./cpu-prefill-feeds";
import { prefillBundles } from "../../scheduler/prefill-group-cost";
import { stepFeeds } from "./cpu-step-feeds";
import { GRAPH_IO } from "../graph/llama-graph";
import type { StepSequence } from "./executor";

const layout = { blockSize: 4, numKvHeads: 1, window: null };
const seq = (n: number, startPos: number, firstBlock: number): StepSequence => ({
  tokenIds: Array.from({ length: n }, (_, j) => 10 + j),
  startPos,
  blockTable: Array.from({ length: 64 }, (_, b) => firstBlock + b),
  logits: "last",
});
const ints = (t: { data: unknown }) => Array.from(t.data as BigInt64Array, Number);

describe("prefill bundles", () => {
  it("keeps members apart when that scores fewer keys, together otherwise", () => {
    // 8 agent turns after a long context each: apart (5.5 M) beats together (44.2 M).
    expect(prefillBundles(Array.from({ length: 8 }, () => ({ chunk: 300, context: 2000 })))).toEqual([[0], [1], [2], [3], [4], [5], [6], [7]]);
    // A fresh 2,000-token prompt beside a short turn: padding the turn to 2,000 rows costs more.
    expect(prefillBundles([{ chunk: 2000, context: 0 }, { chunk: 10, context: 5000 }])).toEqual([[0, 1]]);
    expect(prefillBundles([{ chunk: 7, context: 3 }])).toEqual([[0]]);
  });

  it("pads apart members to the longest chunk and context, masking the padding", () => {
    // One decode row first (flat row 0), then chunks of 2 tokens at 5 and 3 tokens at 2.
    const f = stepFeeds([seq(1, 9, 40), seq(2, 5, 0), seq(3, 2, 20)], layout);
    expect(f.prefillRows).toBe(5);
    const slots = f.inputs[GRAPH_IO.full.preSlots]!;
    const mask = f.inputs[GRAPH_IO.full.preMask]!;
    expect(slots.dims).toEqual([2, 5]);
    expect(mask.dims).toEqual([2, 1, 3, 8]);
    // Bundle 0: rows 0, 1 of the group, padded with row 0; bundle 1: rows 2..4.
    expect(ints(f.inputs[GRAPH_IO.preRows]!)).toEqual([0, 1, 0, 2, 3, 4]);
    expect(ints(f.inputs[GRAPH_IO.preUnpad]!)).toEqual([0, 1, 3, 4, 5]);
    // Context slots: positions 0..4 of blocks 0, 1 (slots 0..4); positions 0, 1 of block 20, then padding.
    expect(ints(slots)).toEqual([0, 1, 2, 3, 4, 80, 81, 0, 0, 0]);
    const visible = (b: number, r: number) => Array.from((mask.data as Float32Array).subarray((b * 3 + r) * 8, (b * 3 + r + 1) * 8), (v) => (v <= Math.fround(MASKED) ? 0 : 1));
    expect(visible(0, 0)).toEqual([1, 1, 1, 1, 1, 1, 0, 0]);
    expect(visible(0, 1)).toEqual([1, 1, 1, 1, 1, 1, 1, 0]);
    expect(visible(0, 2)).toEqual([0, 0, 0, 0, 0, 0, 0, 0]); // a padding row
    expect(visible(1, 0)).toEqual([1, 1, 0, 0, 0, 1, 0, 0]);
    expect(visible(1, 2)).toEqual([1, 1, 0, 0, 0, 1, 1, 1]);
  });

  it("lays members one after another in one bundle when that scores fewer keys", () => {
    // Together 10 x (5 + 10) = 150 scores, apart 3 x 6 x (3 + 6) = 162.
    const f = stepFeeds([seq(6, 0, 0), seq(2, 2, 20), seq(2, 3, 30)], layout);
    expect(f.inputs[GRAPH_IO.full.preSlots]!.dims).toEqual([1, 5]);
    expect(f.inputs[GRAPH_IO.full.preMask]!.dims).toEqual([1, 1, 10, 15]);
    expect(ints(f.inputs[GRAPH_IO.preRows]!)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });
});
