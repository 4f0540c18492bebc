import { describe, expect, it } from "vitest";
import { BlockPool, blocksForBudget, bytesPerBlock } from "./block-pool";
import { checked } from "./testing";

function pool(numBlocks: number, blockSize = 4): BlockPool {
  return checked(new BlockPool({ numBlocks, blockSize }));
}

/** Fake hashes: content addressing is the manager's business; the pool only stores strings. */
const h = (n: number): string => n.toString(16).padStart(32, "0");

function snapshot(p: BlockPool): unknown {
  return {
    free: p.freeOrder(),
    refs: Array.from({ length: p.numBlocks }, (_, id) => p.refCount(id)),
    hashes: Array.from({ length: p.numBlocks }, (_, id) => p.blockHash(id)),
    numCached: p.numCached,
    stats: p.stats,
  };
}

describe("blocksForBudget", () => {
  it("counts K and V of every layer", () => {
    const shape = { blockSize: 16, numLayers: 2, numKvHeads: 2, headDim: 64, bytesPerElement: 4 };
    expect(bytesPerBlock(shape)).toBe(2 * 2 * 16 * 2 * 64 * 4);
    expect(blocksForBudget({ ...shape, budgetBytes: 64 << 20 })).toBe(2048);
    expect(blocksForBudget({ ...shape, budgetBytes: 32768 * 3 - 1 })).toBe(2);
    expect(blocksForBudget({ ...shape, budgetBytes: 100 })).toBe(0);
    expect(blocksForBudget({ ...shape, bytesPerElement: 2, budgetBytes: 64 << 20 })).toBe(4096);
  });

  it("rejects nonsense shapes", () => {
    const shape = { blockSize: 16, numLayers: 2, numKvHeads: 2, headDim: 64, bytesPerElement: 4, budgetBytes: 1 << 20 };
    expect(() => blocksForBudget({ ...shape, headDim: 0 })).toThrow(/headDim/);
    expect(() => blocksForBudget({ ...shape, budgetBytes: -1 })).toThrow(/budgetBytes/);
  });

  it("sizes a pool from a budget", () => {
    const p = BlockPool.fromBudget({ budgetBytes: 1 << 20, blockSize: 16, numLayers: 2, numKvHeads: 2, headDim: 64, bytesPerElement: 4 });
    expect(p.numBlocks).toBe(32);
    expect(p.blockSize).toBe(16);
    expect(p.numFree).toBe(32);
    p.checkInvariants();
  });

  it("refuses a pool with no blocks", () => {
    expect(() => new BlockPool({ numBlocks: 0, blockSize: 16 })).toThrow(/numBlocks/);
    expect(() => BlockPool.fromBudget({ budgetBytes: 10, blockSize: 16, numLayers: 2, numKvHeads: 2, headDim: 64, bytesPerElement: 4 })).toThrow(/numBlocks/);
  });
});

