import type { BlockHash } from "../../protocol/block-hash";
import type { BlockPool } from "./block-pool";
import { KvBlockTransfer, type HostTierLink } from "./host-tier-link";
import { KeptTails, type KeptTail } from "./kept-tails";
import type { CachedPrefix, KVCacheManagerParams, KVCacheStats } from "./kv-cache-types";
import { checkManagerInvariants } from "./kv-invariants";
import { PrefixLookup } from "./prefix-lookup";
import type { SequenceState } from "./sequence-state";
import type { KVSequence } from "./kv-sequence";

export type { CachedPrefix, KVCacheManagerParams, KVCacheStats } from "./kv-cache-types";
export type { HostTierLink } from "./host-tier-link";

/**
 * Per-sequence block tables over a `BlockPool`, with exact prefix reuse by chained block hashes.
 * The scheduler and the engine talk to this class, never to the pool.
 *
 * Life of a sequence (one trajectory turn):
 *
 *   startSequence ──> [allocateSlots ──> engine writes KV ──> markComputed]* ──> freeSequence
 *        │                 │ false: pool short, nothing changed; preempt someone and retry
 *        │                 └─ the sequence's owner appends tokens between steps (sampled token)
 *        └─ prefix hit: the cached blocks are acquired, numComputedTokens starts past them
 *   preempt ──> (blocks released; status "preempted") ──> restartSequence ──> as after startSequence
 *
 * The manager keeps a reference to the sequence (`KVSequence`): it reads its tokens, extends its
 * block-hash memo and sets its status to "running" (start, restart) or "preempted"; it owns only
 * the block table and the computed-token count. With `enablePrefixCache` off nothing is hashed or
 * cached.
 *
 * Kept tails (the exact tail): full blocks are shared by hash, but a turn's last block is partial
 * and never cached, so the next turn would recompute up to blockSize - 1 tokens. A sequence freed
 * with `keepTailAs` set keeps that partial block instead, under the key (the engine's turn state
 * id); a sequence started with `resumeTail` naming it gets the block back, exclusively, when its
 * cached prefix ends exactly where the tail begins and the tail's tokens are its own. A tail
 * never shares its block, is never hashed, and is given back to the pool (oldest first) the
 * moment an allocation would fail without it, or when its key is dropped (`dropTail`). A sequence
 * that resumed a tail and is freed or preempted before filling the block returns it to its key.
 */
/** Most blocks kept tails may hold, as a fraction of the pool. */
export const MAX_TAIL_FRACTION = 1 / 32;

export class KVCacheManager {
  private readonly pool: BlockPool;
  readonly blockSize: number;
  readonly enablePrefixCache: boolean;
  private readonly sequences = new Map<number, SequenceState>();
  /** Kept tails by key, oldest first (the order they are given back under pressure). */
  private readonly tails: KeptTails;
  /** Chained hashes and the cached-prefix lookup (prefix-lookup.ts). */
  private readonly lookup: PrefixLookup;
  /** The host-tier link, pins and block import (host-tier-link.ts). */
  private readonly transfer: KvBlockTransfer;
  private queriedTokens = 0;
  private hitTokens = 0;

  /**
   * @example const kv = new KVCacheManager({ pool: new BlockPool({ numBlocks: 4096, blockSize: 16 }), enablePrefixCache: true });
   */
  constructor(params: KVCacheManagerParams) {
    this.pool = params.pool;
    this.blockSize = params.pool.blockSize;
    this.enablePrefixCache = params.enablePrefixCache;
    this.tails = new KeptTails(params.pool);
    this.lookup = new PrefixLookup(params.pool, params.enablePrefixCache);
    this.transfer = new KvBlockTransfer(params.pool, this.tails, this.lookup);
  }

  /** Prefix-cache counters in tokens: every start/restart adds its prompt length to `queriedTokens` and its hit to `hitTokens`. */
  get stats(): KVCacheStats {
    return { queriedTokens: this.queriedTokens, hitTokens: this.hitTokens };
  }

