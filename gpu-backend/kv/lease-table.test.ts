import { describe, expect, it } from "vitest";
import { mulberry32 } from "../../protocol/random";
import { hashRoot } from "../../protocol/block-hash";
import { BlockPool } from "./block-pool";
import { KvCacheManager } from "./kv-cache-manager";
import { LeaseTable, type LeaseTableParams } from "./lease-table";
import { blocksNeeded, randInt, range, sequence } from "./testing";

const h = (n: number): string => n.toString(16).padStart(32, "0");

/** A pool of `numBlocks` blocks of 4 tokens and a lease table over it, on a settable clock. */
function setup(numBlocks: number, maxLeasedFraction = 0.5, more: Partial<LeaseTableParams> = {}) {
  const clock = { t: 1000 };
  const pool = new BlockPool({ numBlocks, blockSize: 4 });
  const leases = new LeaseTable({ pool, maxLeasedFraction, now: () => clock.t, ...more });
  const check = () => {
    pool.checkInvariants();
    leases.checkInvariants();
  };
  /** Allocates `n` blocks, caches them under hashes from `base`, and frees them as one table. */
  const cacheAndFree = (n: number, base: number): number[] => {
    const ids = pool.allocate(n)!;
    ids.forEach((id, i) => pool.cache(id, h(base + i)));
    pool.release(ids);
    check();
    return ids;
  };
  return { clock, pool, leases, check, cacheAndFree };
}

