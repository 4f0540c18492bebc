import type { BlockPool } from "./block-pool";
import type { KeptTails } from "./kept-tails";
import type { SequenceState } from "./sequence-state";

/** What `KvCacheManager.checkInvariants` checks against: its pool, tables, kept tails and pins. */
export interface ManagerState {
  pool: BlockPool;
  blockSize: number;
  enablePrefixCache: boolean;
  sequences: ReadonlyMap<number, SequenceState>;
  tails: KeptTails;
  pins: ReadonlyMap<number, number>;
}

/**
 * Throws if the pool's invariants or the manager's are broken (see `KvCacheManager.checkInvariants`):
 * every block's refCount equals the tables, kept tails and pins holding it. For tests.
 *
 * @example checkManagerInvariants({ pool, blockSize, enablePrefixCache, sequences, tails, pins })
 */
export function checkManagerInvariants({ pool, blockSize, enablePrefixCache, sequences, tails, pins }: ManagerState): void {
  pool.checkInvariants();
  const B = blockSize;
  const holders = new Int32Array(pool.numBlocks);
  const indexOf = new Int32Array(pool.numBlocks).fill(-1);
  const firstComputed = new Uint8Array(pool.numBlocks);
  for (const [seqId, seq] of sequences) {
    const where = `KvCacheManager invariant (sequence ${seqId})`;
    const { tokenIds, status, blockHashes } = seq.sequence;
    if (status !== "running" && status !== "preempted") throw new Error(`${where}: registered but ${status}`);
    if (seq.numComputedTokens > tokenIds.length) throw new Error(`${where}: ${seq.numComputedTokens} computed of ${tokenIds.length} tokens`);
    if (seq.numComputedTokens > seq.blockTable.length * B) throw new Error(`${where}: ${seq.numComputedTokens} computed but slots for ${seq.blockTable.length * B}`);
    if (status === "preempted" && (seq.blockTable.length > 0 || seq.numComputedTokens > 0)) throw new Error(`${where}: preempted but holds blocks or computed tokens`);
    const fullComputed = Math.floor(seq.numComputedTokens / B);
    const seen = new Set<number>();
    for (let b = 0; b < seq.blockTable.length; b++) {
      const id = seq.blockTable[b]!;
      if (seen.has(id)) throw new Error(`${where}: block ${id} appears twice in the table`);
      seen.add(id);
      holders[id]!++;
      if (holders[id]! === 1) {
        indexOf[id] = b;
        firstComputed[id] = b < fullComputed ? 1 : 0;
        continue;
      }
      if (indexOf[id] !== b) throw new Error(`${where}: shared block ${id} at table index ${b} here, ${indexOf[id]} elsewhere`);
      if (pool.blockHash(id) === null) throw new Error(`${where}: block ${id} is shared but not cached`);
      if (b >= fullComputed || firstComputed[id] === 0) throw new Error(`${where}: block ${id} is shared but is not a computed full block of every holder`);
    }
    for (let b = 0; b < fullComputed && enablePrefixCache; b++) {
      const id = seq.blockTable[b]!;
      const hash = pool.blockHash(id);
      if (hash !== null && hash !== blockHashes[b]) throw new Error(`${where}: block ${id} caches ${hash}, the sequence's chain says ${blockHashes[b]}`);
    }
  }
  for (const [id, n] of pins) {
    if (pool.blockHash(id) === null) throw new Error(`KvCacheManager invariant: pinned block ${id} is not cached`);
    holders[id]! += n;
  }
  for (const [key, tail] of tails.entries()) {
    const where = `KvCacheManager invariant (tail ${key})`;
    if (holders[tail.blockId]! > 0) throw new Error(`${where}: block ${tail.blockId} is also in a table or another tail`);
    if (pool.blockHash(tail.blockId) !== null) throw new Error(`${where}: block ${tail.blockId} is cached`);
    if (tail.tokenIds.length < 1 || tail.tokenIds.length >= B) throw new Error(`${where}: ${tail.tokenIds.length} tokens is not a partial block`);
    holders[tail.blockId]!++;
  }
  for (let id = 0; id < pool.numBlocks; id++) {
    if (pool.refCount(id) !== holders[id]) {
      throw new Error(`KvCacheManager invariant: block ${id} has refCount ${pool.refCount(id)} but ${holders[id]} tables and tails hold it`);
    }
  }
}
