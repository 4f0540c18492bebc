import type { BlockHash } from "../../protocol/block-hash";
import type { BlockPool } from "./block-pool";
import { KvBlockTransfer } from "./block-transfer";
import { KeptTails } from "./kept-tails";
import type { CachedPrefix, KvCacheManagerParams, KvCacheStats } from "./kv-cache-types";
import { checkManagerInvariants } from "./kv-invariants";
import { PrefixLookup } from "./prefix-lookup";
import type { SequenceState } from "./sequence-state";
import type { KvSequence } from "./kv-sequence";

export type { CachedPrefix, KvCacheManagerParams, KvCacheStats } from "./kv-cache-types";
export type { HostTierLink } from "./block-transfer";
export { MAX_TAIL_FRACTION } from "./kept-tails";

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
 * The manager keeps a reference to the sequence (`KvSequence`): it reads its tokens, extends its
 * block-hash memo and sets its status to "running" (start, restart) or "preempted"; it owns only
 * the block table and the computed-token count. With `enablePrefixCache` off nothing is hashed or
 * cached.
 *
 * Kept tails (the exact tail, kept-tails.ts): a sequence freed with `keepTailAs` keeps its
 * partial last block under that key; one started with `resumeTail` naming it gets it back.
 *
 * Blocks that cross the pool's edge (the host tier, pins for another backend, imported blocks) go
 * through `transfer` (block-transfer.ts), beside the manager: it shares the tails and the lookup.
 */
export class KvCacheManager {
  private readonly pool: BlockPool;
  readonly blockSize: number;
  readonly enablePrefixCache: boolean;
  private readonly sequences = new Map<number, SequenceState>();
  /** Kept tails by key, oldest first (the order they are given back under pressure). */
  private readonly tails: KeptTails;
  /** Chained hashes and the cached-prefix lookup (prefix-lookup.ts). */
  private readonly lookup: PrefixLookup;
  /** The host-tier link, pins and block import (block-transfer.ts): what moves blocks in or out uses it. */
  readonly transfer: KvBlockTransfer;
  private queriedTokens = 0;
  private hitTokens = 0;

  /**
   * @example const kv = new KvCacheManager({ pool: new BlockPool({ numBlocks: 4096, blockSize: 16 }), enablePrefixCache: true });
   */
  constructor(params: KvCacheManagerParams) {
    this.pool = params.pool;
    this.blockSize = params.pool.blockSize;
    this.enablePrefixCache = params.enablePrefixCache;
    this.lookup = new PrefixLookup(params.pool, params.enablePrefixCache);
    this.tails = new KeptTails(params.pool, this.lookup);
    this.transfer = new KvBlockTransfer(params.pool, this.tails, this.lookup);
  }

  /** Prefix-cache counters in tokens: every start/restart adds its prompt length to `queriedTokens` and its hit to `hitTokens`. */
  get stats(): KvCacheStats {
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
  startSequence(sequence: KvSequence): { numCachedTokens: number } {
    const { seqId } = sequence;
    if (this.sequences.has(seqId)) throw new Error(`KvCacheManager.startSequence: sequence ${seqId} is already registered`);
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
    if (seq.sequence.status !== "preempted") throw new Error(`KvCacheManager.restartSequence: sequence ${seqId} is not preempted`);
    seq.sequence.status = "running";
    return { numCachedTokens: this.attachCachedPrefix(seq) };
  }

  /**
   * Grows the block table to cover `numComputedTokens + numNewTokens + numLookaheadTokens` tokens.
   * Lookahead tokens are not (yet) the sequence's: a speculative draft verified in the same step,
   * whose rejected part `releaseSlots` gives back. Returns false, and changes nothing, when the
   * pool cannot supply the blocks.
   *
   * @example if (!kv.allocateSlots(1, chunkLen)) preemptLowestPriority();
   * kv.allocateSlots(1, 1, draft.length); // a decode step that verifies a draft
   */
  allocateSlots(seqId: number, numNewTokens: number, numLookaheadTokens = 0): boolean {
    const seq = this.getRunning(seqId, "allocateSlots");
    if (!Number.isInteger(numNewTokens) || numNewTokens < 0) throw new Error(`KvCacheManager.allocateSlots: bad numNewTokens ${numNewTokens}`);
    if (!Number.isInteger(numLookaheadTokens) || numLookaheadTokens < 0) throw new Error(`KvCacheManager.allocateSlots: bad numLookaheadTokens ${numLookaheadTokens}`);
    const total = seq.numComputedTokens + numNewTokens;
    if (total > seq.sequence.tokenIds.length) {
      throw new Error(`KvCacheManager.allocateSlots: sequence ${seqId} would cover ${total} tokens but has only ${seq.sequence.tokenIds.length}`);
    }
    const needed = Math.ceil((total + numLookaheadTokens) / this.blockSize) - seq.blockTable.length;
    if (needed <= 0) return true;
    const short = needed - this.pool.numFree;
    if (short > 0 && short <= this.tails.size) this.tails.dropOldest(short);
    const blockIds = this.pool.allocate(needed);
    if (blockIds === null) return false;
    for (const id of blockIds) seq.blockTable.push(id);
    return true;
  }

  /**
   * Gives back the blocks past the first `numTokens` tokens' (rollback of a rejected draft's
   * lookahead slots: they never held computed tokens, so nothing cached is lost and no hash was
   * registered for them). `numTokens` is at least the computed tokens; blocks are freed from the
   * table's end. The inverse of `allocateSlots`.
   *
   * @example kv.releaseSlots(1, seq.tokenIds.length); // after a verify step accepted part of a draft
   */
  releaseSlots(seqId: number, numTokens: number): void {
    const seq = this.getRunning(seqId, "releaseSlots");
    if (!Number.isInteger(numTokens) || numTokens < seq.numComputedTokens) {
      throw new Error(`KvCacheManager.releaseSlots: sequence ${seqId} has ${seq.numComputedTokens} computed tokens, cannot keep only ${numTokens}`);
    }
    const keep = Math.ceil(numTokens / this.blockSize);
    if (seq.blockTable.length <= keep) return;
    this.pool.release(seq.blockTable.splice(keep));
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
    if (!Number.isInteger(numNewTokens) || numNewTokens < 0) throw new Error(`KvCacheManager.markComputed: bad numNewTokens ${numNewTokens}`);
    const before = seq.numComputedTokens;
    const after = before + numNewTokens;
    if (after > seq.sequence.tokenIds.length) {
      throw new Error(`KvCacheManager.markComputed: sequence ${seqId} has ${seq.sequence.tokenIds.length} tokens, cannot mark ${after} computed`);
    }
    if (after > seq.blockTable.length * this.blockSize) {
      throw new Error(`KvCacheManager.markComputed: sequence ${seqId} has slots for ${seq.blockTable.length * this.blockSize} tokens, cannot mark ${after} computed`);
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
    this.tails.release(seq);
    this.sequences.delete(seqId);
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
    this.tails.release(seq);
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
    this.tails.attach(seq, prefix);
    this.queriedTokens += tokenIds.length;
    this.hitTokens += seq.numComputedTokens;
    return seq.numComputedTokens;
  }

  private get(seqId: number, op: string): SequenceState {
    const seq = this.sequences.get(seqId);
    if (seq === undefined) throw new Error(`KvCacheManager.${op}: unknown sequence ${seqId}`);
    return seq;
  }

  private getRunning(seqId: number, op: string): SequenceState {
    const seq = this.get(seqId, op);
    if (seq.sequence.status === "preempted") throw new Error(`KvCacheManager.${op}: sequence ${seqId} is preempted; call restartSequence first`);
    return seq;
  }
}
