import { describe, expect, it } from "vitest";
import { checkTargets, idealCachedTokens, lostVsIdeal, maxOverMean, oracleComputed, oracleTable, summarizePolicy, summaryJson, type TurnResult } from "./routing-report";

const turn = (trajectory: string, n: number, sentAtMs: number, promptTokens: number, completionTokens: number) => ({ trajectory, turn: n, sentAtMs, promptTokens, completionTokens });

describe("routing bench report", () => {
  it("max/mean load counts idle backends as zero", () => {
    expect(maxOverMean([8, 8, 8, 8])).toBe(1);
    expect(maxOverMean([12, 8, 8, 4])).toBe(1.5);
    expect(maxOverMean([16, 0, 0, 0])).toBe(4);
    expect(maxOverMean([0, 0])).toBe(1);
  });

  it("ideal cached tokens: previous prompt + completion, shared first-turn prefix, whole blocks, at most prompt - 1", () => {
    const turns = [
      turn("a", 1, 0, 1000, 10), // first of all: nothing to reuse
      turn("b", 1, 5, 1000, 10), // shares 700 tokens with a's first prompt, 900 with c's (both sent earlier) -> 896
      turn("a", 2, 50, 1300, 10), // a's turn 1 prompt + completion = 1010 -> 1008
      turn("b", 2, 60, 1015, 10), // 1010 capped at 1014, floored -> 1008
      turn("c", 1, 2, 1000, 10), // sent after a, before b: only a counts -> 300 -> 288
      turn("a", 3, 90, 17, 10), // 1310 capped at 16 -> 16
    ];
    const shared = (x: string, y: string) => {
      const key = [x, y].sort().join("");
      return key === "ab" ? 700 : key === "ac" ? 300 : key === "bc" ? 900 : 0;
    };
    expect(idealCachedTokens(turns, shared, 16)).toEqual([0, 896, 1008, 1008, 288, 16]);
    // Block size 1: exact token counts.
    expect(idealCachedTokens(turns, shared, 1)).toEqual([0, 900, 1010, 1010, 300, 16]);
  });

  it("summarizes a policy: hit rate, ideal, throughput, TTFT, load, moves, where the shortfall is", () => {
    const r = (trajectory: string, n: number, backend: string, cached: number, ttftMs: number): TurnResult => ({
      trajectory,
      group: 0,
      turn: n,
      sentAtMs: n * 100,
      ttftMs,
      totalMs: ttftMs + 50,
      promptTokens: 100,
      cachedTokens: cached,
      completionTokens: 10,
      computedTokens: 100 - cached,
      backend,
      mode: n === 1 ? "full" : "delta",
      fullReason: n === 1 ? "first-turn" : null,
      route: n === 3 ? "pinned-overloaded" : n === 1 ? "least-loaded" : "pinned",
      doTtftMs: ttftMs - 5,
    });
    const results = [r("a", 1, "b0", 0, 100), r("a", 2, "b0", 80, 20), r("a", 3, "b1", 0, 300), r("b", 1, "b1", 48, 40)];
    const ideal = [0, 96, 96, 64];
    const d = summarizePolicy({ results, ideal, wallMs: 2000, backends: ["b0", "b1", "b2", "b3"] });
    expect(d.hitRate).toBe(0.32); // 128 / 400
    expect(d.idealHitRate).toBe(0.64); // 256 / 400
    expect(d.hitOverIdeal).toBe(0.5);
    expect(d.throughputTokPerS).toBe(20); // 40 tokens / 2 s
    expect(d.p50TtftMs).toBe(40);
    expect(d.p99TtftMs).toBe(300);
    expect(d.maxOverMeanLoad).toBe(2); // 2 turns on b0 and b1, 0 on b2, b3: mean 1
    expect(d.turnsPerBackend).toEqual({ b0: 2, b1: 2, b2: 0, b3: 0 });
    expect(d.moves).toBe(1);
    expect(d.movesByRoute).toEqual({ "pinned-overloaded": 1 });
    expect(d.backendsPerTrajectory).toBe(1.5);
    expect(d.lostVsIdeal).toEqual({ firstTurns: 16, movedTurns: 96, stayingTurns: 16 });
    expect(lostVsIdeal(results, ideal)).toEqual(d.lostVsIdeal);

    // The JSON line holds exactly the six figures per policy.
    const json = summaryJson({ affinity: d, "round-robin": { ...d, throughputTokPerS: 10 } });
    expect(Object.keys(json)).toEqual(["policies"]);
    expect(Object.keys(json.policies.affinity!).sort()).toEqual(["hitRate", "idealHitRate", "maxOverMeanLoad", "p50TtftMs", "p99TtftMs", "throughputTokPerS"]);
    expect(JSON.parse(JSON.stringify(json))).toEqual(json);
    expect(checkTargets(json.policies)).toEqual({ affinityHitVsIdeal: false, affinityThroughputVsRoundRobin: true, maxOverMeanLoad: false });
  });

  it("a policy without turns has NaN TTFT percentiles (null in the JSON line), not an error", () => {
    const d = summarizePolicy({ results: [], ideal: [], wallMs: 1000, backends: ["b0"] });
    expect(d.p50TtftMs).toBeNaN();
    expect(d.p99TtftMs).toBeNaN();
    expect(d.p50DoTtftMs).toBeNaN();
    expect(d.p99DoTtftMs).toBeNaN();
  });
});

describe("against the oracle (ideal placement)", () => {
  it("reports each run's hit/ideal and computed tokens against the oracle's, and one oracle row per distinct ideal", () => {
    const d = summarizePolicy({ results: [], ideal: [], wallMs: 1000, backends: ["b0"] });
    const a = { ...d, hitRate: 0.8, idealHitRate: 0.9, hitOverIdeal: 0.889, promptTokens: 1000, idealCachedTokens: 900, computedTokens: 200, throughputTokPerS: 40, wallS: 30, p50TtftMs: 100, p99TtftMs: 900, moves: 0 };
    const rr = { ...a, hitRate: 0.6, hitOverIdeal: 0.667, computedTokens: 400, moves: 12 };
    expect(oracleComputed(a)).toBe(100);
    const lines = oracleTable([
      { policy: "affinity", pulls: "never", d: a, loadAvg: 1.5 },
      { policy: "round-robin", pulls: "never", d: rr },
    ]).split("\n");
    expect(lines).toHaveLength(5);
    expect(lines[2]).toBe("| affinity | never | 0.800 | 0.889 | 200 | 2.00 | 40.0 | 30.0 | 100 | 900 | 0 | - | 1.50 |");
    expect(lines[3]).toContain("| round-robin | never | 0.600 | 0.667 | 400 | 4.00 |");
    expect(lines[4]).toBe("| oracle (ideal placement) | - | 0.900 | 1.000 | 100 | 1.00 | - | - | - | - | - | - | - |");
  });
});
