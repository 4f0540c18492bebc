import type { BlockHash } from "../../protocol/block-hash";
import type { BlockPool } from "./block-pool";

/** A partial block kept for the next turn: its first `tokenIds.length` slots hold the KV of those tokens after `fullBlocks` full blocks ending in `parent`. */
export interface KeptTail {
  blockId: number;
  fullBlocks: number;
  /** Chained hash of the last full block before it (the root when `fullBlocks` is 0). */
  parent: BlockHash;
  tokenIds: number[];
}

/**
 * The kept tails of a `KVCacheManager` by key (a turn state id), oldest first: each holds one
 * reference on its block until it is taken (by the turn that continues it) or dropped (given back
 * to the pool).
 *
 * @example
 * tails.keep("state-1", tail);
 * const t = tails.take("state-1"); // the caller now holds the block's reference
 */
export class KeptTails {
  private readonly byKey = new Map<string, KeptTail>();

  constructor(private readonly pool: BlockPool) {}

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
}
