import type { BlockPool } from "./block-pool";
import type { CachedPrefix } from "./kv-cache-types";
import type { PrefixLookup } from "./prefix-lookup";
import type { KeptTail, SequenceState } from "./sequence-state";

export type { KeptTail } from "./sequence-state";

/** Most blocks kept tails may hold, as a fraction of the pool. */
export const MAX_TAIL_FRACTION = 1 / 32;

/**
 * Kept tails (the exact tail): full blocks are shared by hash, but a turn's last block is partial
 * and never cached, so the next turn would recompute up to blockSize - 1 tokens. A sequence freed
 * with `keepTailAs` set keeps that partial block instead, under the key (the engine's turn state
 * id); a sequence started with `resumeTail` naming it gets the block back, exclusively, when its
 * cached prefix ends exactly where the tail begins and the tail's tokens are its own. A tail
 * never shares its block, is never hashed, and is given back to the pool (oldest first) the
 * moment an allocation would fail without it, or when its key is dropped (`dropTail`). A sequence
 * that resumed a tail and is freed or preempted before filling the block returns it to its key.
 *
 * The kept tails of a `KvCacheManager` by key (a turn state id), oldest first: each holds one
 * reference on its block until it is taken (by the turn that continues it) or dropped (given back
 * to the pool). `attach` and `release` are the manager's two moments: a sequence starts on a
 * tail, a sequence's table is released keeping one (see kv-cache-manager.ts).
 *
 * @example
 * tails.keep("state-1", tail);
 * const t = tails.take("state-1"); // the caller now holds the block's reference
 */
export class KeptTails {
  private readonly byKey = new Map<string, KeptTail>();

  constructor(
    private readonly pool: BlockPool,
    private readonly lookup: PrefixLookup,
  ) {}

  get size(): number {
    return this.byKey.size;
  }

  /** Takes the tail out (its block reference passes to the caller). */
  take(key: string): KeptTail | undefined {
    const tail = this.byKey.get(key);
    this.byKey.delete(key);
    return tail;
  }

  /** Keeps `tail` (whose block reference the caller hands over) under `key`, dropping any tail kept there. */
  keep(key: string, tail: KeptTail): void {
    this.drop(key);
    this.byKey.set(key, tail);
  }

  /** Gives the tail's block back to the pool; false when none is kept under `key`. */
  drop(key: string): boolean {
    const tail = this.take(key);
    if (tail) this.pool.release([tail.blockId]);
    return tail !== undefined;
  }

  /** Drops the `n` oldest tails. */
  dropOldest(n: number): void {
    for (const key of [...this.byKey.keys()].slice(0, n)) this.drop(key);
  }

  entries(): IterableIterator<[string, KeptTail]> {
    return this.byKey.entries();
  }

  /**
   * Appends the sequence's kept tail (`resumeTail`) to its table when it continues the cached
   * prefix exactly; a tail that cannot be used is given back.
   *
   * @example tails.attach(seq, prefix); // after the prefix's blocks became seq's table
   */
  attach(seq: SequenceState, prefix: CachedPrefix): void {
    const key = seq.sequence.resumeTail;
    const tail = key === undefined ? undefined : this.take(key);
    if (key === undefined || tail === undefined) return;
    const { tokenIds, hashRoot } = seq.sequence;
    const start = tail.fullBlocks * this.pool.blockSize;
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
   * Releases the sequence's table, keeping its partial last block as a tail: under `keepTailAs`
   * when set, or back under the key it was resumed from while the block holds what it held then
   * (never filled and cached since).
   *
   * @example tails.release(seq); // the manager then forgets or preempts seq
   */
  release(seq: SequenceState): void {
    const B = this.pool.blockSize;
    const { keepTailAs, tokenIds, hashRoot, blockHashes } = seq.sequence;
    let kept: [string, KeptTail] | undefined;
    if (this.lookup.enablePrefixCache && keepTailAs !== undefined && seq.numComputedTokens % B !== 0) {
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
    this.keep(key, tail);
    // A tail is held ahead of every cached block in the LRU: at most MAX_TAIL_FRACTION of the
    // pool, oldest dropped first (without a cap, 64 idle agents' tails cost a 402-block pool 14%
    // more re-prefill in the leases bench).
    const cap = Math.max(1, Math.floor(this.pool.numBlocks * MAX_TAIL_FRACTION));
    if (this.size > cap) this.dropOldest(this.size - cap);
    this.pool.release(seq.blockTable.filter((id) => id !== tail.blockId));
  }
}
