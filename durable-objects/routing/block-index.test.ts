import { describe, expect, it } from "vitest";
import { BlockIndex } from "./block-index";

/** Short block hash number i (16 hex). */
const hx = (i: number) => i.toString(16).padStart(16, "0");

describe("BlockIndex", () => {
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
