import { describe, expect, it } from "vitest";
import { cacheMissOf } from "./cache-miss";

const A = "http://a:8080";
const B = "http://b:8080";
// 900 + 13 tokens, the reply's last without KV (sampled, never fed through the model): 912 reusable.
const previous = { promptTokens: 900, completionTokens: 13, backendUrl: A };
const turn = { mode: "delta" as const, fullReason: null, route: "pinned" as const, promptTokens: 1200, cachedTokens: 912, backendUrl: A };

describe("cacheMissOf", () => {
  it("names nothing when the turn reused all it could (a delta turn reuses the previous prompt and reply)", () => {
    expect(cacheMissOf({ previous, turn, blockSize: 16 })).toBeUndefined();
    expect(cacheMissOf({ previous: undefined, turn: { ...turn, mode: "full", fullReason: "first-turn", cachedTokens: 0 }, blockSize: 16 })).toBeUndefined();
  });

  it("puts a prefix break first, with its cause", () => {
    const t = { ...turn, mode: "full" as const, fullReason: "diverged" as const, cachedTokens: 64, prefixBreak: { cause: "timestamp" as const } };
    expect(cacheMissOf({ previous, turn: t, blockSize: 16 })).toEqual({ reason: "prefix-break", tokens: 848, possibleTokens: 912, detail: "timestamp" });
    // A regenerate reuses the previous prompt (capped at the prompt less one token): not a break.
    const regen = { ...turn, mode: "full" as const, fullReason: "diverged" as const, promptTokens: 900, cachedTokens: 896, prefixBreak: { cause: "regenerate" as const } };
    expect(cacheMissOf({ previous, turn: regen, blockSize: 16 })).toEqual({ reason: "shorter-than-a-block", tokens: 3, possibleTokens: 899 });
  });

  it("names a failed pull, then a move nothing made up for, with the route", () => {
    const moved = { ...turn, mode: "full" as const, fullReason: "backend-changed" as const, route: "pinned-overloaded" as const, backendUrl: B, cachedTokens: 0 };
    const failed = { ...moved, kvPull: { outcome: "holder-failed" as const, from: A, missingBlocks: 57, blocks: 10, bytes: 1, ms: 3 }, cachedTokens: 160 };
    expect(cacheMissOf({ previous, turn: failed, blockSize: 16 })).toEqual({ reason: "transfer-failed", tokens: 752, possibleTokens: 912, detail: "holder-failed" });
    expect(cacheMissOf({ previous, turn: moved, blockSize: 16 })).toEqual({ reason: "placed-away", tokens: 912, possibleTokens: 912, detail: "pinned-overloaded" });
    const cheaper = { ...moved, kvPull: { outcome: "compute-cheaper" as const, from: A, missingBlocks: 57, blocks: 0, bytes: 0, ms: 0 } };
    expect(cacheMissOf({ previous, turn: cheaper, blockSize: 16 })!.detail).toBe("pinned-overloaded; kv_pull=compute-cheaper");
    // Pulled: the move was made up for; what is left is the partial last block.
    const pulled = { ...moved, kvPull: { outcome: "pulled" as const, from: A, missingBlocks: 57, blocks: 57, bytes: 1, ms: 3 }, cachedTokens: 912 };
    expect(cacheMissOf({ previous: { ...previous, completionTokens: 21 }, turn: pulled, blockSize: 16 })).toEqual({ reason: "shorter-than-a-block", tokens: 8, possibleTokens: 920 });
  });

  it("names a first turn placed away from the backend holding the most of its prefix", () => {
    const first = { ...turn, mode: "full" as const, fullReason: "first-turn" as const, route: "least-loaded" as const, cachedTokens: 32 };
    expect(cacheMissOf({ previous: undefined, turn: first, blockSize: 16, placement: { bestBlocks: 40, placedBlocks: 2 } })).toEqual({ reason: "placed-away", tokens: 608, possibleTokens: 640, detail: "least-loaded" });
    // A count of 1 names a backend that served the prefix key, not a block count: no miss from it.
    expect(cacheMissOf({ previous: undefined, turn: { ...first, cachedTokens: 0 }, blockSize: 16, placement: { bestBlocks: 1, placedBlocks: 0 } })).toBeUndefined();
    // On the best holder, a short first turn is left unexplained (the pool's count is an estimate).
    expect(cacheMissOf({ previous: undefined, turn: first, blockSize: 16, placement: { bestBlocks: 40, placedBlocks: 40 } })).toBeUndefined();
  });

  it("calls a shortfall on the same backend an eviction, naming a lost state and host-tier hits", () => {
    const lost = { ...turn, mode: "full" as const, fullReason: "state-unknown" as const, cachedTokens: 256, hostTierTokens: 128 };
    expect(cacheMissOf({ previous, turn: lost, blockSize: 16 })).toEqual({ reason: "evicted", tokens: 656, possibleTokens: 912, detail: "state-evicted; host_tier=128" });
    expect(cacheMissOf({ previous, turn: { ...turn, cachedTokens: 512 }, blockSize: 16 })).toEqual({ reason: "evicted", tokens: 400, possibleTokens: 912, detail: "blocks-evicted" });
    // The backend remembered the first missing block's eviction: when, why, from which tier.
    const remembered = { ...turn, cachedTokens: 512, evicted: { agoMs: 12_345, by: "lease-broken" as const, from: "pool" as const } };
    expect(cacheMissOf({ previous, turn: remembered, blockSize: 16 })!.detail).toBe("blocks-evicted; by lease-broken from the pool 12.3 s before");
  });
});
