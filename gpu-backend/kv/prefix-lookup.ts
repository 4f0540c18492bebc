import { hashBlock, type BlockHash } from "../../protocol/block-hash";
import type { BlockPool } from "./block-pool";
import type { CachedPrefix } from "./kv-cache-types";

/**
 * Chained block hashes of a token sequence and the longest run of them cached in the pool: the
 * prefix lookup `KvCacheManager` and its host-tier link share. Changes no reference counts.
 */
export class PrefixLookup {
  private readonly scratch: number[];

  /** @example const lookup = new PrefixLookup(pool, true); */
  constructor(
    private readonly pool: BlockPool,
    readonly enablePrefixCache: boolean,
  ) {
    this.scratch = new Array<number>(pool.blockSize).fill(0);
  }

  /**
   * `hashes` is a memo of the chain for these tokens; it is extended in place as blocks are hashed.
   *
   * @example const { blockIds } = lookup.longestCachedPrefix(tokenIds, root, []);
   */
  longestCachedPrefix(
    tokenIds: ArrayLike<number>,
    root: BlockHash,
    hashes: BlockHash[],
    maxBlocks = Math.max(0, Math.floor((tokenIds.length - 1) / this.pool.blockSize)),
  ): CachedPrefix {
    const blockIds: number[] = [];
    const blockHashes: BlockHash[] = [];
    if (!this.enablePrefixCache) return { blockIds, blockHashes, numCachedTokens: 0 };
    for (let b = 0; b < maxBlocks; b++) {
      const hash = this.blockHashAt(tokenIds, root, hashes, b);
      const id = this.pool.lookup(hash);
      if (id === undefined) break;
      blockIds.push(id);
      blockHashes.push(hash);
    }
    return { blockIds, blockHashes, numCachedTokens: blockIds.length * this.pool.blockSize };
  }

  /**
   * Hash of full block `b`, from the memo or computed (extending the memo up to `b`).
   *
   * @example lookup.blockHashAt(tokenIds, root, memo, 0)
   */
  blockHashAt(tokenIds: ArrayLike<number>, root: BlockHash, hashes: BlockHash[], b: number): BlockHash {
    const B = this.pool.blockSize;
    const scratch = this.scratch;
    while (hashes.length <= b) {
      const k = hashes.length;
      const parent = k === 0 ? root : hashes[k - 1]!;
      for (let i = 0; i < B; i++) scratch[i] = tokenIds[k * B + i]!;
      hashes.push(hashBlock(parent, scratch));
    }
    return hashes[b]!;
  }
}