  /** Number of registered sequences (running or preempted). */
  get numSequences(): number {
    return this.sequences.size;
  }

  /** Free blocks in the pool (free and free cached). */
  get numFreeBlocks(): number {
    return this.pool.numFree;
  }

  /** Every hash cached in the pool now (what a KV-event snapshot publishes). */
  cachedBlockHashes(): IterableIterator<BlockHash> {
    return this.pool.cachedHashes();
  }

  /** Kept tails (one partial block each). */
  get numTails(): number {
    return this.tails.size;
  }

  /** Fraction of the pool in use. */
  usage(): number {
    return this.pool.usage();
  }

  /**
   * The longest run of full blocks, from the first, whose chained hashes are all cached in the
   * pool. At least one token is always left to compute (the model needs logits for the last
   * prompt token), so `numCachedTokens <= floor((tokenIds.length - 1) / blockSize) * blockSize`.
   * Changes no reference counts; with prefix caching off it returns no blocks. `memo` (the
   * sequence's `blockHashes`) is extended in place, so its start hashes no block again.
   * @example
   * const { numCachedTokens } = kv.findCachedPrefix({ tokenIds, root: hashRoot({ modelId, salt }) });
   */
  findCachedPrefix(params: { tokenIds: ArrayLike<number>; root: BlockHash; memo?: BlockHash[] }): CachedPrefix {
    return this.lookup.longestCachedPrefix(params.tokenIds, params.root, params.memo ?? []);
  }

  /**
   * Registers a sequence (status "running") and takes a reference on its cached prefix blocks,
   * which become the start of its block table. Its computed tokens start at the cached ones.
   *
   * @example const { numCachedTokens } = kv.startSequence(seq);
   */
  startSequence(sequence: KVSequence): { numCachedTokens: number } {
    const { seqId } = sequence;
    if (this.sequences.has(seqId)) throw new Error(`KVCacheManager.startSequence: sequence ${seqId} is already registered`);
    const seq: SequenceState = { sequence, blockTable: [], numComputedTokens: 0 };
    this.sequences.set(seqId, seq);
    sequence.status = "running";
    return { numCachedTokens: this.attachCachedPrefix(seq) };
  }

  /**
   * Re-attaches a preempted sequence: looks up the cached prefix of its current tokens (prompt
   * plus anything generated) and acquires it, exactly like `startSequence`.
   *
   * @example kv.preempt(7); ...; const { numCachedTokens } = kv.restartSequence(7);
   */
  restartSequence(seqId: number): { numCachedTokens: number } {
    const seq = this.get(seqId, "restartSequence");
    if (seq.sequence.status !== "preempted") throw new Error(`KVCacheManager.restartSequence: sequence ${seqId} is not preempted`);
    seq.sequence.status = "running";
    return { numCachedTokens: this.attachCachedPrefix(seq) };
  }

  /**
   * Grows the block table to cover `numComputedTokens + numNewTokens` tokens. Returns false, and
   * changes nothing, when the pool cannot supply the blocks.
   *
   * @example if (!kv.allocateSlots(1, chunkLen)) preemptLowestPriority();
   */
  allocateSlots(seqId: number, numNewTokens: number): boolean {
    const seq = this.getRunning(seqId, "allocateSlots");
    if (!Number.isInteger(numNewTokens) || numNewTokens < 0) throw new Error(`KVCacheManager.allocateSlots: bad numNewTokens ${numNewTokens}`);
    const total = seq.numComputedTokens + numNewTokens;
    if (total > seq.sequence.tokenIds.length) {
      throw new Error(`KVCacheManager.allocateSlots: sequence ${seqId} would cover ${total} tokens but has only ${seq.sequence.tokenIds.length}`);
    }
    const needed = Math.ceil(total / this.blockSize) - seq.blockTable.length;
    if (needed <= 0) return true;
    const short = needed - this.pool.numFree;
    if (short > 0 && short <= this.tails.size) this.tails.dropOldest(short);
    const blockIds = this.pool.allocate(needed);
    if (blockIds === null) return false;
    for (const id of blockIds) seq.blockTable.push(id);
    return true;
  }

