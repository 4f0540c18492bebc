import { describe, expect, it } from "vitest";
import { BlockIndex, INDEX_ENTRY_BYTES, INDEX_SLOT_BYTES } from "./block-index";

/** Short block hash number i (16 hex). */
const hx = (i: number) => i.toString(16).padStart(16, "0");

describe("BlockIndex", () => {
  it("estimates its memory from its hashes in both tiers and its slots", () => {
    const index = new BlockIndex({ maxEntries: 4 });
    expect(index.memoryBytes()).toBe(0);
    index.apply("a", { seq: 1, kind: "snapshot", stored: [hx(1), hx(2)], removed: [], offloaded: [hx(3)] });
    index.apply("b", { seq: 1, kind: "snapshot", stored: [hx(1)], removed: [] });
    // hx(1) counts once however many backends hold it.
    expect(index.memoryBytes()).toBe(3 * INDEX_ENTRY_BYTES + 2 * INDEX_SLOT_BYTES);
    index.apply("a", { seq: 2, kind: "delta", stored: [hx(5), hx(6), hx(7), hx(8)], removed: [] });
    // Capped: never more than maxEntries hashes per tier.
    expect(index.memoryBytes()).toBeLessThanOrEqual((4 + 1) * INDEX_ENTRY_BYTES + 2 * INDEX_SLOT_BYTES);
    index.drop("a");
    index.drop("b");
    expect(index.memoryBytes()).toBe(0);
  });

  it("evicts the least recently stored, noted or found hash first", () => {
    const index = new BlockIndex({ maxEntries: 3 });
    expect(index.apply("u", { seq: 1, kind: "snapshot", stored: [hx(1), hx(2), hx(3)], removed: [] })).toBe("ok");
    // Finding hx(1) held moves it to the back: hx(2) is now the oldest.
    expect(index.leadingBlocks([hx(1)], ["u"])).toEqual(new Map([["u", 1]]));
    index.noteHeld("u", [hx(4)]);
    expect(index.size).toBe(3);
    expect(index.leadingBlocks([hx(2)], ["u"])).toEqual(new Map([["u", 0]]));
    expect(index.leadingBlocks([hx(1), hx(3), hx(4)], ["u"])).toEqual(new Map([["u", 3]]));
  });

  it("knows which blocks a backend holds in its host tier and credits them less when asked to", () => {
    const index = new BlockIndex();
    // a: blocks 0-1 in its pool, 2-3 in its tier; b: blocks 0-2 in its pool.
    index.apply("a", { seq: 1, kind: "snapshot", stored: [hx(0), hx(1)], removed: [], offloaded: [hx(2), hx(3)] });
    index.apply("b", { seq: 1, kind: "snapshot", stored: [hx(0), hx(1), hx(2)], removed: [] });
    const chain = [hx(0), hx(1), hx(2), hx(3), hx(4)];
    expect(index.tierSize).toBe(2);
    // Pool blocks only (what a pull is served from): a's run ends at its first tier block.
    expect(index.leadingBlocks(chain, ["a", "b"])).toEqual(new Map([["a", 2], ["b", 3]]));
    // With tier credit: a's run goes on through its tier, at half a block each.
    expect(index.leadingBlocks(chain, ["a", "b"], 0.5)).toEqual(new Map([["a", 3], ["b", 3]]));
    // a brings block 2 back into its pool (stored), evicts block 1 into the tier (offloaded), drops block 3.
    expect(index.apply("a", { seq: 2, kind: "delta", stored: [hx(2)], removed: [hx(3)], offloaded: [hx(1)] })).toBe("ok");
    expect(index.leadingBlocks(chain, ["a"], 0.5)).toEqual(new Map([["a", 2.5]]));
    expect(index.leadingBlocks(chain, ["a"])).toEqual(new Map([["a", 1]]));
    // A turn noted on a holds block 1 in its pool again; dropping a forgets both tiers.
    index.noteHeld("a", [hx(1)]);
    expect(index.leadingBlocks(chain, ["a"], 0.5)).toEqual(new Map([["a", 3]]));
    index.drop("a");
    expect(index.tierSize).toBe(0);
    expect(index.leadingBlocks(chain, ["a", "b"], 0.5)).toEqual(new Map([["b", 3]]));
  });

  it("keeps one entry per hash for many backends, and 32 backends at most", () => {
    const index = new BlockIndex();
    for (let i = 0; i < 32; i++) expect(index.apply(`u${i}`, { seq: 1, kind: "snapshot", stored: [hx(7)], removed: [] })).toBe("ok");
    expect(index.size).toBe(1);
    // A 33rd backend gets no slot: answered ok, not indexed.
    expect(index.apply("u32", { seq: 1, kind: "snapshot", stored: [hx(7)], removed: [] })).toBe("ok");
    expect(index.isIndexed("u32")).toBe(false);
    expect(index.leadingBlocks([hx(7)], ["u0", "u31", "u32"])).toEqual(new Map([["u0", 1], ["u31", 1]]));
    index.drop("u31");
    expect(index.apply("u32", { seq: 1, kind: "snapshot", stored: [hx(7)], removed: [] })).toBe("ok");
    expect(index.leadingBlocks([hx(7)], ["u31", "u32"])).toEqual(new Map([["u32", 1]]));
  });
});
