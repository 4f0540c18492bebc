import type { BlockHash } from "../../protocol/block-hash";
import type { BlockEviction } from "../../protocol/messages";

/** Why a cached block left: plain LRU, or LRU after its lease ended early (broken, capped) or ran out. */
export type EvictedBy = BlockEviction["by"];

/** One eviction: when, why, and from which tier it left the backend. */
export interface EvictionRecord {
  /** Epoch ms. */
  atMs: number;
  by: EvictedBy;
  /** `pool`: evicted with no host tier to keep it (or too big for it); `host-tier`: dropped from the tier for room. */
  from: BlockEviction["from"];
}

/**
 * The backend's recent evictions by block hash, so a turn whose cached prefix ends at a block
 * that was once cached can say when that block went, why and from where (the done frame's
 * `evicted`; the edge's cache-miss detail). Bounded: the `capacity` most recent (default 16,384,
 * about 2 MiB), the oldest forgotten first. A block evicted into the host tier is recorded twice:
 * when it leaves the pool, and when the tier drops it (`from: "host-tier"`); while the tier holds
 * it a lookup restores it, so only the second can explain a miss.
 *
 * @example
 * const log = new EvictionLog();
 * log.record(hash, { atMs: Date.now(), by: "lru", from: "pool" });
 * log.get(hash); // { atMs: ..., by: "lru", from: "pool" }
 */
export class EvictionLog {
  private readonly records = new Map<BlockHash, EvictionRecord>();

  constructor(readonly capacity = 16_384) {}

  record(hash: BlockHash, r: EvictionRecord): void {
    this.records.delete(hash);
    this.records.set(hash, r);
    if (this.records.size > this.capacity) this.records.delete(this.records.keys().next().value!);
  }

  get(hash: BlockHash): EvictionRecord | undefined {
    return this.records.get(hash);
  }

  /** The done frame's `evicted` for a turn whose first missing block is `hash` (none: `{}`). */
  doneField(hash: BlockHash | undefined): { evicted?: BlockEviction } {
    const r = hash === undefined ? undefined : this.records.get(hash);
    return r ? { evicted: { agoMs: Math.max(0, Math.round(Date.now() - r.atMs)), by: r.by, from: r.from } } : {};
  }

  get size(): number {
    return this.records.size;
  }
}
