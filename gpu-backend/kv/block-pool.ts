import type { BlockHash } from "../../protocol/block-hash";
import { FreeBlockQueue } from "./free-block-queue";
import { EVICTED_BY } from "../../protocol/messages";
import type { EvictedBy, EvictionLog } from "./eviction-log";
import type { KvEventSink } from "./kv-events";
import { checkPoolInvariants } from "./block-pool-invariants";
import { blocksForBudget, type KvBudgetParams } from "./kv-budget";

export { blocksForBudget, bytesPerBlock, type KvBudgetParams } from "./kv-budget";

/**
 * The block pool owns every KV block: its reference count, its content hash (when it is a cached
 * full block), the hash -> block map of the prefix cache, and the free queue that is also the
 * eviction (LRU) order. It deals in block ids only; the KV tensors live in the model executor
 * (slot = blockId * blockSize + offset).
 *
 * Block states:
 *
 *   in use      refCount > 0, not in the free queue, hash or no hash
 *   free cached refCount = 0, in the free queue, hash in the map  (reusable by `acquire` until evicted)
 *   free        refCount = 0, in the free queue, no hash
 *
 * Eviction order (front of the free queue first):
 *   1. free blocks without a hash (pushed to the front on release: their KV is worth nothing)
 *   2. free cached blocks, least recently released first; within one released block table, the
 *      tail of the chain before its head (a later block is useless without the earlier ones).
 *
 * KV events: with a sink set (`setEventSink`), `cache` reports each hash newly entering the map
 * (`stored`) and `allocate` each hash it evicts (`removed`): exactly the changes of the set of
 * cached hashes, which a backend publishes to the edge's pool (see kv-events.ts).
 *
 * Leases (lease-table.ts): a leased free cached block is held OUT of the free queue (in `held`),
 * so `allocate` takes every unleased free block first. Only when those run out does it ask the
 * lease hooks to end leases (oldest first), which puts their blocks back in the free queue: a
 * lease never makes an allocation fail. Leased blocks still count as free (`numFree`).
 *
 * Running out of blocks is a return value (`null`); a broken invariant is a thrown Error.
 * Per-tenant separation needs nothing here: the tenant salt is inside every hash.
 */
export class BlockPool {
  readonly numBlocks: number;
  readonly blockSize: number;
  private readonly refCounts: Int32Array;
  private readonly hashes: (BlockHash | null)[];
  private readonly hashToBlock = new Map<BlockHash, number>();
  private readonly freeQueue: FreeBlockQueue;
  private numEvictions = 0;
  private events: KvEventSink | null = null;
  /** Leases per block; a free cached block with a lease sits in `held`, not in the free queue. */
  private readonly leaseCounts: Int32Array;
  private readonly held: FreeBlockQueue;
  private numLeasedBlocks = 0;
  /** When each block last entered the free queue (a counter of `release` calls), for lease accounting. */
  private readonly releaseStamps: Float64Array;
  private releaseClock = 0;
  /** How each block's last lease ended when it ended early or ran out (0: none since it was last used). */
  private readonly leaseEnds: Uint8Array;
  private evictions: EvictionLog | null = null;
  private leaseHooks: PoolLeaseHooks | null = null;
  private evictionSink: ((blockId: number, blockHash: BlockHash) => void) | null = null;

  /**
   * Creates a pool of `numBlocks` blocks of `blockSize` tokens, all free.
   *
   * @example
   * const pool = new BlockPool({ numBlocks: 1024, blockSize: 16 });
   * const pool2 = BlockPool.fromBudget({ budgetBytes: 2 ** 30, blockSize: 16, numLayers: 28, numKvHeads: 8, headDim: 128, bytesPerElement: 2 });
   */
  constructor(params: BlockPoolParams) {
    const { numBlocks, blockSize } = params;
    if (!Number.isInteger(numBlocks) || numBlocks < 1) throw new Error(`BlockPool: numBlocks must be a positive integer, got ${numBlocks}`);
    if (!Number.isInteger(blockSize) || blockSize < 1) throw new Error(`BlockPool: blockSize must be a positive integer, got ${blockSize}`);
    this.numBlocks = numBlocks;
    this.blockSize = blockSize;
    this.refCounts = new Int32Array(numBlocks);
    this.hashes = new Array<BlockHash | null>(numBlocks).fill(null);
    this.freeQueue = new FreeBlockQueue(numBlocks);
    this.leaseCounts = new Int32Array(numBlocks);
    this.held = new FreeBlockQueue(numBlocks, false);
    this.releaseStamps = new Float64Array(numBlocks);
    this.leaseEnds = new Uint8Array(numBlocks);
  }