describe("BlockPool", () => {
  it("allocates from the front with refCount 1 and releases back", () => {
    const p = pool(4);
    expect(p.allocate(0)).toEqual([]);
    expect(p.allocate(3)).toEqual([0, 1, 2]);
    expect(p.numFree).toBe(1);
    expect(p.usage()).toBe(0.75);
    expect(p.refCount(1)).toBe(1);
    p.release([0, 1, 2]);
    expect(p.numFree).toBe(4);
    expect(p.usage()).toBe(0);
    expect(p.refCount(1)).toBe(0);
  });

  it("returns null and changes nothing when short of blocks", () => {
    const p = pool(4);
    const a = p.allocate(2)!;
    p.cache(a[0]!, h(1));
    p.release(a);
    const before = snapshot(p);
    expect(p.allocate(5)).toBeNull();
    expect(snapshot(p)).toEqual(before);
    expect(p.allocate(4)).toHaveLength(4);
    expect(p.allocate(1)).toBeNull();
  });

  it("evicts the tail of a released chain before its head", () => {
    const p = pool(3);
    const table = p.allocate(3)!;
    table.forEach((id, i) => p.cache(id, h(i)));
    p.release(table);
    expect(p.freeOrder()).toEqual([2, 1, 0]);
    expect(p.numCached).toBe(3);
    expect(p.allocate(1)).toEqual([2]);
    expect(p.stats.evictions).toBe(1);
    expect(p.lookup(h(2))).toBeUndefined();
    expect(p.lookup(h(1))).toBe(1);
    expect(p.lookup(h(0))).toBe(0);
    expect(p.blockHash(2)).toBeNull();
    expect(p.numCached).toBe(2);
  });

  it("evicts uncached blocks before any cached block", () => {
    const p = pool(4);
    const table = p.allocate(4)!;
    p.cache(0, h(0));
    p.cache(1, h(1));
    p.release(table);
    expect(p.freeOrder()).toEqual([2, 3, 1, 0]);
    expect(p.allocate(2)).toEqual([2, 3]);
    expect(p.stats.evictions).toBe(0);
    expect(p.numCached).toBe(2);
    expect(p.allocate(1)).toEqual([1]);
    expect(p.stats.evictions).toBe(1);
  });

  it("orders whole tables least recently released first", () => {
    const p = pool(4);
    const a = p.allocate(2)!;
    const b = p.allocate(2)!;
    [...a, ...b].forEach((id) => p.cache(id, h(id)));
    p.release(a);
    p.release(b);
    expect(p.freeOrder()).toEqual([a[1], a[0], b[1], b[0]]);
  });

  it("acquire touches a free cached block: out of the queue, back of it when released again", () => {
    const p = pool(3);
    const table = p.allocate(3)!;
    table.forEach((id, i) => p.cache(id, h(i)));
    p.release(table);
    expect(p.freeOrder()).toEqual([2, 1, 0]);
    expect(p.lookup(h(1))).toBe(1);
    p.acquire([1]);
    expect(p.refCount(1)).toBe(1);
    expect(p.freeOrder()).toEqual([2, 0]);
    expect(p.usage()).toBeCloseTo(1 / 3);
    p.release([1]);
    expect(p.freeOrder()).toEqual([2, 0, 1]);
  });

  it("acquire adds references to in-use blocks; release keeps them in use until the last", () => {
    const p = pool(2);
    const [id] = p.allocate(1)!;
    p.cache(id!, h(9));
    p.acquire([id!]);
    expect(p.refCount(id!)).toBe(2);
    p.release([id!]);
    expect(p.refCount(id!)).toBe(1);
    expect(p.numFree).toBe(1);
    p.release([id!]);
    expect(p.numFree).toBe(2);
  });

  it("refuses to acquire a free uncached block and changes nothing", () => {
    const p = pool(3);
    const t = p.allocate(2)!;
    p.cache(t[0]!, h(0));
    p.release(t);
    const before = snapshot(p);
    expect(() => p.acquire([t[0]!, t[1]!])).toThrow(/free and uncached/);
    expect(snapshot(p)).toEqual(before);
  });

  it("refuses a double free and rolls back the references it already dropped", () => {
    const p = pool(3);
    const t = p.allocate(2)!;
    p.release([t[1]!]);
    const before = snapshot(p);
    expect(() => p.release(t)).toThrow(/double free/);
    expect(snapshot(p)).toEqual(before);
    expect(() => p.release([t[0]!, t[0]!])).toThrow(/double free/);
    expect(snapshot(p)).toEqual(before);
    expect(() => p.release([7])).toThrow(/out of range/);
  });

  it("keeps a duplicate hash uncached", () => {
    const p = pool(4);
    const [a, b] = p.allocate(2)! as [number, number];
    expect(p.cache(a, h(5))).toBe(true);
    expect(p.cache(b, h(5))).toBe(false);
    expect(p.blockHash(b)).toBeNull();
    expect(p.lookup(h(5))).toBe(a);
    expect(p.numCached).toBe(1);
    expect(p.cache(a, h(5))).toBe(true);
    expect(() => p.cache(a, h(6))).toThrow(/already holds/);
    p.release([a, b]);
    expect(p.freeOrder().indexOf(b)).toBeLessThan(p.freeOrder().indexOf(a));
  });

  it("keeps a hash cached while its block is free and forgets it when the block is reused", () => {
    const p = pool(1);
    const [a] = p.allocate(1)! as [number];
    p.cache(a, h(1));
    p.release([a]);
    expect(p.lookup(h(1))).toBe(a);
    expect(p.numCached).toBe(1);
    expect(() => p.cache(a, h(2))).toThrow(/not in use/);
    expect(p.allocate(1)).toEqual([a]);
    expect(p.lookup(h(1))).toBeUndefined();
    expect(p.numCached).toBe(0);
    expect(p.cache(a, h(2))).toBe(true);
  });

  it("checkInvariants catches each kind of corruption", () => {
    type Guts = { refCounts: Int32Array; hashes: (string | null)[]; hashToBlock: Map<string, number> };
    const fresh = (): [BlockPool, Guts] => {
      const p = new BlockPool({ numBlocks: 4, blockSize: 4 });
      const t = p.allocate(2)!;
      p.cache(t[0]!, h(0));
      return [p, p as unknown as Guts];
    };
    let [p, g] = fresh();
    g.refCounts[2] = 1;
    expect(() => p.checkInvariants()).toThrow(/in the free queue/);
    [p, g] = fresh();
    g.refCounts[0] = 0;
    expect(() => p.checkInvariants()).toThrow(/not in the free queue/);
    [p, g] = fresh();
    g.refCounts[0] = -1;
    expect(() => p.checkInvariants()).toThrow(/negative/);
    [p, g] = fresh();
    g.hashes[1] = h(7);
    expect(() => p.checkInvariants()).toThrow(/map sends/);
    [p, g] = fresh();
    g.hashToBlock.set(h(8), 1);
    expect(() => p.checkInvariants()).toThrow(/map sends/);
  });
});