describe("LeaseTable: eviction order", () => {
  it("evicts unleased cached blocks (LRU) before leased ones, and leased ones without failing", () => {
    const { pool, leases, check, cacheAndFree } = setup(8, 0.5);
    const a = cacheAndFree(2, 100); // released first: LRU would evict these first
    const b = cacheAndFree(2, 200);
    expect(leases.lease({ key: "a", blockIds: a, ttlMs: 5000 })).toMatchObject({ leased: true, blocks: 2 });
    check();
    expect(pool.numFree).toBe(8);
    expect(pool.numHeld).toBe(2);
    // 6 blocks: the 4 uncached ones, then b's (tail first); a's stay cached.
    const got = pool.allocate(6)!;
    check();
    expect(got.slice(4).sort()).toEqual([...b].sort());
    expect(a.map((id) => pool.blockHash(id))).toEqual([h(100), h(101)]);
    expect(leases.get("a")).toMatchObject({ blocks: 2 });
    // Only leased blocks are left: the lease is broken, never the allocation.
    expect(pool.allocate(2)).not.toBeNull();
    check();
    expect(leases.get("a")).toBeUndefined();
    expect(leases.counters.broken).toBe(1);
    expect(pool.allocate(1)).toBeNull();
  });

  it("breaks the lease due last first under pressure (or the oldest, with breakOrder oldest)", () => {
    for (const breakOrder of ["latest-deadline", "oldest"] as const) {
      const { pool, leases, check, cacheAndFree } = setup(6, 1, breakOrder === "oldest" ? { breakOrder } : {});
      const a = cacheAndFree(2, 100);
      const b = cacheAndFree(2, 200);
      const c = cacheAndFree(2, 300);
      leases.lease({ key: "b", blockIds: b, ttlMs: 5000 });
      leases.lease({ key: "a", blockIds: a, ttlMs: 9000 });
      leases.lease({ key: "c", blockIds: c, ttlMs: 3000 });
      check();
      pool.allocate(1);
      check();
      const broken = breakOrder === "oldest" ? b : a;
      expect(leases.list().map((l) => l.key)).toEqual(breakOrder === "oldest" ? ["a", "c"] : ["b", "c"]);
      expect(pool.blockHash(broken[0]!)).not.toBeNull(); // the broken lease's head survives; its tail went first
      expect(pool.blockHash(broken[1]!)).toBeNull();
    }
  });

  it("breaks by expected return when a lease gives one (the deadline otherwise), and still expires at the deadline", () => {
    const { clock, pool, leases, check, cacheAndFree } = setup(8, 1);
    const a = cacheAndFree(2, 100);
    const b = cacheAndFree(2, 200);
    const c = cacheAndFree(2, 300);
    const d = cacheAndFree(2, 400);
    // Deadlines: a 9000 (back at 1000), b 3000 (back at 2500), c 6000 (no prediction: 6000), d 8000 (back at 4000).
    leases.lease({ key: "a", blockIds: a, ttlMs: 9000, expectedReturnMs: 1000 });
    leases.lease({ key: "b", blockIds: b, ttlMs: 3000, expectedReturnMs: 2500 });
    leases.lease({ key: "c", blockIds: c, ttlMs: 6000 });
    leases.lease({ key: "d", blockIds: d, ttlMs: 8000, expectedReturnMs: 4000 });
    check();
    pool.allocate(1);
    check();
    expect(leases.list().map((l) => l.key)).toEqual(["a", "b", "d"]); // c: latest return (its deadline)
    pool.allocate(2);
    check();
    expect(leases.list().map((l) => l.key)).toEqual(["a", "b"]); // d, not a (a's deadline is the latest)
    expect(leases.get("a")!.expiresAt).toBe(clock.t + 9000); // the prediction leaves the deadline alone
    clock.t += 3000;
    expect(leases.list().map((l) => l.key)).toEqual(["a"]);
    expect(leases.counters.expired).toBe(1);
    expect(() => leases.lease({ key: "e", blockIds: b, ttlMs: 1000, expectedReturnMs: -1 })).toThrow(/expectedReturnMs/);
  });

  it("counts protected blocks: evictions LRU would have taken from the lease become saved tokens on a hit", () => {
    const { pool, leases, check, cacheAndFree } = setup(8, 0.5);
    const a = cacheAndFree(3, 100);
    leases.lease({ key: "a", blockIds: a, ttlMs: 5000 });
    pool.allocate(4); // the uncached blocks: nothing cached is evicted
    check();
    expect(leases.get("a")!.protectedBlocks).toBe(0);
    const ids = pool.allocate(1)!;
    pool.cache(ids[0]!, h(900));
    pool.release(ids); // released after a's blocks
    pool.allocate(1); // evicts it: plain LRU would have evicted one of a's blocks instead
    check();
    expect(leases.get("a")!.protectedBlocks).toBe(1);
    expect(leases.end("a", "hit")).toEqual({ ended: true, savedTokens: 4 });
    expect(leases.counters).toMatchObject({ hits: 1, savedTokens: 4 });
    check();
  });

  it("returns blocks to the back of the LRU order when a lease ends", () => {
    const { pool, leases, check, cacheAndFree } = setup(4, 1);
    const a = cacheAndFree(2, 100);
    const b = cacheAndFree(2, 200);
    expect(pool.freeOrder()).toEqual([a[1], a[0], b[1], b[0]]);
    leases.lease({ key: "a", blockIds: a, ttlMs: 5000 });
    expect(pool.freeOrder()).toEqual([b[1], b[0]]);
    leases.end("a", "released");
    check();
    expect(pool.freeOrder()).toEqual([b[1], b[0], a[1], a[0]]);
  });

  it("a leased block in use stays in use; released later it is held", () => {
    const { pool, leases, check, cacheAndFree } = setup(4, 1);
    const a = cacheAndFree(2, 100);
    pool.acquire(a);
    leases.lease({ key: "a", blockIds: a, ttlMs: 5000 });
    check();
    expect(pool.numHeld).toBe(0);
    pool.release(a);
    check();
    expect(pool.numHeld).toBe(2);
    expect(() => pool.lease([pool.allocate(1)![0]!])).toThrow(/not cached/);
  });
});

