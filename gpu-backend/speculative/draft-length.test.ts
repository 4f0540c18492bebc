import { describe, expect, it } from "vitest";
import { batchedDraftCost, bestDraftLength, DraftLength, expectedTokensPerStep, linearStepCost } from "./draft-length";

describe("draft length", () => {
  it("expects 1 + a + ... + a^k tokens per step and picks the k with the most tokens per unit of cost", () => {
    expect(expectedTokensPerStep(0.5, 2)).toBe(1.75);
    expect(expectedTokensPerStep(1, 5)).toBe(6);
    expect(expectedTokensPerStep(0, 5)).toBe(1);
    expect(linearStepCost(0.05)(9)).toBeCloseTo(1.4);
    const best = bestDraftLength(0.9, 16, linearStepCost(0.1));
    expect(best.length).toBe(10);
    expect(best.speedup).toBeCloseTo(expectedTokensPerStep(0.9, 10) / 2);
    expect(best.speedup).toBeGreaterThan(expectedTokensPerStep(0.9, 9) / 1.9);
    expect(bestDraftLength(1, 16, linearStepCost(0.1)).length).toBe(16);
    // Each drafted token costs as much as a step: nothing pays, whatever the acceptance.
    expect(bestDraftLength(0.99, 16, linearStepCost(1))).toEqual({ length: 0, speedup: 1 });
    expect(bestDraftLength(0.05, 16, linearStepCost(0.1)).length).toBe(0);
  });

  it("grows to the longest draft on a stream whose drafts are all accepted", () => {
    const length = new DraftLength({ maxLength: 12, perDraftToken: 0.05 });
    const seen: number[] = [];
    for (let step = 0; step < 30; step++) {
      const k = length.next();
      seen.push(k);
      length.record(k, k);
    }
    expect(seen[0]).toBeGreaterThan(0);
    expect(seen[0]).toBeLessThan(12);
    for (let i = 1; i < seen.length; i++) expect(seen[i]).toBeGreaterThanOrEqual(seen[i - 1]!);
    expect(seen.at(-1)).toBe(12);
    expect(length.acceptance()).toBeGreaterThan(0.99);
  });

  it("turns off on a stream whose drafts are rejected, probing every probeEvery steps, and back on when a probe is accepted", () => {
    const length = new DraftLength({ probeEvery: 10, probeLength: 3 });
    const seen: number[] = [];
    for (let step = 0; step < 60; step++) {
      const k = length.next();
      seen.push(k);
      length.record(k, 0);
    }
    const firstOff = seen.indexOf(0);
    expect(firstOff).toBeGreaterThan(0);
    expect(firstOff).toBeLessThan(6);
    const after = seen.slice(firstOff);
    // Off from then on, but for one probe of 3 tokens every 10 steps.
    after.forEach((k, i) => expect(k, `step ${firstOff + i}`).toBe((i + 1) % 10 === 0 ? 3 : 0));
    let waited = 0;
    while (length.next() === 0) waited++;
    expect(waited).toBe(9 - (after.length % 10));
    length.record(3, 3);
    expect(length.next()).toBeGreaterThan(0);
  });

  it("shrinks when drafts are partly rejected", () => {
    const length = new DraftLength({ maxLength: 16 });
    for (let step = 0; step < 20; step++) length.record(16, 16);
    const long = length.next();
    for (let step = 0; step < 5; step++) length.record(8, 2);
    expect(length.next()).toBeLessThan(long);
    expect(length.next()).toBeGreaterThan(0);
  });

  it("ignores steps that drafted nothing and refuses impossible records", () => {
    const length = new DraftLength();
    const before = length.acceptance();
    length.record(0, 0);
    expect(length.acceptance()).toBe(before);
    expect(() => length.record(2, 3)).toThrow(/accepted 3 of 2/);
  });

  it("drafts less as more sequences decode together: a draft token's cost grows toward a whole sequence's step", () => {
    expect(batchedDraftCost(0.1, 1)).toBeCloseTo(0.1);
    expect(batchedDraftCost(0.1, 8)).toBeCloseTo(8 / 17);
    expect(batchedDraftCost(0.1, 1000)).toBeGreaterThan(0.99);
    // Acceptance 0.4 (four accepted, six rejections): one sequence drafts, eight decoding together do not.
    const length = new DraftLength({ initialAcceptance: 0.4, decay: 1 });
    expect(length.length(1)).toBeGreaterThan(0);
    expect(length.length(8)).toBe(0);
    expect(length.next(8)).toBe(0); // a step off, toward the next probe
    // Acceptance 0.9 pays at batch 8 too, with a shorter draft than alone.
    const good = new DraftLength({ initialAcceptance: 0.9, decay: 1 });
    expect(good.length(8)).toBeGreaterThan(0);
    expect(good.length(8)).toBeLessThan(good.length(1));
  });
});
