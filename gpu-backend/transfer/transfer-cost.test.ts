import { describe, expect, it } from "vitest";
import { MIN_PREFILL_STEP_TOKENS, PrefillRate } from "../scheduler/prefill-rate";
import { MIN_COPY_BYTES, TransferCost } from "./transfer-cost";

describe("TransferCost", () => {
  it("copies when the measured bandwidth beats the measured prefill, and computes when it does not", () => {
    const rate = new PrefillRate();
    const cost = new TransferCost(rate);
    const block = { blocks: 256, blockSize: 16, bytesPerBlock: 131_072 };
    // Prefill 0.5 ms/token (CPU demo model), copy 500 MB/s: 4096 tokens cost 2 s, 32 MiB cost ~72 ms.
    for (let i = 0; i < 40; i++) {
      rate.noteStep(512, 256);
      cost.noteCopy(32 * 2 ** 20, 67);
    }
    expect(cost.prefillMsPerToken).toBeCloseTo(0.5, 2);
    expect(cost.bytesPerMs / ((32 * 2 ** 20) / 67)).toBeCloseTo(1, 3);
    expect(cost.copyBeatsCompute(block)).toBe(true);
    // A GPU-class prefill (0.01 ms/token) against a slow link (10 MB/s): compute.
    for (let i = 0; i < 40; i++) {
      rate.noteStep(4096, 41);
      cost.noteCopy(2 ** 21, 210);
    }
    expect(cost.copyBeatsCompute(block)).toBe(false);
  });

  it("ignores decode-bound steps and overhead-bound copies", () => {
    const rate = new PrefillRate();
    const cost = new TransferCost(rate);
    const before = { prefill: cost.prefillMsPerToken, bw: cost.bytesPerMs };
    rate.noteStep(MIN_PREFILL_STEP_TOKENS - 1, 1000);
    cost.noteCopy(MIN_COPY_BYTES - 1, 1000);
    expect(cost.prefillMsPerToken).toBe(before.prefill);
    expect(cost.bytesPerMs).toBe(before.bw);
  });
});