describe("LeaseTable: cap, expiry, release", () => {
  it("drops the oldest leases to stay under the cap, and refuses a lease larger than the cap", () => {
    const { leases, check, cacheAndFree } = setup(8, 0.5); // cap 4 blocks
    const a = cacheAndFree(2, 100);
    const b = cacheAndFree(2, 200);
    const c = cacheAndFree(2, 300);
    leases.lease({ key: "a", blockIds: a, ttlMs: 5000 });
    leases.lease({ key: "b", blockIds: b, ttlMs: 5000 });
    expect(leases.numLeasedBlocks).toBe(4);
    leases.lease({ key: "c", blockIds: c, ttlMs: 5000 });
    check();
    expect(leases.list().map((l) => l.key)).toEqual(["b", "c"]);
    expect(leases.counters.capped).toBe(1);
    expect(leases.lease({ key: "big", blockIds: [...a, ...b, ...c], ttlMs: 5000 })).toEqual({ leased: false, blocks: 0, expiresAt: 0, reason: "cap" });
    expect(leases.lease({ key: "none", blockIds: [], ttlMs: 5000 })).toMatchObject({ leased: false, reason: "empty" });
  });

  it("with capOrder latest-return, drops the lease expected back last instead of the oldest", () => {
    const { leases, check, cacheAndFree } = setup(8, 0.5, { capOrder: "latest-return" }); // cap 4 blocks
    const a = cacheAndFree(2, 100);
    const b = cacheAndFree(2, 200);
    const c = cacheAndFree(2, 300);
    const d = cacheAndFree(2, 400);
    leases.lease({ key: "a", blockIds: a, ttlMs: 9000, expectedReturnMs: 1000 });
    leases.lease({ key: "b", blockIds: b, ttlMs: 5000 });
    leases.lease({ key: "c", blockIds: c, ttlMs: 5000 });
    check();
    expect(leases.list().map((l) => l.key)).toEqual(["a", "c"]); // b (back at 5000) went, not a (back at 1000)
    leases.lease({ key: "d", blockIds: d, ttlMs: 2000, expectedReturnMs: 7000 });
    check();
    expect(leases.list().map((l) => l.key)).toEqual(["a", "d"]); // the new lease always gets in
    expect(leases.counters.capped).toBe(2);
  });

  it("counts a block shared by two leases once against the cap", () => {
    const { pool, leases, check, cacheAndFree } = setup(8, 0.5);
    const shared = cacheAndFree(2, 100);
    const a = cacheAndFree(1, 200);
    const b = cacheAndFree(1, 300);
    leases.lease({ key: "a", blockIds: [...shared, ...a], ttlMs: 5000 });
    leases.lease({ key: "b", blockIds: [...shared, ...b], ttlMs: 5000 });
    check();
    expect(pool.numLeased).toBe(4);
    expect(leases.numActive).toBe(2);
    leases.end("a", "released");
    check();
    expect(pool.leaseCount(shared[0]!)).toBe(1);
  });

  it("expires leases at their deadline (expired unused), and a re-lease replaces the old one", () => {
    const { clock, pool, leases, check, cacheAndFree } = setup(8);
    const a = cacheAndFree(2, 100);
    expect(leases.lease({ key: "a", blockIds: a, ttlMs: 500 }).expiresAt).toBe(1500);
    leases.lease({ key: "a", blockIds: a, ttlMs: 1000 });
    expect(leases.counters.superseded).toBe(1);
    clock.t = 1999;
    expect(leases.numActive).toBe(1);
    clock.t = 2000;
    expect(leases.numActive).toBe(0);
    check();
    expect(pool.numHeld).toBe(0);
    expect(leases.counters.expired).toBe(1);
    expect(leases.end("a", "released")).toEqual({ ended: false, savedTokens: 0, endedBefore: "expired" });
  });

  it("ends a lease past its deadline before an allocation evicts anything; its blocks rejoin the LRU at the back", () => {
    const { clock, pool, leases, check, cacheAndFree } = setup(4, 1);
    const a = cacheAndFree(2, 100);
    const b = cacheAndFree(2, 200);
    leases.lease({ key: "b", blockIds: b, ttlMs: 100 });
    clock.t += 100;
    pool.allocate(1); // b expired first and went to the back, as if released now: a's tail is the victim
    check();
    expect(leases.counters.expired).toBe(1);
    expect(a.map((id) => pool.blockHash(id))).toEqual([h(100), null]);
    expect(b.map((id) => pool.blockHash(id))).toEqual([h(200), h(201)]);
  });

  it("with expiredTo front, an expired lease's blocks go first", () => {
    const { clock, pool, leases, check, cacheAndFree } = setup(4, 1, { expiredTo: "front" });
    const a = cacheAndFree(2, 100);
    const b = cacheAndFree(2, 200);
    leases.lease({ key: "b", blockIds: b, ttlMs: 100 });
    clock.t += 100;
    pool.allocate(1);
    check();
    expect(a.map((id) => pool.blockHash(id))).toEqual([h(100), h(101)]);
    expect(b.map((id) => pool.blockHash(id))).toEqual([h(200), null]);
  });

  it("sends capped leases' blocks to the back (default) or the front (droppedTo front)", () => {
    for (const droppedTo of ["back", "front"] as const) {
      const { pool, leases, check, cacheAndFree } = setup(8, 0.25, { droppedTo }); // cap 2 blocks
      const x = cacheAndFree(2, 50);
      const a = cacheAndFree(2, 100);
      const b = cacheAndFree(2, 200);
      leases.lease({ key: "a", blockIds: a, ttlMs: 5000 });
      leases.lease({ key: "b", blockIds: b, ttlMs: 5000 }); // caps a
      check();
      expect(leases.counters.capped).toBe(1);
      const order = pool.freeOrder().filter((id) => pool.blockHash(id) !== null);
      expect(order).toEqual(droppedTo === "back" ? [x[1], x[0], a[1], a[0]] : [a[1], a[0], x[1], x[0]]); // the tail first either way
    }
  });

  it("clamps the TTL to maxTtlMs and rejects a non-positive one", () => {
    const pool = new BlockPool({ numBlocks: 4, blockSize: 4 });
    const leases = new LeaseTable({ pool, now: () => 0, maxTtlMs: 100, maxLeasedFraction: 1 });
    const ids = pool.allocate(1)!;
    pool.cache(ids[0]!, h(1));
    pool.release(ids);
    expect(leases.lease({ key: "k", blockIds: ids, ttlMs: 1e9 }).expiresAt).toBe(100);
    expect(() => leases.lease({ key: "k", blockIds: ids, ttlMs: 0 })).toThrow(/ttlMs/);
  });
});