  /**
   * A pool sized to fit a KV memory budget (see `blocksForBudget`).
   *
   * @example BlockPool.fromBudget({ budgetBytes: 512 << 20, blockSize: 16, numLayers: 2, numKvHeads: 2, headDim: 64, bytesPerElement: 4 })
   */
  static fromBudget(params: KvBudgetParams): BlockPool {
    return new BlockPool({ numBlocks: blocksForBudget(params), blockSize: params.blockSize });
  }

  /**
   * Sends every change of the set of cached hashes to `sink` (null: none), from now on.
   *
   * @example pool.setEventSink(new KvEventLog());
   */
  setEventSink(sink: KvEventSink | null): void {
    this.events = sink;
  }

  /**
   * Hears of every cached block `allocate` evicts, before its slots are handed out (its bytes are
   * still intact): the host tier copies it there (null: none).
   *
   * @example pool.setEvictionSink((id, hash) => tier.put(hash, read(id)));
   */
  setEvictionSink(sink: ((blockId: number, blockHash: BlockHash) => void) | null): void {
    this.evictionSink = sink;
  }

  /** Every hash cached now (in use or free), oldest cached first. Live: do not cache blocks while iterating. */
  cachedHashes(): IterableIterator<BlockHash> {
    return this.hashToBlock.keys();
  }

  /** Blocks with refCount 0 (free, free cached, and free cached blocks held by a lease). */
  get numFree(): number {
    return this.freeQueue.length + this.held.length;
  }

  /** Blocks that carry a hash (cached full blocks, in use or free). */
  get numCached(): number {
    return this.hashToBlock.size;
  }

  /** Counters since construction: `evictions` counts cached blocks whose hash was dropped to reuse them. */
  get stats(): BlockPoolStats {
    return { evictions: this.numEvictions };
  }

  /** Fraction of blocks in use (refCount > 0), in [0, 1]. @example pool.usage() // 0.25 */
  usage(): number {
    return (this.numBlocks - this.numFree) / this.numBlocks;
  }

  /**
   * Takes `n` blocks from the front of the free queue with refCount 1. A cached block taken this
   * way is evicted: its hash leaves the map. Returns `null`, changing nothing, when fewer than `n`
   * blocks are free.
   *
   * @example const blockIds = pool.allocate(3); if (blockIds === null) preemptSomething();
   */
  allocate(n: number): number[] | null {
    if (!Number.isInteger(n) || n < 0) throw new Error(`BlockPool.allocate: bad count ${n}`);
    if (this.held.length > 0) this.leaseHooks?.expire();
    if (n > this.numFree) return null;
    // Unleased free blocks first; then end leases, oldest first, until enough are unleased.
    while (this.freeQueue.length < n) {
      if (!this.leaseHooks?.reclaim()) throw new Error(`BlockPool.allocate: ${this.held.length} blocks held by leases but no lease could be ended`);
    }
    const out = new Array<number>(n);
    for (let i = 0; i < n; i++) {
      const id = this.freeQueue.popFront()!;
      const hash = this.hashes[id]!;
      if (hash !== null) {
        // The event first: the eviction sink (the host tier) may report the block offloaded.
        this.events?.removed(hash);
        this.evictions?.record(hash, { atMs: Date.now(), by: LEASE_ENDS[this.leaseEnds[id]!]!, from: "pool" });
        this.evictionSink?.(id, hash);
        this.hashToBlock.delete(hash);
        this.hashes[id] = null;
        this.numEvictions++;
        this.leaseHooks?.evicted(this.releaseStamps[id]!);
      }
      this.refCounts[id] = 1;
      this.leaseEnds[id] = 0;
      out[i] = id;
    }
    return out;
  }

  /** The cached block holding `blockHash` (free or in use), if any. @example pool.lookup(h) // 17 | undefined */
  lookup(blockHash: BlockHash): number | undefined {
    return this.hashToBlock.get(blockHash);
  }

