import { describe, expect, it } from "vitest";
import { DraftCostMeter } from "./draft-cost";
import { bestDraftLength } from "./draft-length";

describe("DraftCostMeter", () => {
  it("answers the fallback until it has seen a plain step and a step with drafts", () => {
    const cost = new DraftCostMeter(0.9, 0.1);
    expect(cost.perDraftToken).toBe(0.1);
    cost.note(1, 4, 20); // drafts before any plain step: no baseline to subtract yet
    expect(cost.perDraftToken).toBe(0.1);
    cost.note(1, 0, 12);
    expect(cost.perDraftToken).toBe(0.1);
    cost.note(1, 4, 16.8);
    expect(cost.perDraftToken).toBeCloseTo(1.2 / 12, 6);
    expect(cost.stepCost(9)).toBeCloseTo(1 + 8 * 0.1, 6);
  });

  it("counts a drafted token against one sequence's share of a plain step: dearer at batch 8 than at batch 1", () => {
    const batch1 = new DraftCostMeter();
    const batch8 = new DraftCostMeter();
    for (let i = 0; i < 50; i++) {
      // The same 1.2 ms per drafted token; a plain step of 12 ms for 1 sequence, 30 ms for 8.
      batch1.note(1, 0, 12);
      batch1.note(1, 7, 12 + 7 * 1.2);
      batch8.note(8, 0, 30);
      batch8.note(8, 56, 30 + 56 * 1.2);
    }
    expect(batch1.perDraftToken).toBeCloseTo(0.1, 3);
    expect(batch8.perDraftToken).toBeCloseTo(0.32, 3);
    // At an acceptance of 0.3 (free text) drafting pays at batch 1 but not at batch 8.
    expect(bestDraftLength(0.3, 8, batch1.stepCost).length).toBeGreaterThan(0);
    expect(bestDraftLength(0.3, 8, batch8.stepCost).length).toBe(0);
  });

  it("follows a change of load, and ignores steps it cannot use", () => {
    const cost = new DraftCostMeter(0.5);
    cost.note(2, 0, 20);
    cost.note(2, 10, 30); // 1 ms per drafted token over 10 ms per sequence
    expect(cost.perDraftToken).toBeCloseTo(0.1, 6);
    for (let i = 0; i < 30; i++) cost.note(2, 10, 60); // drafts got dearer: 4 ms each
    expect(cost.perDraftToken).toBeCloseTo(0.4, 3);
    cost.note(0, 0, 5);
    cost.note(2, 0, Number.NaN);
    expect(cost.perDraftToken).toBeCloseTo(0.4, 3);
  });
});