describe("LeaseTable with KvCacheManager (random operations, invariants after each)", () => {
  it("never fails an allocation because of leases, and keeps pool, manager and table consistent", () => {
    const rand = mulberry32(11);
    const clock = { t: 0 };
    const pool = new BlockPool({ numBlocks: 48, blockSize: 4 });
    const kv = new KvCacheManager({ pool, enablePrefixCache: true });
    const leases = new LeaseTable({ pool, maxLeasedFraction: 0.4, now: () => clock.t });
    const root = hashRoot({ modelId: "m", salt: "" });
    const prompts = Array.from({ length: 10 }, (_, i) => range(i * 1000, randInt(rand, 5, 40)));
    const running = new Map<number, number>();
    let nextSeq = 1;
    for (let op = 0; op < 3000; op++) {
      clock.t += randInt(rand, 0, 50);
      const r = rand();
      if (r < 0.35 && running.size < 6) {
        const p = randInt(rand, 0, prompts.length - 1);
        const seqId = nextSeq++;
        kv.startSequence(sequence({ seqId, tokenIds: prompts[p]!, root }));
        running.set(seqId, p);
        // Free blocks (leased or not) always suffice: leases never block an allocation.
        const need = blocksNeeded(kv, seqId, prompts[p]!.length - kv.numComputedTokens(seqId));
        const free = kv.numFreeBlocks;
        const ok = kv.allocateSlots(seqId, prompts[p]!.length - kv.numComputedTokens(seqId));
        expect(ok).toBe(need <= free);
        if (ok) kv.markComputed(seqId, prompts[p]!.length - kv.numComputedTokens(seqId));
        else {
          kv.freeSequence(seqId);
          running.delete(seqId);
        }
      } else if (r < 0.7 && running.size > 0) {
        const [seqId, p] = [...running][randInt(rand, 0, running.size - 1)]!;
        kv.freeSequence(seqId);
        running.delete(seqId);
        const { blockIds } = kv.findCachedPrefix({ tokenIds: prompts[p]!, root });
        if (blockIds.length > 0) leases.lease({ key: `p${p}`, blockIds, ttlMs: randInt(rand, 10, 400) });
      } else if (r < 0.85) {
        leases.end(`p${randInt(rand, 0, prompts.length - 1)}`, rand() < 0.5 ? "hit" : "released");
      } else {
        leases.expire();
      }
      kv.checkInvariants();
      leases.checkInvariants();
    }
    const c = leases.counters;
    expect(c.created).toBeGreaterThan(100);
    expect(c.expired + c.broken + c.capped + c.hits + c.released + c.superseded).toBe(c.created - leases.list().length);
  });
});
