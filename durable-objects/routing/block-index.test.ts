import { describe, expect, it } from "vitest";
import { BlockIndex, HOLDERS_ARRAY_BYTES, INDEX_ENTRY_BYTES, INDEX_SLOT_BYTES } from "./block-index";

/** Short block hash number i (16 hex). */
const hx = (i: number) => i.toString(16).padStart(16, "0");

describe("BlockIndex", () => {
  it("estimates its memory from its hashes in both tiers and its slots", () => {
    const index = new BlockIndex({ maxEntries: 4 });
    expect(index.memoryBytes()).toBe(0);
    index.apply("a", { seq: 1, kind: "snapshot", stored: [hx(1), hx(2)], removed: [], offloaded: [hx(3)] });
    index.apply("b", { seq: 1, kind: "snapshot", stored: [hx(1)], removed: [] });
    // hx(1) counts once, plus its array of two holders.
    expect(index.memoryBytes()).toBe(3 * INDEX_ENTRY_BYTES + HOLDERS_ARRAY_BYTES + 2 * 8 + 2 * INDEX_SLOT_BYTES);
    index.apply("a", { seq: 2, kind: "delta", stored: [hx(5), hx(6), hx(7), hx(8)], removed: [] });
    // Capped: never more than maxEntries hashes per tier.
    expect(index.memoryBytes()).toBeLessThanOrEqual((4 + 1) * INDEX_ENTRY_BYTES + HOLDERS_ARRAY_BYTES + 2 * 8 + 2 * INDEX_SLOT_BYTES);
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

  it("indexes any number of backends, one entry per hash however many hold it", () => {
    const index = new BlockIndex();
    for (let i = 0; i < 1000; i++) expect(index.apply(`u${i}`, { seq: 1, kind: "snapshot", stored: [hx(7), hx(1000 + i)], removed: [] })).toBe("ok");
    expect(index.size).toBe(1001);
    expect(index.isIndexed("u999")).toBe(true);
    expect(index.leadingBlocks([hx(7), hx(1000 + 640)], ["u0", "u640", "u999", "nobody"])).toEqual(new Map([["u0", 1], ["u640", 2], ["u999", 1]]));
    // A dropped backend's slot is reused by the next one; the hashes it held are forgotten.
    index.drop("u640");
    expect(index.size).toBe(1000);
    expect(index.apply("late", { seq: 1, kind: "snapshot", stored: [hx(7), hx(5)], removed: [] })).toBe("ok");
    expect(index.leadingBlocks([hx(7), hx(5)], ["u640", "late", "u1"])).toEqual(new Map([["late", 2], ["u1", 1]]));
  });

  it("answers what a plain map of holder sets answers, over random events, drops and resyncs", () => {
    let seed = 12345;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const urls = Array.from({ length: 40 }, (_, i) => `b${i}`);
    const index = new BlockIndex();
    const pool = new Map<string, Set<string>>(); // url -> hashes in its pool
    const tier = new Map<string, Set<string>>();
    const seq = new Map<string, number>();
    for (const u of urls) {
      pool.set(u, new Set());
      tier.set(u, new Set());
    }
    const leading = (u: string, chain: string[], credit: number) => {
      let n = 0;
      for (const h of chain) {
        if (pool.get(u)!.has(h)) n += 1;
        else if (credit > 0 && tier.get(u)!.has(h)) n += credit;
        else break;
      }
      return n;
    };
    for (let step = 0; step < 3000; step++) {
      const u = urls[rand(urls.length)]!;
      const h = hx(rand(64));
      const what = rand(10);
      const next = (seq.get(u) ?? 0) + 1;
      if (what === 0) {
        index.drop(u);
        pool.get(u)!.clear();
        tier.get(u)!.clear();
        seq.delete(u);
      } else if (!seq.has(u) || what === 1) {
        const stored = [...new Set(Array.from({ length: rand(20) }, () => hx(rand(64))))];
        expect(index.apply(u, { seq: next, kind: "snapshot", stored, removed: [] })).toBe("ok");
        pool.set(u, new Set(stored));
        tier.set(u, new Set());
        seq.set(u, next);
      } else {
        const kind = what < 6 ? "stored" : what < 8 ? "removed" : "offloaded";
        expect(index.apply(u, { seq: next, kind: "delta", stored: kind === "stored" ? [h] : [], removed: kind === "removed" ? [h] : [], offloaded: kind === "offloaded" ? [h] : [] })).toBe("ok");
        if (kind === "stored") (pool.get(u)!.add(h), tier.get(u)!.delete(h));
        if (kind === "removed") (pool.get(u)!.delete(h), tier.get(u)!.delete(h));
        if (kind === "offloaded") (pool.get(u)!.delete(h), tier.get(u)!.add(h));
        seq.set(u, next);
      }
      if (step % 50 === 0) {
        const chain = Array.from({ length: 6 }, () => hx(rand(64)));
        for (const credit of [0, 0.5]) {
          const expected = new Map(urls.filter((x) => seq.has(x)).map((x) => [x, leading(x, chain, credit)]));
          expect(index.leadingBlocks(chain, urls, credit)).toEqual(expected);
        }
      }
    }
  });
});