  /**
   * Records that the engine wrote the KV of the next `numNewTokens` tokens. Every block that
   * became full is hashed (chained from the previous block's hash, or the root) and offered to the
   * pool's prefix cache, whether it was filled by prefill or by decode.
   *
   * @example kv.markComputed(1, chunkLen);
   */
  markComputed(seqId: number, numNewTokens: number): void {
    const seq = this.getRunning(seqId, "markComputed");
    if (!Number.isInteger(numNewTokens) || numNewTokens < 0) throw new Error(`KVCacheManager.markComputed: bad numNewTokens ${numNewTokens}`);
    const before = seq.numComputedTokens;
    const after = before + numNewTokens;
    if (after > seq.sequence.tokenIds.length) {
      throw new Error(`KVCacheManager.markComputed: sequence ${seqId} has ${seq.sequence.tokenIds.length} tokens, cannot mark ${after} computed`);
    }
    if (after > seq.blockTable.length * this.blockSize) {
      throw new Error(`KVCacheManager.markComputed: sequence ${seqId} has slots for ${seq.blockTable.length * this.blockSize} tokens, cannot mark ${after} computed`);
    }
    seq.numComputedTokens = after;
    if (!this.enablePrefixCache) return;
    const firstNewFull = Math.floor(before / this.blockSize);
    const fullAfter = Math.floor(after / this.blockSize);
    for (let b = firstNewFull; b < fullAfter; b++) {
      this.pool.cache(seq.blockTable[b]!, this.lookup.blockHashAt(seq.sequence.tokenIds, seq.sequence.hashRoot, seq.sequence.blockHashes, b));
    }
  }

  /**
   * Releases the sequence's blocks (tail first into the LRU order) and forgets it. Its cached full
   * blocks stay reusable until evicted.
   *
   * @example kv.freeSequence(1);
   */
  freeSequence(seqId: number): void {
    const seq = this.get(seqId, "freeSequence");
    this.releaseTable(seq);
    this.sequences.delete(seqId);
  }

  /**
   * Connects the host tier (null: none): every cached block the pool evicts is copied there
   * (`io.read`), and a sequence's prefix lookup brings blocks it finds there back into the pool
   * (`io.write`) before it acquires its prefix. See host-tier-link.ts.
   *
   * @example kv.setHostTier({ tier: new HostTier(2 ** 30), bytesPerBlock, read: (id, out) => io.read(id, out), write: (id, b) => io.write(id, b) });
   */
  setHostTier(link: HostTierLink | null): void {
    this.transfer.setHostTier(link);
  }

  /**
   * Takes a reference on the cached prefix of `tokenIds` from block `fromBlock` on, so that its
   * blocks stay put while they are read out (another backend pulls them); `unpin` gives them back.
   *
   * @example const { blockIds } = kv.pinCachedPrefix({ tokenIds, root, fromBlock: 3 }); ...; kv.unpin(blockIds);
   */
  pinCachedPrefix(params: { tokenIds: ArrayLike<number>; root: BlockHash; fromBlock: number }): { blockIds: number[]; blockHashes: BlockHash[] } {
    return this.transfer.pinCachedPrefix(params);
  }

  /** Gives back what `pinCachedPrefix` took. */
  unpin(blockIds: readonly number[]): void {
    this.transfer.unpin(blockIds);
  }

