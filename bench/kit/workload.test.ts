import { describe, expect, it } from "vitest";
import { groupSizes, makeWorkload } from "./workload";

describe("the benchmark workload", () => {
  it("the workload: group sizes, shared prefixes per group, seeded", () => {
    expect(groupSizes(32, [0.5, 0.2, 0.15, 0.15])).toEqual([16, 6, 5, 5]);
    expect(groupSizes(3, [0.5, 0.2, 0.15, 0.15]).reduce((a, b) => a + b, 0)).toBe(3);
    const make = () =>
      makeWorkload({
        trajectories: 8,
        turns: 3,
        groupShares: [0.5, 0.25, 0.25],
        systemTokens: 50,
        tools: { count: 2, descriptionWords: 24, args: 3, argWords: 8 },
        observationTokens: [20, 40],
        replyTokens: [4, 8],
        pauseMs: [50, 300],
        startSpreadMs: 1000,
        seed: 3,
        countTokens: (t) => t.split(" ").length,
      });
    const w = make();
    expect(w).toEqual(make());
    expect(w).toHaveLength(8);
    const system = (g: number) => w.filter((t) => t.group === g).map((t) => t.turns[0]!.newMessages[0]!.content);
    expect(new Set(system(0)).size).toBe(1);
    expect(system(0)[0]).not.toBe(system(1)[0]);
    for (const t of w) {
      expect(t.turns).toHaveLength(3);
      expect(t.turns[0]!.pauseMs).toBe(0);
      for (const k of t.turns.slice(1)) expect(k.pauseMs).toBeGreaterThanOrEqual(50);
      expect(t.startDelayMs).toBeLessThan(1000);
    }
  });

  it("one group per trajectory (the routing bench's distinct workload): every system prompt and tool list its own, the same sizes", () => {
    const w = makeWorkload({
      trajectories: 6,
      turns: 2,
      groupShares: [1, 1, 1, 1, 1, 1],
      systemTokens: 50,
      tools: { count: 2, descriptionWords: 24, args: 3, argWords: 8 },
      observationTokens: [20, 40],
      replyTokens: [4, 8],
      seed: 3,
      countTokens: (t) => t.split(" ").length,
    });
    expect(new Set(w.map((t) => t.group)).size).toBe(6);
    expect(new Set(w.map((t) => t.turns[0]!.newMessages[0]!.content)).size).toBe(6);
    expect(new Set(w.map((t) => JSON.stringify(t.tools))).size).toBe(6);
    for (const t of w) expect(t.tools).toHaveLength(2);
  });
});
