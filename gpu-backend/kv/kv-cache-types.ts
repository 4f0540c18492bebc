import type { BlockHash } from "../../protocol/block-hash";
import type { BlockPool } from "./block-pool";

/** The types `KvCacheManager` takes and gives (re-exported from kv-cache-manager.ts). */
export interface KvCacheManagerParams {
  pool: BlockPool;
  enablePrefixCache: boolean;
}

export interface CachedPrefix {
  blockIds: number[];
  blockHashes: BlockHash[];
  /** blockIds.length * blockSize */
  numCachedTokens: number;
}

export interface KvCacheStats {
  queriedTokens: number;
  hitTokens: number;
}