  /**
   * Adds a reference to each block. A free cached block leaves the free queue (it is "touched":
   * when released again it goes to the back). Acquiring a free block without a hash is an error:
   * its contents are garbage.
   *
   * @example pool.acquire(prefix.blockIds)
   */
  acquire(blockIds: readonly number[]): void {
    for (const id of blockIds) {
      this.assertId(id, "acquire");
      if (this.refCounts[id] === 0 && this.hashes[id] === null) {
        throw new Error(`BlockPool.acquire: block ${id} is free and uncached; only in-use or cached blocks can be acquired`);
      }
    }
    for (const id of blockIds) {
      if (this.refCounts[id] === 0) (this.held.has(id) ? this.held : this.freeQueue).remove(id);
      this.refCounts[id]!++;
      this.leaseEnds[id] = 0; // used again: an eviction from now on is plain LRU
    }
  }

  /**
   * Drops one reference from each block. Blocks reaching refCount 0 enter the free queue, visited
   * in REVERSE order of `blockIds`: cached ones go to the back, so for a table [b0, b1, b2] the
   * tail b2 is evicted before b1 before b0; uncached ones go to the front (evicted before any
   * cached block).
   *
   * @example pool.release(sequenceBlockTable)
   */
  release(blockIds: readonly number[]): void {
    for (const id of blockIds) this.assertId(id, "release");
    for (let i = 0; i < blockIds.length; i++) {
      const id = blockIds[i]!;
      if (this.refCounts[id]! <= 0) {
        for (let j = 0; j < i; j++) this.refCounts[blockIds[j]!]!++;
        throw new Error(`BlockPool.release: block ${id} has refCount ${this.refCounts[id]} (double free?)`);
      }
      this.refCounts[id]!--;
    }
    const stamp = ++this.releaseClock;
    for (let i = blockIds.length - 1; i >= 0; i--) {
      const id = blockIds[i]!;
      if (this.refCounts[id] !== 0 || this.freeQueue.has(id) || this.held.has(id)) continue;
      this.releaseStamps[id] = stamp;
      if (this.hashes[id] === null) this.freeQueue.pushFront(id);
      else if (this.leaseCounts[id]! > 0) this.held.pushBack(id);
      else this.freeQueue.pushBack(id);
    }
  }

  /** Records each eviction of a cached block, with why (`EvictionLog`; null: none). */
  setEvictionLog(log: EvictionLog | null): void {
    this.evictions = log;
  }

  /**
   * Sets the lease table's hooks (null: none). `reclaim` is called by `allocate` when only leased
   * blocks are left; `evicted` after each eviction of a cached block, with its release stamp.
   *
   * @example pool.setLeaseHooks({ reclaim: () => table.breakOldest(), evicted: (stamp) => table.noteEviction(stamp) });
   */
  setLeaseHooks(hooks: PoolLeaseHooks | null): void {
    this.leaseHooks = hooks;
  }

  /**
   * Adds a lease on each block (cached blocks only, in use or free). A free one leaves the free
   * queue for `held`: it is evicted only after every unleased free block. Listing a block twice
   * leases it twice.
   *
   * @example pool.lease(prefix.blockIds)
   */
  lease(blockIds: readonly number[]): void {
    for (const id of blockIds) {
      this.assertId(id, "lease");
      if (this.hashes[id] === null) throw new Error(`BlockPool.lease: block ${id} is not cached; only cached blocks can be leased`);
    }
    for (const id of blockIds) {
      this.leaseEnds[id] = 0;
      if (this.leaseCounts[id]!++ > 0) continue;
      this.numLeasedBlocks++;
      if (this.refCounts[id] === 0) {
        this.freeQueue.remove(id);
        this.held.pushBack(id);
      }
    }
  }

  /**
   * Drops one lease from each block. A free block left without leases goes back to the free queue:
   * at the back (as if released now), or with `toFront` at the front (evicted next); either way
   * the tail of a chain is evicted before its head.
   *
   * @example pool.unlease(lease.blockIds)
   */
  unlease(blockIds: readonly number[], toFront = false, ended?: "broken" | "capped" | "expired"): void {
    for (const id of blockIds) {
      this.assertId(id, "unlease");
      if (this.leaseCounts[id]! <= 0) throw new Error(`BlockPool.unlease: block ${id} is not leased`);
    }
    const code = ended ? LEASE_ENDS.indexOf(`lease-${ended}`) : 0;
    for (const id of blockIds) {
      if (--this.leaseCounts[id]! === 0) this.numLeasedBlocks--;
      if (code > 0) this.leaseEnds[id] = code;
    }
    for (let k = 0; k < blockIds.length; k++) {
      const id = blockIds[toFront ? k : blockIds.length - 1 - k]!;
      if (this.leaseCounts[id] === 0 && this.held.has(id)) {
        this.held.remove(id);
        if (toFront) this.freeQueue.pushFront(id);
        else this.freeQueue.pushBack(id);
      }
    }
  }