  /**
   * Adds a block computed elsewhere (pulled from another backend, or back from a slower tier) to
   * the prefix cache under `blockHash` (see `KvBlockTransfer.importBlock`). `present`: the hash
   * was cached already (nothing written); `full`: no block could be freed for it.
   *
   * @example kv.importBlock(hash, (id) => io.write(id, bytes));
   */
  importBlock(blockHash: BlockHash, fill: (blockId: number) => void): "imported" | "present" | "full" {
    return this.transfer.importBlock(blockHash, fill);
  }

  /**
   * Gives a kept tail's block back to the pool (its turn state is gone). False when none is kept
   * under `key`.
   *
   * @example kv.dropTail(stateId)
   */
  dropTail(key: string): boolean {
    return this.tails.drop(key);
  }

  /**
   * Releases the sequence's blocks but keeps it registered (status "preempted"; its tokens and
   * hashes are the sequence's own); numComputedTokens returns to 0. Call `restartSequence` before
   * scheduling it again.
   *
   * @example kv.preempt(7);
   */
  preempt(seqId: number): void {
    const seq = this.getRunning(seqId, "preempt");
    this.releaseTable(seq);
    seq.blockTable = [];
    seq.numComputedTokens = 0;
    seq.sequence.status = "preempted";
  }

  /** Whether a sequence is registered. */
  has(seqId: number): boolean {
    return this.sequences.has(seqId);
  }

  /** Whether a sequence is preempted (waiting for `restartSequence`). */
  isPreempted(seqId: number): boolean {
    return this.get(seqId, "isPreempted").sequence.status === "preempted";
  }

  /** Tokens whose KV is in the pool. @example kv.numComputedTokens(1) */
  numComputedTokens(seqId: number): number {
    return this.get(seqId, "numComputedTokens").numComputedTokens;
  }

  /** The sequence's tokens (live; do not mutate). @example kv.tokenIds(1).length */
  tokenIds(seqId: number): readonly number[] {
    return this.get(seqId, "tokenIds").sequence.tokenIds;
  }

  /** The sequence's block table (live; do not mutate), what PagedAttention reads. @example kv.blockTable(1) */
  blockTable(seqId: number): readonly number[] {
    return this.get(seqId, "blockTable").blockTable;
  }

  /**
   * Chained hashes of the sequence's computed full blocks (a copy; empty with prefix caching off):
   * the chain a backend reports as its cached prefix.
   *
   * @example kv.blockHashes(1).at(-1)
   */
  blockHashes(seqId: number): BlockHash[] {
    const seq = this.get(seqId, "blockHashes");
    if (!this.enablePrefixCache) return [];
    return seq.sequence.blockHashes.slice(0, Math.floor(seq.numComputedTokens / this.blockSize));
  }

  /**
   * Throws if the pool's invariants or the manager's are broken: a table shorter than its
   * computed tokens, a registered sequence neither running nor preempted, a preempted sequence
   * holding blocks, a block twice in one table, a pool
   * refCount that differs from the number of tables holding the block (this manager is assumed to
   * be the pool's only client), or a block shared by two tables that is not a cached, computed,
   * full block at the same index in both. O(numBlocks + total table length); for tests.
   *
   * @example kv.checkInvariants()
   */
  checkInvariants(): void {
    checkManagerInvariants({ pool: this.pool, blockSize: this.blockSize, enablePrefixCache: this.enablePrefixCache, sequences: this.sequences, tails: this.tails, pins: this.transfer.pins });
  }

  private attachCachedPrefix(seq: SequenceState): number {
    const { tokenIds, hashRoot, blockHashes } = seq.sequence;
    const restored = this.transfer.restoreFromHostTier(tokenIds, hashRoot, blockHashes);
    const prefix = this.lookup.longestCachedPrefix(tokenIds, hashRoot, blockHashes);
    if (this.transfer.hasHostTier) seq.sequence.hostTierTokens = restored.filter((b) => b < prefix.blockIds.length).length * this.blockSize;
    this.pool.acquire(prefix.blockIds);
    seq.blockTable = prefix.blockIds;
    seq.numComputedTokens = prefix.numCachedTokens;
    this.attachTail(seq, prefix);
    this.queriedTokens += tokenIds.length;
    this.hitTokens += seq.numComputedTokens;
    return seq.numComputedTokens;
  }

