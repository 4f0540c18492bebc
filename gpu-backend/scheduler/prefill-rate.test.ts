import { describe, expect, it } from "vitest";
import { MAX_RETRY_AFTER_S } from "../../protocol/errors";
import { MIN_PREFILL_STEP_TOKENS, PrefillRate } from "./prefill-rate";

describe("PrefillRate", () => {
  it("knows no rate before a prefill step, and measures prompt tokens per second from steps", () => {
    const rate = new PrefillRate();
    expect(rate.tokensPerS).toBeUndefined();
    expect(rate.retryAfterS(1000)).toBeUndefined();
    rate.noteStep(512, 256);
    expect(rate.tokensPerS).toBe(2000);
    expect(rate.retryAfterS(16_384)).toBe(9);
  });

  it("ignores steps with too few prefill tokens (decode steps) and steps without time", () => {
    const rate = new PrefillRate();
    rate.noteStep(MIN_PREFILL_STEP_TOKENS - 1, 1000);
    rate.noteStep(512, 0);
    expect(rate.tokensPerS).toBeUndefined();
    // A smaller step budget measures smaller steps.
    const small = new PrefillRate(16);
    small.noteStep(16, 8);
    expect(small.tokensPerS).toBe(2000);
  });

  it("moves toward new samples as a moving average (weight 0.3 on ms per token)", () => {
    const rate = new PrefillRate();
    rate.noteStep(1000, 1000); // 1 ms/token
    rate.noteStep(1000, 2000); // 2 ms/token -> 1.3 ms/token
    expect(rate.tokensPerS).toBeCloseTo(769.2, 1);
    for (let i = 0; i < 40; i++) rate.noteStep(1000, 2000);
    expect(rate.tokensPerS).toBeCloseTo(500, 0);
  });

  it("caps its estimate at MAX_RETRY_AFTER_S", () => {
    const rate = new PrefillRate();
    rate.noteStep(100, 1000); // 100 tokens/s
    expect(rate.retryAfterS(1_000_000)).toBe(MAX_RETRY_AFTER_S);
    expect(rate.retryAfterS(1)).toBe(1);
  });
});
