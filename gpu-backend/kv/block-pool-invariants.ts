import type { BlockHash } from "../../protocol/block-hash";
import type { FreeBlockQueue } from "./free-block-queue";

/** What `BlockPool.checkInvariants` checks: the pool's bookkeeping, read as it is now. */
export interface PoolState {
  numBlocks: number;
  numFree: number;
  numLeased: number;
  refCounts: Int32Array;
  leaseCounts: Int32Array;
  hashes: readonly (BlockHash | null)[];
  hashToBlock: ReadonlyMap<BlockHash, number>;
  freeQueue: FreeBlockQueue;
  held: FreeBlockQueue;
}

/**
 * Throws a descriptive Error if any of the pool's bookkeeping invariants is broken (see
 * `BlockPool.checkInvariants`). O(numBlocks); for tests.
 *
 * @example checkPoolInvariants({ numBlocks, numFree, numLeased, refCounts, leaseCounts, hashes, hashToBlock, freeQueue, held })
 */
export function checkPoolInvariants(s: PoolState): void {
  s.freeQueue.checkIntegrity();
  s.held.checkIntegrity();
  let zeroRef = 0;
  let leased = 0;
  for (let id = 0; id < s.numBlocks; id++) {
    const rc = s.refCounts[id]!;
    const isHeld = s.held.has(id);
    const queued = s.freeQueue.has(id) || isHeld;
    if (rc < 0) throw new Error(`BlockPool invariant: block ${id} has negative refCount ${rc}`);
    const leases = s.leaseCounts[id]!;
    if (leases < 0) throw new Error(`BlockPool invariant: block ${id} has negative lease count ${leases}`);
    if (leases > 0) leased++;
    if (leases > 0 && s.hashes[id] === null) throw new Error(`BlockPool invariant: block ${id} is leased but not cached`);
    if (isHeld && s.freeQueue.has(id)) throw new Error(`BlockPool invariant: block ${id} is both held and in the free queue`);
    if (isHeld !== (rc === 0 && leases > 0)) throw new Error(`BlockPool invariant: block ${id} (refCount ${rc}, ${leases} leases) is ${isHeld ? "" : "not "}held`);
    if (rc > 0 && queued) throw new Error(`BlockPool invariant: block ${id} has refCount ${rc} but is in the free queue`);
    if (rc === 0) {
      zeroRef++;
      if (!queued) throw new Error(`BlockPool invariant: block ${id} has refCount 0 but is not in the free queue (leak)`);
    }
    const hash = s.hashes[id]!;
    if (hash !== null && s.hashToBlock.get(hash) !== id) {
      throw new Error(`BlockPool invariant: block ${id} has hash ${hash} but the map sends it to ${s.hashToBlock.get(hash)}`);
    }
  }
  if (s.numFree !== zeroRef) {
    throw new Error(`BlockPool invariant: free queue and held hold ${s.numFree} blocks, ${zeroRef} have refCount 0`);
  }
  if (leased !== s.numLeased) throw new Error(`BlockPool invariant: ${leased} blocks have leases, numLeased says ${s.numLeased}`);
  for (const [hash, id] of s.hashToBlock) {
    if (s.hashes[id] !== hash) {
      throw new Error(`BlockPool invariant: map sends ${hash} to block ${id}, whose hash is ${s.hashes[id]}`);
    }
  }
}