  /** Appends the sequence's kept tail to its table when it continues the cached prefix exactly; a tail that cannot be used is given back. */
  private attachTail(seq: SequenceState, prefix: CachedPrefix): void {
    const key = seq.sequence.resumeTail;
    const tail = key === undefined ? undefined : this.tails.take(key);
    if (key === undefined || tail === undefined) return;
    const { tokenIds, hashRoot } = seq.sequence;
    const start = tail.fullBlocks * this.blockSize;
    const fits =
      prefix.blockIds.length === tail.fullBlocks &&
      (tail.fullBlocks === 0 ? hashRoot : prefix.blockHashes[tail.fullBlocks - 1]) === tail.parent &&
      tokenIds.length > start + tail.tokenIds.length && // a token is left to compute (the model needs its logits)
      tail.tokenIds.every((t, i) => tokenIds[start + i] === t);
    if (!fits) {
      this.pool.release([tail.blockId]);
      return;
    }
    seq.blockTable.push(tail.blockId);
    seq.numComputedTokens = start + tail.tokenIds.length;
    seq.resumed = { key, tail };
  }

  /**
   * Releases the table, keeping its partial last block as a tail: under `keepTailAs` when set, or
   * back under the key it was resumed from while the block holds what it held then (never filled
   * and cached since).
   */
  private releaseTable(seq: SequenceState): void {
    const B = this.blockSize;
    const { keepTailAs, tokenIds, hashRoot, blockHashes } = seq.sequence;
    let kept: [string, KeptTail] | undefined;
    if (this.enablePrefixCache && keepTailAs !== undefined && seq.numComputedTokens % B !== 0) {
      const fullBlocks = Math.floor(seq.numComputedTokens / B);
      const parent = fullBlocks === 0 ? hashRoot : this.lookup.blockHashAt(tokenIds, hashRoot, blockHashes, fullBlocks - 1);
      kept = [keepTailAs, { blockId: seq.blockTable[fullBlocks]!, fullBlocks, parent, tokenIds: tokenIds.slice(fullBlocks * B, seq.numComputedTokens) }];
    } else if (seq.resumed !== undefined && seq.blockTable[seq.resumed.tail.fullBlocks] === seq.resumed.tail.blockId) {
      kept = [seq.resumed.key, seq.resumed.tail];
    }
    seq.resumed = undefined;
    if (kept !== undefined && this.pool.blockHash(kept[1].blockId) !== null) kept = undefined;
    if (kept === undefined) {
      this.pool.release(seq.blockTable);
      return;
    }
    const [key, tail] = kept;
    this.tails.keep(key, tail);
    // A tail is held ahead of every cached block in the LRU: at most MAX_TAIL_FRACTION of the
    // pool, oldest dropped first (without a cap, 64 idle agents' tails cost a 402-block pool 14%
    // more re-prefill in the leases bench).
    const cap = Math.max(1, Math.floor(this.pool.numBlocks * MAX_TAIL_FRACTION));
    if (this.tails.size > cap) this.tails.dropOldest(this.tails.size - cap);
    this.pool.release(seq.blockTable.filter((id) => id !== tail.blockId));
  }

  private get(seqId: number, op: string): SequenceState {
    const seq = this.sequences.get(seqId);
    if (seq === undefined) throw new Error(`KVCacheManager.${op}: unknown sequence ${seqId}`);
    return seq;
  }

  private getRunning(seqId: number, op: string): SequenceState {
    const seq = this.get(seqId, op);
    if (seq.sequence.status === "preempted") throw new Error(`KVCacheManager.${op}: sequence ${seqId} is preempted; call restartSequence first`);
    return seq;
  }
}
