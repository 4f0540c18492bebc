import type { BlockHash } from "../../protocol/block-hash";
import type { EvictionLog } from "./eviction-log";
import type { KvEventSink } from "./kv-events";

/**
 * The second KV tier: whole blocks evicted from the pool, kept in host memory by hash, up to
 * `capacityBytes` (least recently used dropped first), and brought back into the pool when a
 * prefix lookup reaches them (`KvCacheManager`, at copy cost instead of a prefill). For the cpu
 * executor the pool is host memory too, so this tier is the pool's overflow: the bytes are kept
 * exactly (fp32), so a restored block gives the same KV as the one evicted. A GPU executor's
 * evicted blocks land here from device memory the same way.
 *
 * @example
 * const tier = new HostTier(2 ** 30);
 * tier.put(hash, bytes);          // on eviction
 * tier.take(hash);                // on a hit: the bytes, now out of the tier
 */
export class HostTier {
  private readonly blocks = new Map<BlockHash, Uint8Array>();
  private bytes = 0;
  /** `hitBlocks`: blocks brought back into the pool (counted by the KV manager). */
  readonly stats = { puts: 0, hitBlocks: 0, dropped: 0 };

  /**
   * `events` (the backend's KV event log) hears a block kept here as `offloaded` and a block
   * dropped for room as `removed`, so the pool's index knows what this tier holds. A block taken
   * back into the pool is reported by the pool (`stored`).
   */
  constructor(
    readonly capacityBytes: number,
    private readonly events?: KvEventSink,
    /** Hears a block dropped for room (`from: "host-tier"`, why it left the pool kept). */
    private readonly evictions?: EvictionLog,
  ) {}

  get numBlocks(): number {
    return this.blocks.size;
  }

  get usedBytes(): number {
    return this.bytes;
  }

  has(hash: BlockHash): boolean {
    return this.blocks.has(hash);
  }

  /**
   * Keeps an evicted block: the tier takes `block` itself (no copy), so the caller hands over a
   * buffer it no longer uses. A device pool's read fills it later, in order with the executor's
   * steps (`BlockIO`), and whatever writes it back into a pool is ordered after that read.
   */
  put(hash: BlockHash, block: Uint8Array): void {
    if (block.length > this.capacityBytes) return;
    this.remove(hash);
    while (this.bytes + block.length > this.capacityBytes) {
      const oldest = this.blocks.keys().next().value!;
      this.remove(oldest);
      this.events?.removed(oldest);
      // Why it left the pool (its lease broken, or plain LRU) still says why it is gone.
      this.evictions?.record(oldest, { atMs: Date.now(), by: this.evictions.get(oldest)?.by ?? "lru", from: "host-tier" });
      this.stats.dropped++;
    }
    this.blocks.set(hash, block);
    this.bytes += block.length;
    this.stats.puts++;
    this.events?.offloaded?.(hash);
  }

  /** The block's bytes, taken out of the tier (it is back in the pool). */
  take(hash: BlockHash): Uint8Array | undefined {
    const block = this.blocks.get(hash);
    if (block === undefined) return undefined;
    this.remove(hash);
    return block;
  }

  /** Every hash held, oldest first (what the pool's index is told the tier holds). */
  hashes(): IterableIterator<BlockHash> {
    return this.blocks.keys();
  }

  private remove(hash: BlockHash): void {
    const block = this.blocks.get(hash);
    if (block === undefined) return;
    this.blocks.delete(hash);
    this.bytes -= block.length;
  }
}
