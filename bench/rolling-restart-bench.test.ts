import { describe, expect, it } from "vitest";
import { phaseFigures } from "./rolling-restart-bench";

const turn = (cachedTokens: number, promptTokens: number, ttftMs: number) => ({ trajectory: "t", turn: 2, sentAtMs: 0, ttftMs, promptTokens, cachedTokens, completionTokens: 8 });

describe("phaseFigures", () => {
  it("counts cached tokens against the ideal at most up to the ideal, and against the prompt as sent", () => {
    const f = phaseFigures([
      { t: turn(800, 1000, 100), ideal: 800 },
      { t: turn(0, 1000, 900), ideal: 960 },
      { t: turn(1000, 1100, 50), ideal: 960 }, // more than the ideal (a shared prefix it did not know): counts as the ideal
    ]);
    expect(f).toMatchObject({ turns: 3, promptTokens: 3100, cachedTokens: 1800, idealCachedTokens: 2720, hitOverIdeal: round3(1760 / 2720), hitRate: round3(1800 / 3100), p50TtftMs: 100, p99TtftMs: 900 });
  });

  it("leaves the ratios undefined (NaN, null in JSON) for a phase with no turns", () => {
    const f = phaseFigures([]);
    expect(f.turns).toBe(0);
    expect(Number.isNaN(f.hitOverIdeal) && Number.isNaN(f.hitRate) && Number.isNaN(f.p50TtftMs)).toBe(true);
  });
});

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
