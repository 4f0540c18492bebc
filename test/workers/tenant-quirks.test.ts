import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { tenantIndexOf } from "../../durable-objects/tenant-index/tenant-index-do";
import type { IndexedTurn } from "../../durable-objects/tenant-index/tenant-index-store";

/** The tenant index counts the client quirks the edge repaired (`repaired.quirks`), per turn. */
describe("client-quirk counters", () => {
  it("count each turn once per quirk it repaired; a turn noted twice counts once", async () => {
    const index = tenantIndexOf(env, `quirks-${crypto.randomUUID()}`);
    const turn = (n: number, quirks?: string[]): IndexedTurn => ({
      turn: n,
      startedAt: new Date().toISOString(),
      totalMs: 5,
      promptTokens: 10,
      cachedTokens: 0,
      computedTokens: 10,
      completionTokens: 1,
      repaired: { toolCallIds: 0, jsonArguments: 0, ...(quirks ? { quirks } : {}) },
    });
    expect((await index.counters()).quirks).toEqual({});
    await index.noteTurn({ id: "t1", turn: turn(1, ["billing-header"]) });
    await index.noteTurn({ id: "t1", turn: turn(1, ["billing-header"]) });
    await index.noteTurn({ id: "t1", turn: turn(2, ["billing-header", "billing-header"]) });
    await index.noteTurn({ id: "t1", turn: turn(3) });
    const counters = await index.counters();
    expect(counters.quirks).toEqual({ "billing-header": 2 });
    expect(counters.turns).toBe(3);
  });
});
