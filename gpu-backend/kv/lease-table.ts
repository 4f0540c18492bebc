import type { BlockPool, PoolLeaseHooks } from "./block-pool";

/**
 * Tool-pause leases: while an agent waits on a tool, the edge asks the backend to hold the blocks
 * of the trajectory's latest state for a predicted time. Leased free blocks are evicted only after
 * every unleased one (the pool keeps them out of its free queue, see block-pool.ts).
 *
 * Rules, with their defaults (measured: docs/benchmarks.md, Leases):
 * - `maxLeasedFraction` (0.75): leases hold at most this fraction of the pool's blocks (distinct
 *   blocks, in use or free). A new lease that would pass it ends the oldest leases first
 *   (`capped`; `capOrder` "latest-return", a study option, ends the one expected back last); a
 *   lease larger than the cap alone is refused.
 * - Admission is never blocked: when the pool needs a block and only leased ones are free, a
 *   lease is ended (`broken`) and its blocks rejoin the LRU order: by default (`breakOrder`
 *   "latest-deadline") the one due last, i.e. the agent predicted to come back last (its
 *   `expectedReturnMs` after leasing when the lease gave one, else its deadline); "oldest"
 *   breaks the oldest.
 * - A lease ends at its deadline (`expired`, checked lazily on every call and by `expire()`),
 *   when a turn on its state arrives (`hit`), when the edge releases it (`released`), or when a
 *   new lease on the same key replaces it (`superseded`). `maxTtlMs` (10 min) bounds any TTL.
 * - Blocks leaving a lease re-enter the free queue at the back, as if released then. For an
 *   expired lease (`expiredTo`) and a capped or broken one (`droppedTo`) "front" (evicted next)
 *   is the alternative; it measured worse than plain LRU.
 *
 * Saved tokens (`counters.savedTokens`): each eviction of a cached block that became free AFTER a
 * lease's blocks did (so plain LRU would have evicted a leased block instead) marks one block of
 * the oldest such lease as protected (at most its size). A `hit` adds protected blocks x block
 * size: the cached tokens that turn reused only because of its lease.
 *
 * @example
 * const leases = new LeaseTable({ pool });
 * leases.lease({ key: stateId, blockIds, ttlMs: 30_000 }); // { leased: true, blocks: 12, expiresAt }
 * leases.end(stateId, "hit");                               // the next turn arrived
 */
export class LeaseTable implements PoolLeaseHooks {
  readonly maxLeasedBlocks: number;
  readonly maxTtlMs: number;
  readonly counters: LeaseCounters = { created: 0, refused: 0, hits: 0, savedTokens: 0, expired: 0, released: 0, broken: 0, capped: 0, superseded: 0 };
  private readonly pool: BlockPool;
  private readonly now: () => number;
  private readonly expiredToFront: boolean;
  private readonly droppedToFront: boolean;
  private readonly breakLatestReturn: boolean;
  private readonly capLatestReturn: boolean;
  /** Active leases, oldest first (Map keeps insertion order). */
  private readonly leases = new Map<string, Lease>();
  /** How recently ended leases ended (bounded), so a late release can say whether a turn used it. */
  private readonly recent = new Map<string, LeaseEnd>();
  /** The earliest deadline of the active leases (Infinity: none), so `expire` is O(1) when none is due. */
  private nextDeadline = Infinity;

  constructor(params: LeaseTableParams) {
    const fraction = params.maxLeasedFraction ?? 0.75;
    if (!(fraction >= 0 && fraction <= 1)) throw new Error(`LeaseTable: maxLeasedFraction must be in [0, 1], got ${fraction}`);
    this.pool = params.pool;
    this.now = params.now ?? Date.now;
    this.expiredToFront = params.expiredTo === "front";
    this.droppedToFront = params.droppedTo === "front";
    this.breakLatestReturn = (params.breakOrder ?? "latest-deadline") === "latest-deadline";
    this.capLatestReturn = params.capOrder === "latest-return";
    this.maxTtlMs = params.maxTtlMs ?? 600_000;
    this.maxLeasedBlocks = Math.floor(fraction * params.pool.numBlocks);
    this.pool.setLeaseHooks(this);
  }

  /** Active leases (after ending the expired ones). */
  get numActive(): number {
    this.expire();
    return this.leases.size;
  }

  /** Distinct blocks under a lease (in use or free). */
  get numLeasedBlocks(): number {
    this.expire();
    return this.pool.numLeased;
  }

