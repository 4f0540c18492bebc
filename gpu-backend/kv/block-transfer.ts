import type { BlockHash } from "../../protocol/block-hash";
import type { BlockPool } from "./block-pool";
import type { HostTier } from "./host-tier";
import type { KeptTails } from "./kept-tails";
import type { PrefixLookup } from "./prefix-lookup";

/** The host tier and how a block's bytes leave and re-enter the pool (the executor's block I/O). */
export interface HostTierLink {
  tier: HostTier;
  bytesPerBlock: number;
  read(blockId: number, out: Uint8Array): void;
  write(blockId: number, bytes: Uint8Array): void;
}

/**
 * How cached blocks cross the pool's edge, beside `KvCacheManager` (vLLM's connector idea): the
 * host tier link (evictions copied out, prefixes restored when a sequence starts), pins on blocks
 * being read out for another backend (`KvServer`), and blocks imported into the prefix cache
 * (`KvPuller`, the host tier). The manager builds it over the kept tails and prefix lookup it
 * shares (`kv.transfer`); whoever moves blocks in or out talks to it, not to the manager.
 */
export class KvBlockTransfer {
  private host: HostTierLink | null = null;
  /** References held outside any table: blocks being read out for another backend (`pinCachedPrefix`). */
  readonly pins = new Map<number, number>();

  /** @example const transfer = new KvBlockTransfer(pool, tails, lookup); */
  constructor(
    private readonly pool: BlockPool,
    private readonly tails: KeptTails,
    private readonly lookup: PrefixLookup,
  ) {}

  /** Whether a host tier is connected. */
  get hasHostTier(): boolean {
    return this.host !== null;
  }

  /**
   * Connects the host tier (null: none): every cached block the pool evicts is copied there
   * (`io.read`), and a sequence's prefix lookup brings blocks it finds there back into the pool
   * (`io.write`) before it acquires its prefix (`restoreFromHostTier`).
   *
   * @example kv.transfer.setHostTier({ tier: new HostTier(2 ** 30), bytesPerBlock, read: (id, out) => io.read(id, out), write: (id, b) => io.write(id, b) });
   */
  setHostTier(link: HostTierLink | null): void {
    this.host = link;
    if (!link) return this.pool.setEvictionSink(null);
    this.pool.setEvictionSink((blockId, hash) => {
      // A buffer per block, handed to the tier: a device pool's read fills it after this returns.
      const bytes = new Uint8Array(link.bytesPerBlock);
      link.read(blockId, bytes);
      link.tier.put(hash, bytes);
    });
  }

  /**
   * Takes a reference on the cached prefix of `tokenIds` from block `fromBlock` on, so that its
   * blocks stay put while they are read out (another backend pulls them); `unpin` gives them back.
   *
   * @example const { blockIds } = kv.transfer.pinCachedPrefix({ tokenIds, root, fromBlock: 3 }); ...; kv.transfer.unpin(blockIds);
   */
  pinCachedPrefix(params: { tokenIds: ArrayLike<number>; root: BlockHash; fromBlock: number }): { blockIds: number[]; blockHashes: BlockHash[] } {
    const prefix = this.lookup.longestCachedPrefix(params.tokenIds, params.root, [], Math.floor(params.tokenIds.length / this.pool.blockSize));
    const blockIds = prefix.blockIds.slice(params.fromBlock);
    this.pool.acquire(blockIds);
    for (const id of blockIds) this.pins.set(id, (this.pins.get(id) ?? 0) + 1);
    return { blockIds, blockHashes: prefix.blockHashes.slice(params.fromBlock) };
  }

  /** Gives back what `pinCachedPrefix` took. @example kv.transfer.unpin(blockIds) */
  unpin(blockIds: readonly number[]): void {
    for (const id of blockIds) {
      const n = this.pins.get(id);
      if (n === undefined) throw new Error(`KvBlockTransfer.unpin: block ${id} is not pinned`);
      if (n === 1) this.pins.delete(id);
      else this.pins.set(id, n - 1);
    }
    this.pool.release(blockIds);
  }

  /**
   * Adds a block computed elsewhere (pulled from another backend, or back from a slower tier) to
   * the prefix cache under `blockHash`: a free block is filled by `fill(blockId)` and cached, then
   * released to the most recently used end, where the next prefix lookup finds it. `present`: the
   * hash was cached already (nothing written); `full`: no block could be freed for it.
   *
   * @example kv.transfer.importBlock(hash, (id) => io.write(id, bytes));
   */
  importBlock(blockHash: BlockHash, fill: (blockId: number) => void): "imported" | "present" | "full" {
    if (!this.lookup.enablePrefixCache) throw new Error("KvBlockTransfer.importBlock: the prefix cache is off");
    if (this.pool.lookup(blockHash) !== undefined) return "present";
    if (this.pool.numFree === 0) this.tails.dropOldest(1);
    const ids = this.pool.allocate(1);
    if (ids === null) return "full";
    try {
      fill(ids[0]!);
      this.pool.cache(ids[0]!, blockHash);
    } finally {
      this.pool.release(ids);
    }
    return "imported";
  }

  /**
   * Brings the blocks of this prompt's chain that the host tier holds back into the pool, walking
   * from block 0 while each block is in the pool or the tier. Returns the restored block indexes.
   *
   * @example const restored = transfer.restoreFromHostTier(tokenIds, hashRoot, blockHashes);
   */
  restoreFromHostTier(tokenIds: ArrayLike<number>, root: BlockHash, hashes: BlockHash[]): number[] {
    const host = this.host;
    const restored: number[] = [];
    if (!host || !this.lookup.enablePrefixCache || host.tier.numBlocks === 0) return restored;
    const maxBlocks = Math.max(0, Math.floor((tokenIds.length - 1) / this.pool.blockSize));
    for (let b = 0; b < maxBlocks; b++) {
      const hash = this.lookup.blockHashAt(tokenIds, root, hashes, b);
      if (this.pool.lookup(hash) !== undefined) continue;
      if (!host.tier.has(hash)) break;
      // Out of the tier first: making room in the pool evicts into the tier, which may drop its oldest.
      const bytes = host.tier.take(hash)!;
      if (this.importBlock(hash, (id) => host.write(id, bytes)) !== "imported") {
        host.tier.put(hash, bytes);
        break;
      }
      host.tier.stats.hitBlocks++;
      restored.push(b);
    }
    return restored;
  }
}
