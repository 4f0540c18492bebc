import { describe, expect, it } from "vitest";
import { batchInvariant, compare, compareOutputs, figuresTable, summarizeSide, summaryJson, type RunRecord, type TurnCheck } from "./speculative-report";
import { copiedFraction, hexId, speculativeTurns } from "./speculative-workload";
import { summarizeCross, type CrossRun } from "./speculative-cross-report";
import { copiedMask, crossCopiedFraction, crossTurns, EARLIER_TRAJECTORIES } from "./speculative-cross-workload";

const run = (o: Partial<RunRecord> & Pick<RunRecord, "kind" | "setting" | "decodeMs">): RunRecord => ({
  side: "ours",
  class: o.kind === "story" ? "free" : "copy",
  batch: 1,
  rep: 0,
  decodeTokens: 100,
  drafted: 0,
  accepted: 0,
  outputs: [[1, 2, 3]],
  ...o,
});

describe("speculative bench report", () => {
  it("copied fraction: spans of at least 4 prompt tokens, longest first", () => {
    expect(copiedFraction([7, 1, 2, 3, 4, 8], [1, 2, 3, 4, 5, 9])).toBeCloseTo(4 / 6);
    expect(copiedFraction([1, 2, 3], [1, 2, 3])).toBe(0); // shorter than 4: not a copy
    expect(copiedFraction([1, 2, 3], [1, 2, 3], 3)).toBe(1);
    expect(copiedFraction([1, 2, 3, 4, 5], [])).toBe(0);
    // Two copied spans from different places in the prompt.
    expect(copiedFraction([9, 1, 2, 3, 4, 9, 5, 6, 7, 8], [5, 6, 7, 8, 0, 1, 2, 3, 4])).toBeCloseTo(8 / 9);
  });

  it("the workload: 3 copy and 2 free kinds, distinct variants, deterministic ids", () => {
    const turns = speculativeTurns(8);
    expect(turns.map((t) => t.class)).toEqual(["copy", "copy", "copy", "free", "free"]);
    for (const t of turns) expect(new Set(t.variants.map((v) => JSON.stringify(v))).size).toBe(8);
    expect(hexId(3, 1)).toBe(hexId(3, 1));
    expect(hexId(3, 1)).not.toBe(hexId(4, 1));
    expect(hexId(0, 1)).toMatch(/^[0-9a-f]{12}$/);
  });

  it("compares off and on: throughput from median ms, acceptance, tokens per step", () => {
    const off = [run({ kind: "a", setting: "off", decodeMs: 1000 }), run({ kind: "a", setting: "off", decodeMs: 1200, rep: 1 }), run({ kind: "a", setting: "off", decodeMs: 5000, rep: 2 })];
    const on = [run({ kind: "a", setting: "on", decodeMs: 500, drafted: 80, accepted: 60 }), run({ kind: "a", setting: "on", decodeMs: 600, rep: 1, drafted: 80, accepted: 60 })];
    const c = compare(off, on);
    expect(c.offTokensPerS).toBeCloseTo(100 / 1.2, 1); // the median (1200) ignores the 5000 ms outlier
    expect(c.onTokensPerS).toBeCloseTo(100 / 0.6, 1); // upper median of 500, 600
    expect(c.speedup).toBe(2);
    expect(c.acceptanceRate).toBe(0.75);
    expect(c.tokensPerStep).toBe(2.5); // 200 tokens in 200 - 120 steps
    expect(compare(off, []).speedup).toBeNull();
  });

  it("a class's throughput sums its kinds' tokens over their median ms", () => {
    const runs = [run({ kind: "a", setting: "off", decodeMs: 1000 }), run({ kind: "b", setting: "off", decodeMs: 3000, decodeTokens: 300 })];
    expect(compare(runs, []).offTokensPerS).toBe(100); // 400 tokens / 4 s
  });

  it("flags outputs that differ from the first off run", () => {
    const same = compareOutputs([run({ kind: "a", setting: "off", decodeMs: 1 }), run({ kind: "a", setting: "on", decodeMs: 1 })]);
    expect(same).toEqual({ identical: true, mismatches: [] });
    const differ = compareOutputs([run({ kind: "a", setting: "off", decodeMs: 1 }), run({ kind: "a", setting: "on", decodeMs: 1, rep: 1, outputs: [[1, 2, 4]] })]);
    expect(differ.identical).toBe(false);
    expect(differ.mismatches[0]).toBe("a batch 1 on rep 1 request 0: first difference at token 2");
  });

  it("batch invariance: request 0's off reply at batch 1 vs batch 8, per kind", () => {
    const b1 = run({ kind: "a", setting: "off", decodeMs: 1 });
    const b8 = run({ kind: "a", setting: "off", decodeMs: 1, batch: 8, outputs: [[1, 2, 3], [4, 5]] });
    expect(batchInvariant([b1, b8])).toBe(true);
    expect(batchInvariant([b1, { ...b8, outputs: [[1, 2, 9]] }])).toBe(false);
    expect(batchInvariant([b1])).toBeNull();
  });

  it("summarizes a side and builds the --json summary; pending: on figures null", () => {
    const runs = [
      run({ kind: "tool-call", setting: "off", decodeMs: 1000 }),
      run({ kind: "tool-call", setting: "on", decodeMs: 400, drafted: 70, accepted: 63 }),
      run({ kind: "story", setting: "off", decodeMs: 1000 }),
      run({ kind: "story", setting: "on", decodeMs: 1020, drafted: 10, accepted: 1 }),
    ];
    const checks: TurnCheck[] = [
      { side: "ours", kind: "tool-call", class: "copy", batch: 1, copied: [0.8], tokens: [101] },
      { side: "ours", kind: "story", class: "free", batch: 1, copied: [0], tokens: [101] },
    ];
    const ours = summarizeSide(runs, checks, "ours");
    expect(ours.batch1.copy.speedup).toBe(2.5);
    expect(ours.batch1.free.speedup).toBe(0.98);
    expect(ours.outputsIdentical).toBe(true);
    const s = summaryJson({ ours, llamacpp: ours, pending: null, mode: "lookup", extra: { model: "m" } });
    expect(s).toMatchObject({ copyTurnsSpeedup: 2.5, freeTurnsSpeedup: 0.98, acceptanceRate: 0.9, outputsIdentical: true, speculativeMode: "lookup", model: "m" });
    expect(s.targets).toEqual({ copyTurnsSpeedup: { target: 1.8, met: true }, freeTurnsSpeedup: { target: 0.97, met: true } });
    expect((s.oursOverLlamaCpp as Record<string, unknown>).copyBatch1).toEqual({ off: 1, on: 1 });
    expect(JSON.parse(JSON.stringify(s))).toEqual(s); // one JSON line

    const offOnly = summarizeSide(runs.filter((r) => r.setting === "off"), checks, "ours");
    const pending = summaryJson({ ours: offOnly, llamacpp: null, pending: "pending: no option", mode: "off", extra: {} });
    expect(pending).toMatchObject({ copyTurnsSpeedup: null, freeTurnsSpeedup: null, acceptanceRate: null, outputsIdentical: null, pending: "pending: no option", llamaCpp: null });
    expect(figuresTable([{ name: "ours", figures: offOnly }]).split("\n")[1]).toBe("ours\t1\ttool-call\tcopy\t0.8\t101\t100\t-\t-\t-\t-");
  });

  it("cross-trajectory workload: copied from earlier replies, not from the prompt nor earlier in the reply", () => {
    expect(copiedMask([7, 1, 2, 3, 4], [1, 2, 3, 4, 5])).toEqual([true, true, true, true, false]);
    expect(crossCopiedFraction([9, 9], [[1, 2, 3, 4, 5]], [1, 2, 3, 4, 8])).toBeCloseTo(0.8);
    expect(crossCopiedFraction([1, 2, 3, 4], [[1, 2, 3, 4, 5]], [1, 2, 3, 4, 8])).toBe(0); // the prompt has it
    // The second [1, 2, 3, 4] repeats the reply's own first: lookup's, not the tree's.
    expect(crossCopiedFraction([9], [[1, 2, 3, 4]], [1, 2, 3, 4, 1, 2, 3, 4])).toBeCloseTo(0.5);
    // A span does not run across two earlier replies.
    expect(crossCopiedFraction([9], [[1, 2], [3, 4]], [1, 2, 3, 4])).toBe(0);
    expect(crossCopiedFraction([9], [[1, 2, 3, 4]], [])).toBe(0);
    for (const t of crossTurns()) {
      expect(t.earlier).toHaveLength(EARLIER_TRAJECTORIES);
      const all = [...t.earlier, t.measured].map((m) => JSON.stringify(m));
      expect(new Set(all).size).toBe(EARLIER_TRAJECTORIES + 1); // every night a trajectory of its own
    }
  });

  it("cross-trajectory figures: suffix over lookup, the control tenant isolated, in the --json summary", () => {
    const cross = (mode: CrossRun["mode"], decodeMs: number, o: Partial<CrossRun> = {}): CrossRun => ({ kind: "nightly-code", mode, rep: 0, decodeTokens: 100, decodeMs, drafted: 0, accepted: 0, treeDrafts: 0, outputs: [[1, 2, 3]], ...o });
    const runs = [
      cross("off", 1000),
      cross("lookup", 900, { drafted: 20, accepted: 10 }),
      cross("suffix", 500, { drafted: 80, accepted: 60, treeDrafts: 12 }),
      cross("control", 900, { drafted: 20, accepted: 10 }),
    ];
    const checks = [{ kind: "nightly-code", copiedPrompt: 0, copiedEarlier: 0.6, tokens: 101, earlierReplies: 4, earlierTokens: 400 }];
    const f = summarizeCross(runs, checks);
    expect(f.lookup.speedup).toBe(1.111);
    expect(f.suffix.speedup).toBe(2);
    expect(f.suffixOverLookup).toBe(1.8); // 2 / 1.111
    expect(f.kinds[0]!.suffixOverLookup).toBe(1.8);
    expect(f.suffix.tokensPerStep).toBe(2.5);
    expect(f.treeDrafts).toEqual({ suffix: 12, control: 0 });
    expect(f.controlIsolated).toBe(true);
    expect(f.outputsIdentical).toBe(true);
    expect(summarizeCross([...runs, cross("control", 900, { rep: 1, treeDrafts: 1, outputs: [[1, 2]] })], checks)).toMatchObject({ controlIsolated: false, outputsIdentical: false, mismatches: ["nightly-code control rep 1"] });

    const ours = summarizeSide([run({ kind: "tool-call", setting: "off", decodeMs: 1000 }), run({ kind: "tool-call", setting: "on", decodeMs: 400 })], [{ side: "ours", kind: "tool-call", class: "copy", batch: 1, copied: [1], tokens: [101] }], "ours");
    const s = summaryJson({ ours, llamacpp: null, pending: null, mode: "lookup", cross: { suffixOverLookup: f.suffixOverLookup, details: { controlIsolated: true } }, extra: {} });
    expect(s).toMatchObject({ copyTurnsSpeedup: 2.5, suffixOverLookup: 1.8, crossTrajectory: { controlIsolated: true } });
    expect(summaryJson({ ours, llamacpp: null, pending: null, mode: "lookup", extra: {} })).toMatchObject({ suffixOverLookup: null, crossTrajectory: null });
  });
});