  /**
   * Leases `blockIds` (cached blocks of the pool) under `key` for `ttlMs` (clamped to
   * `maxTtlMs`); replaces an active lease of the same key. Refused (`leased: false`) when there
   * are no blocks or they alone exceed the cap.
   *
   * @example const r = leases.lease({ key: "state-1", blockIds: [3, 4, 9], ttlMs: 20_000 });
   */
  lease(params: { key: string; blockIds: readonly number[]; ttlMs: number; expectedReturnMs?: number }): LeaseResult {
    const { key } = params;
    if (!(params.ttlMs > 0)) throw new Error(`LeaseTable.lease: ttlMs must be > 0, got ${params.ttlMs}`);
    if (params.expectedReturnMs !== undefined && !(params.expectedReturnMs >= 0)) throw new Error(`LeaseTable.lease: expectedReturnMs must be >= 0, got ${params.expectedReturnMs}`);
    this.expire();
    if (this.leases.has(key)) this.endLease(key, "superseded");
    const blockIds = [...new Set(params.blockIds)];
    if (blockIds.length === 0 || blockIds.length > this.maxLeasedBlocks) {
      this.counters.refused++;
      return { leased: false, blocks: 0, expiresAt: 0, reason: blockIds.length === 0 ? "empty" : "cap" };
    }
    while (this.pool.numLeased + this.newBlocks(blockIds) > this.maxLeasedBlocks) this.endLease(this.capLatestReturn ? this.latestReturn()! : this.leases.keys().next().value!, "capped");
    this.pool.lease(blockIds);
    let stamp = 0;
    for (const id of blockIds) stamp = Math.max(stamp, this.pool.releaseStamp(id));
    const now = this.now();
    const expiresAt = now + Math.min(params.ttlMs, this.maxTtlMs);
    const returnAt = params.expectedReturnMs === undefined ? expiresAt : now + params.expectedReturnMs;
    this.leases.set(key, { blockIds, expiresAt, returnAt, stamp, protectedBlocks: 0 });
    this.nextDeadline = Math.min(this.nextDeadline, expiresAt);
    this.counters.created++;
    return { leased: true, blocks: blockIds.length, expiresAt };
  }

  /**
   * Ends the lease of `key` for `how`; a `hit` adds its protected tokens to `savedTokens`.
   * Returns whether a lease was active, and how the last lease of `key` ended otherwise.
   *
   * @example leases.end(stateId, "released") // { ended: true, savedTokens: 0 }
   */
  end(key: string, how: Exclude<LeaseEnd, "broken" | "capped" | "superseded">): { ended: boolean; savedTokens: number; endedBefore?: LeaseEnd } {
    this.expire();
    if (!this.leases.has(key)) {
      const before = this.recent.get(key);
      return { ended: false, savedTokens: 0, ...(before ? { endedBefore: before } : {}) };
    }
    return { ended: true, savedTokens: this.endLease(key, how) };
  }

  /** The active lease of `key`, if any. */
  get(key: string): { blocks: number; expiresAt: number; returnAt: number; protectedBlocks: number } | undefined {
    this.expire();
    const l = this.leases.get(key);
    return l && { blocks: l.blockIds.length, expiresAt: l.expiresAt, returnAt: l.returnAt, protectedBlocks: l.protectedBlocks };
  }

  /** Active leases, oldest first (for debugging and tests). */
  list(): { key: string; blocks: number; expiresAt: number; protectedBlocks: number }[] {
    this.expire();
    return [...this.leases].map(([key, l]) => ({ key, blocks: l.blockIds.length, expiresAt: l.expiresAt, protectedBlocks: l.protectedBlocks }));
  }

  /** Ends every lease past its deadline; returns how many. Cheap when none is due. */
  expire(): number {
    const now = this.now();
    if (now < this.nextDeadline) return 0;
    let n = 0;
    for (const [key, l] of this.leases) {
      if (l.expiresAt > now) continue;
      this.endLease(key, "expired");
      n++;
    }
    return n;
  }

  /** Pool hook: only leased blocks are free. Ends expired leases, else the one due last (or the oldest, per `breakOrder`). */
  reclaim(): boolean {
    if (this.expire() > 0) return true;
    const oldest = this.leases.keys().next();
    if (oldest.done) return false;
    this.endLease(this.breakLatestReturn ? this.latestReturn()! : oldest.value, "broken");
    return true;
  }

  /** The active lease whose agent is expected back last (`returnAt`: the deadline unless the lease gave `expectedReturnMs`). */
  private latestReturn(): string | undefined {
    let victim: string | undefined;
    let latest = -Infinity;
    for (const [key, l] of this.leases) {
      if (l.returnAt > latest) {
        latest = l.returnAt;
        victim = key;
      }
    }
    return victim;
  }

  /** Pool hook: a cached block that became free at `releaseStamp` was evicted. */
  evicted(releaseStamp: number): void {
    let target: Lease | undefined;
    for (const l of this.leases.values()) {
      if (l.stamp < releaseStamp && l.protectedBlocks < l.blockIds.length && (!target || l.stamp < target.stamp)) target = l;
    }
    if (target) target.protectedBlocks++;
  }

