import { describe, expect, it } from "vitest";
import type { BlockHash } from "../../protocol/block-hash";
import { BlockPool } from "./block-pool";
import { EvictionLog } from "./eviction-log";
import { HostTier } from "./host-tier";

const h = (i: number): BlockHash => i.toString(16).padStart(32, "0");

/** Caches block `id` under hash `i` and frees it (a cached free block, evictable). */
function cachedFree(pool: BlockPool, i: number): number {
  const [id] = pool.allocate(1)!;
  expect(pool.cache(id!, h(i))).toBe(true);
  pool.release([id!]);
  return id!;
}

describe("EvictionLog", () => {
  it("records why the pool evicted a cached block: plain LRU, or LRU after its lease was broken", () => {
    const pool = new BlockPool({ numBlocks: 2, blockSize: 4 });
    const log = new EvictionLog();
    pool.setEvictionLog(log);
    const a = cachedFree(pool, 1);
    const b = cachedFree(pool, 2);
    pool.lease([b]);
    pool.unlease([b], false, "broken");
    expect(pool.allocate(2)).not.toBeNull(); // both evicted
    expect(log.get(h(1))).toMatchObject({ by: "lru", from: "pool" });
    expect(log.get(h(2))).toMatchObject({ by: "lease-broken", from: "pool" });
    expect(log.doneField(h(2)).evicted).toMatchObject({ by: "lease-broken", from: "pool" });
    expect(log.doneField(h(3))).toEqual({});
    expect(log.doneField(undefined)).toEqual({});
    expect(a).not.toBe(b);
  });

  it("a block used again after its lease ended is evicted as plain LRU; the host tier's drops keep why it left the pool", () => {
    const pool = new BlockPool({ numBlocks: 1, blockSize: 4 });
    const log = new EvictionLog();
    pool.setEvictionLog(log);
    const id = cachedFree(pool, 1);
    pool.lease([id]);
    pool.unlease([id], false, "expired");
    pool.acquire([id]);
    pool.release([id]);
    pool.allocate(1);
    expect(log.get(h(1))).toMatchObject({ by: "lru", from: "pool" });

    const tier = new HostTier(8, undefined, log);
    log.record(h(5), { atMs: Date.now(), by: "lease-capped", from: "pool" });
    tier.put(h(5), new Uint8Array(8));
    tier.put(h(6), new Uint8Array(8)); // drops h(5) for room
    expect(log.get(h(5))).toMatchObject({ by: "lease-capped", from: "host-tier" });
  });

  it("keeps the most recent `capacity` records", () => {
    const log = new EvictionLog(2);
    for (const i of [1, 2, 3]) log.record(h(i), { atMs: i, by: "lru", from: "pool" });
    expect(log.size).toBe(2);
    expect(log.get(h(1))).toBeUndefined();
    expect(log.get(h(3))).toBeDefined();
  });
});
