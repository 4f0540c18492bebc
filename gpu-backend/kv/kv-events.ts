import { shortBlockHash, type BlockHash, type ShortBlockHash } from "../../protocol/block-hash";
import { MAX_KV_EVENTS_PER_BATCH, type KvEventBatch } from "../../protocol/messages";

/** Receives the pool's prefix-cache changes (`BlockPool.setEventSink`). */
export interface KvEventSink {
  /** A full block became content-addressed under `blockHash` (reusable by other sequences). */
  stored(blockHash: BlockHash): void;
  /** The block cached under `blockHash` was evicted (reused for other tokens); the hash is gone. */
  removed(blockHash: BlockHash): void;
  /** The block evicted from the pool under `blockHash` is kept in the host tier (after its `removed`). */
  offloaded?(blockHash: BlockHash): void;
}

/** A hash's last event since the previous batch. */
type Pending = "stored" | "removed" | "offloaded";

export interface KvEventLogParams {
  /** Distinct hashes held between two batches before the log gives up and asks for a snapshot. Default 16,384. */
  maxPending?: number;
  /** Most hashes a snapshot carries. Default `MAX_KV_EVENTS_PER_BATCH` (65,536). */
  maxSnapshot?: number;
}

export interface KvEventLogStats {
  /** Batches taken (deltas and snapshots). */
  batches: number;
  snapshots: number;
  /** Times the pending set overflowed (each turned the next batch into a snapshot). */
  overflows: number;
}

/**
 * A small bounded log of a backend's prefix-cache events, drained once per heartbeat.
 *
 * Events are kept as a map short hash -> last event (stored, removed, offloaded), so a block
 * stored and evicted between two heartbeats costs one entry and the pool sees only its final
 * state (events on different hashes commute; only each hash's last one matters). When more than
 * `maxPending` distinct hashes pile up (heartbeats failing, a burst of evictions) the log drops
 * them and flags a resync: the next batch is a snapshot of every hash cached at that moment.
 * A failed publish (`requestResync`) and a pool that answered `resync` do the same, so a batch
 * lost in flight never leaves the pool's index silently wrong for long.
 *
 * Memory: at most `maxPending` map entries (a short hash and a boolean, ~60-90 bytes each in V8:
 * at most ~1.5 MiB at the default).
 *
 * @example
 * const log = new KvEventLog();
 * pool.setEventSink(log);
 * const batch = log.take(() => pool.cachedHashes()); // { seq: 1, kind: "snapshot", ... } first
 */
export class KvEventLog implements KvEventSink {
  readonly maxPending: number;
  readonly maxSnapshot: number;
  private pending = new Map<ShortBlockHash, Pending>();
  private resync = true;
  private seq = 0;
  private readonly counters: KvEventLogStats = { batches: 0, snapshots: 0, overflows: 0 };

  constructor(params: KvEventLogParams = {}) {
    this.maxPending = params.maxPending ?? 16_384;
    this.maxSnapshot = params.maxSnapshot ?? MAX_KV_EVENTS_PER_BATCH;
    for (const [name, v] of Object.entries({ maxPending: this.maxPending, maxSnapshot: this.maxSnapshot })) {
      if (!Number.isInteger(v) || v < 1 || v > MAX_KV_EVENTS_PER_BATCH) throw new Error(`KvEventLog: ${name} must be an integer in [1, ${MAX_KV_EVENTS_PER_BATCH}], got ${v}`);
    }
  }

  stored(blockHash: BlockHash): void {
    this.note(blockHash, "stored");
  }

  removed(blockHash: BlockHash): void {
    this.note(blockHash, "removed");
  }

  offloaded(blockHash: BlockHash): void {
    this.note(blockHash, "offloaded");
  }

  /** The next batch will be a snapshot (the pool lost track, or the last publish failed). */
  requestResync(): void {
    this.resync = true;
    this.pending.clear();
  }

  /** Whether the next batch is a snapshot. */
  get needsResync(): boolean {
    return this.resync;
  }

  /** Distinct hashes waiting for the next delta. */
  get numPending(): number {
    return this.pending.size;
  }

  get stats(): KvEventLogStats {
    return { ...this.counters };
  }

  /**
   * Drains the log into the next batch: a snapshot of `cached()` and, after them, of
   * `offloaded()` (the host tier's; `maxSnapshot` hashes in all) after a resync, else the delta
   * since the previous batch. The first batch of a log is always a snapshot, so a restarted
   * backend replaces whatever the pool knew of its predecessor.
   *
   * @example const batch = log.take(() => kv.cachedBlockHashes(), () => tier.hashes());
   */
  take(cached: () => Iterable<BlockHash>, offloaded?: () => Iterable<BlockHash>): KvEventBatch {
    this.seq++;
    this.counters.batches++;
    if (this.resync) {
      this.resync = false;
      this.pending.clear();
      this.counters.snapshots++;
      const stored: ShortBlockHash[] = [];
      for (const h of cached()) {
        if (stored.length >= this.maxSnapshot) break;
        stored.push(shortBlockHash(h));
      }
      const tier: ShortBlockHash[] = [];
      for (const h of offloaded?.() ?? []) {
        if (stored.length + tier.length >= this.maxSnapshot) break;
        tier.push(shortBlockHash(h));
      }
      return { seq: this.seq, kind: "snapshot", stored, removed: [], ...(tier.length > 0 ? { offloaded: tier } : {}) };
    }
    const out: Record<Pending, ShortBlockHash[]> = { stored: [], removed: [], offloaded: [] };
    for (const [h, last] of this.pending) out[last].push(h);
    this.pending = new Map();
    return { seq: this.seq, kind: "delta", stored: out.stored, removed: out.removed, ...(out.offloaded.length > 0 ? { offloaded: out.offloaded } : {}) };
  }

  private note(blockHash: BlockHash, last: Pending): void {
    if (this.resync) return; // the next batch is a snapshot anyway
    const h = shortBlockHash(blockHash);
    if (!this.pending.has(h) && this.pending.size >= this.maxPending) {
      this.counters.overflows++;
      this.requestResync();
      return;
    }
    this.pending.set(h, last);
  }
}