  /** Leases on one block. @example pool.leaseCount(3) // 1 */
  leaseCount(blockId: number): number {
    this.assertId(blockId, "leaseCount");
    return this.leaseCounts[blockId]!;
  }

  /** Distinct blocks with at least one lease (in use or free). */
  get numLeased(): number {
    return this.numLeasedBlocks;
  }

  /** Free blocks held out of the free queue by a lease. */
  get numHeld(): number {
    return this.held.length;
  }

  /** When a block last became free (a counter of `release` calls; 0: never). @example pool.releaseStamp(3) */
  releaseStamp(blockId: number): number {
    this.assertId(blockId, "releaseStamp");
    return this.releaseStamps[blockId]!;
  }

  /**
   * Marks a FULL, in-use block as holding the content named by `blockHash`. Returns false, and
   * leaves both the map and the block unchanged, when another block already holds that hash (the
   * duplicate stays uncached and is evicted first once free). Caching a block again under the same
   * hash is a no-op returning true; under a different hash it is an error.
   *
   * @example if (!pool.cache(blockId, h)) duplicates++;
   */
  cache(blockId: number, blockHash: BlockHash): boolean {
    this.assertId(blockId, "cache");
    if (this.refCounts[blockId]! <= 0) throw new Error(`BlockPool.cache: block ${blockId} is not in use`);
    const current = this.hashes[blockId]!;
    if (current !== null) {
      if (current === blockHash) return true;
      throw new Error(`BlockPool.cache: block ${blockId} already holds hash ${current}, cannot re-cache as ${blockHash}`);
    }
    const holder = this.hashToBlock.get(blockHash);
    if (holder !== undefined) return false;
    this.hashToBlock.set(blockHash, blockId);
    this.hashes[blockId] = blockHash;
    this.events?.stored(blockHash);
    return true;
  }

  /** Reference count of one block. @example pool.refCount(3) // 2 */
  refCount(blockId: number): number {
    this.assertId(blockId, "refCount");
    return this.refCounts[blockId]!;
  }

  /** Hash of one block, or null when it is not a cached full block. @example pool.blockHash(3) */
  blockHash(blockId: number): BlockHash | null {
    this.assertId(blockId, "blockHash");
    return this.hashes[blockId]!;
  }

  /** Unleased free block ids in eviction order, front first. Leased free blocks are held out of the queue and not listed (allocates; for tests and debugging). */
  freeOrder(): number[] {
    return this.freeQueue.toArray();
  }

  /**
   * Throws a descriptive Error if any bookkeeping invariant is broken. O(numBlocks); tests call it
   * after every operation.
   *
   * @example pool.checkInvariants()
   */
  checkInvariants(): void {
    const { numBlocks, numFree, refCounts, leaseCounts, hashes, hashToBlock, freeQueue, held } = this;
    checkPoolInvariants({ numBlocks, numFree, numLeased: this.numLeasedBlocks, refCounts, leaseCounts, hashes, hashToBlock, freeQueue, held });
  }

  private assertId(blockId: number, op: string): void {
    if (!Number.isInteger(blockId) || blockId < 0 || blockId >= this.numBlocks) {
      throw new Error(`BlockPool.${op}: block id ${blockId} out of range [0, ${this.numBlocks})`);
    }
  }
}

export interface BlockPoolParams {
  numBlocks: number;
  /** Tokens per block. */
  blockSize: number;
}

export interface BlockPoolStats {
  evictions: number;
}

/** What a lease table (lease-table.ts) does for the pool. */
export interface PoolLeaseHooks {
  /** Ends the leases past their deadline (called before blocks are taken while any are held). */
  expire(): number;
  /** Only leased blocks are free: end at least one lease (oldest first); false when none is left. */
  reclaim(): boolean;
  /** A cached block was evicted; `releaseStamp` says when it had become free. */
  evicted(releaseStamp: number): void;
}

/** `leaseEnds` codes are indexes into EVICTED_BY: 0 (`lru`) is a block whose lease did not end early or run out. */
const LEASE_ENDS: readonly EvictedBy[] = EVICTED_BY;