  /** Throws if a lease and the pool's lease counts disagree, or the cap is passed. For tests. */
  checkInvariants(): void {
    const counts = new Map<number, number>();
    for (const [key, l] of this.leases) {
      if (new Set(l.blockIds).size !== l.blockIds.length) throw new Error(`LeaseTable invariant: lease ${key} lists a block twice`);
      if (l.protectedBlocks > l.blockIds.length) throw new Error(`LeaseTable invariant: lease ${key} protects ${l.protectedBlocks} of ${l.blockIds.length} blocks`);
      for (const id of l.blockIds) counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    for (let id = 0; id < this.pool.numBlocks; id++) {
      if (this.pool.leaseCount(id) !== (counts.get(id) ?? 0)) {
        throw new Error(`LeaseTable invariant: block ${id} has ${this.pool.leaseCount(id)} leases in the pool, ${counts.get(id) ?? 0} here`);
      }
    }
    for (const [key, l] of this.leases) if (l.expiresAt < this.nextDeadline) throw new Error(`LeaseTable invariant: lease ${key} is due at ${l.expiresAt}, before the next deadline ${this.nextDeadline}`);
    if (this.pool.numLeased > this.maxLeasedBlocks) throw new Error(`LeaseTable invariant: ${this.pool.numLeased} leased blocks over the cap of ${this.maxLeasedBlocks}`);
  }

  private endLease(key: string, how: LeaseEnd): number {
    const l = this.leases.get(key)!;
    this.leases.delete(key);
    this.pool.unlease(l.blockIds, how === "expired" ? this.expiredToFront : (how === "capped" || how === "broken") && this.droppedToFront, how === "expired" || how === "capped" || how === "broken" ? how : undefined);
    if (l.expiresAt <= this.nextDeadline) {
      this.nextDeadline = Infinity;
      for (const other of this.leases.values()) this.nextDeadline = Math.min(this.nextDeadline, other.expiresAt);
    }
    this.recent.delete(key);
    this.recent.set(key, how);
    if (this.recent.size > RECENT_ENDS) this.recent.delete(this.recent.keys().next().value!);
    let saved = 0;
    if (how === "hit") {
      saved = l.protectedBlocks * this.pool.blockSize;
      this.counters.hits++;
      this.counters.savedTokens += saved;
    } else if (how === "expired") this.counters.expired++;
    else if (how === "released") this.counters.released++;
    else if (how === "broken") this.counters.broken++;
    else if (how === "capped") this.counters.capped++;
    else this.counters.superseded++;
    return saved;
  }

  private newBlocks(blockIds: readonly number[]): number {
    let n = 0;
    for (const id of blockIds) if (this.pool.leaseCount(id) === 0) n++;
    return n;
  }
}

const RECENT_ENDS = 4096;

/** How a lease ended. */
export type LeaseEnd = "hit" | "released" | "expired" | "broken" | "capped" | "superseded";

export interface LeaseTableParams {
  pool: BlockPool;
  /** Most blocks leases may hold, as a fraction of the pool. Default 0.75. */
  maxLeasedFraction?: number;
  /** Longest TTL granted. Default 600000 (10 min). */
  maxTtlMs?: number;
  /** Clock in milliseconds. Default `Date.now`. */
  now?: () => number;
  /** Where the blocks of an expired lease go in the LRU order. Default "back". */
  expiredTo?: "front" | "back";
  /** Where the blocks of a capped or broken lease go in the LRU order. Default "back". */
  droppedTo?: "front" | "back";
  /** Which lease the pool breaks when only leased blocks are left. Default "latest-deadline". */
  breakOrder?: "oldest" | "latest-deadline";
  /**
   * Which leases a new lease over the cap ends. Default "oldest" (the rule);
   * "latest-return" ends the one expected back last, as breaking does (a study option, see
   * docs/benchmarks.md, Leases).
   */
  capOrder?: "oldest" | "latest-return";
}

export interface LeaseResult {
  leased: boolean;
  /** Blocks held (0 when refused). */
  blocks: number;
  /** Deadline on the table's clock (0 when refused). */
  expiresAt: number;
  /** Why it was refused: no cached blocks, or more blocks than the cap. */
  reason?: "empty" | "cap";
}

/** Totals since construction. `savedTokens`: see the class comment. */
export interface LeaseCounters {
  created: number;
  refused: number;
  hits: number;
  savedTokens: number;
  expired: number;
  released: number;
  broken: number;
  capped: number;
  superseded: number;
}

interface Lease {
  blockIds: number[];
  expiresAt: number;
  /** When its agent is expected back (`expectedReturnMs` after leasing; the deadline when not given): the break order's key. */
  returnAt: number;
  /** The latest release stamp of its blocks when leased. */
  stamp: number;
  protectedBlocks: number;
}
