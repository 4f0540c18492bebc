import type { KvEventBatch } from "../../protocol/messages";

/**
 * The pool's block-level prefix index: which backends hold which KV blocks, learnt from the KV
 * events they publish with their heartbeats (see `KvEventLog` on the backend). Approximate and
 * bounded, in memory only (a restarted pool answers `resync` and rebuilds it from snapshots).
 *
 *   entries: Map<short block hash (16 hex), bitmask of backend slots>
 *   tierEntries: the same for blocks a backend holds in its host tier (`offloaded` events)
 *   slots:   backend url -> slot 0..31, the batch sequence number it is at, synced or not
 *
 * - Bounded: at most `maxEntries` hashes (default `DEFAULT_MAX_INDEX_ENTRIES` = 131,072); over
 *   it, the oldest 1/64 of the cap (2,048) go at once. The Map's insertion order is the eviction
 *   order; a hash is moved to the back when a backend
 *   stores it, when a trajectory's turn notes it (`noteHeld`) and when a placement query finds
 *   it held (`leadingBlocks`), so the oldest, least used hashes go first. Evicting an entry
 *   forgets it for every backend: the index may miss blocks a backend holds (a placement then
 *   sees a shorter prefix), never the other way round except between an eviction on a backend
 *   and the heartbeat that reports it (up to one interval, 2 s).
 * - Memory: tens of bytes per entry (a 16-character key and its Map slot); the measured figure
 *   for the cap is in docs/architecture.md (The pool and placement).
 * - At most `MAX_INDEX_BACKENDS` (32, the bits of a mask) backends are indexed at once; a slot
 *   is freed when its backend is removed or marked down (`drop`). Backends beyond that are not
 *   indexed, and routing treats them like static backends (text-level prefix index only).
 * - A backend's batches apply in order: a `delta` whose `seq` does not follow the last applied
 *   one (the pool restarted, a heartbeat was lost, the backend is new here) is refused with
 *   `resync`, and its next batch is a `snapshot`, which replaces all it held.
 *
 * @example
 * const index = new BlockIndex();
 * index.apply("http://b0", { seq: 1, kind: "snapshot", stored: ["0123456789abcdef"], removed: [] }); // "ok"
 * index.leadingBlocks(["0123456789abcdef", "fedcba9876543210"], ["http://b0"]); // Map { "http://b0" => 1 }
 */
export class BlockIndex {
  readonly maxEntries: number;
  private readonly entries = new Map<string, number>();
  /** The same for blocks held in a backend's host tier (offloaded: reusable at copy cost). */
  private readonly tierEntries = new Map<string, number>();
  private readonly slots = new Map<string, SlotState>();
  private readonly freeSlots: number[] = [];

  constructor(params: { maxEntries?: number } = {}) {
    this.maxEntries = params.maxEntries ?? DEFAULT_MAX_INDEX_ENTRIES;
    if (!Number.isInteger(this.maxEntries) || this.maxEntries < 1) throw new Error(`BlockIndex: maxEntries must be a positive integer, got ${this.maxEntries}`);
    for (let s = MAX_INDEX_BACKENDS - 1; s >= 0; s--) this.freeSlots.push(s);
  }

  /** Hashes indexed now (each counts once, however many backends hold it). */
  get size(): number {
    return this.entries.size;
  }

  /** Hashes indexed as held in some backend's host tier. */
  get tierSize(): number {
    return this.tierEntries.size;
  }

  /**
   * What the index's Maps take, estimated: INDEX_ENTRY_BYTES per hash in either tier (the figure
   * measured once evictions churn the Map; docs/architecture.md), plus its slots (small).
   *
   * @example index.memoryBytes() // 11_534_336 at the default cap of 131,072 hashes
   */
  memoryBytes(): number {
    return (this.entries.size + this.tierEntries.size) * INDEX_ENTRY_BYTES + this.slots.size * INDEX_SLOT_BYTES;
  }

  /** Whether `url`'s blocks are indexed: it has a slot and its last snapshot and deltas applied. */
  isIndexed(url: string): boolean {
    return this.slots.get(url)?.synced === true;
  }

  /** Urls of the backends with a slot (indexed or waiting for a snapshot). */
  backends(): string[] {
    return [...this.slots.keys()];
  }

  /**
   * Applies one backend's batch of KV events. `resync`: it was not applied; the backend must
   * send a snapshot next. A backend that gets no slot (all 32 taken) is answered `ok` and not
   * indexed.
   *
   * @example index.apply(url, heartbeat.kvEvents) // "ok" | "resync"
   */
  apply(url: string, batch: KvEventBatch): "ok" | "resync" {
    let state = this.slots.get(url);
    if (!state) {
      const slot = this.freeSlots.pop();
      if (slot === undefined) return "ok";
      state = { slot, seq: 0, synced: false };
      this.slots.set(url, state);
    }
    const bit = 1 << state.slot;
    if (batch.kind === "snapshot") {
      this.clearBit(bit);
      for (const h of batch.stored) this.add(h, bit);
      for (const h of batch.offloaded ?? []) this.add(h, bit, this.tierEntries);
    } else {
      if (!state.synced || batch.seq !== state.seq + 1) return this.unsync(state);
      for (const h of batch.removed) {
        this.remove(h, bit);
        this.remove(h, bit, this.tierEntries);
      }
      for (const h of batch.stored) {
        this.add(h, bit);
        this.remove(h, bit, this.tierEntries);
      }
      for (const h of batch.offloaded ?? []) {
        this.remove(h, bit);
        this.add(h, bit, this.tierEntries);
      }
    }
    state.seq = batch.seq;
    state.synced = true;
    return "ok";
  }

  /**
   * Records that `url` holds these blocks now (a turn it just served computed or reused them).
   * Ignored unless the backend is indexed: its events will say the rest.
   *
   * @example index.noteHeld(backendUrl, done.promptBlockHashes)
   */
  noteHeld(url: string, hashes: readonly string[]): void {
    const state = this.slots.get(url);
    if (!state?.synced) return;
    const bit = 1 << state.slot;
    for (const h of hashes) {
      this.add(h, bit);
      this.remove(h, bit, this.tierEntries);
    }
  }

  /**
   * Forgets everything `url` holds and frees its slot (it was removed or went down). Its next
   * batch gets a new slot and must be a snapshot.
   */
  drop(url: string): void {
    const state = this.slots.get(url);
    if (!state) return;
    this.clearBit(1 << state.slot);
    this.slots.delete(url);
    this.freeSlots.push(state.slot);
  }

  /**
   * For each of `urls` that is indexed: how many LEADING hashes of `hashes` it holds (counting
   * stops at its first miss). Urls not indexed are absent from the answer. Hashes found held move
   * to the back of the eviction order.
   *
   * `tierCredit` (0..1, default 0): a block a backend holds in its host tier continues its run and
   * counts that much (it comes back at copy cost, not free); 0 counts the pool's blocks only (what
   * a pull can be served from).
   *
   * @example index.leadingBlocks(trajectoryHashes, ["http://b0", "http://b1"]) // Map { "http://b0" => 12, "http://b1" => 0 }
   */
  leadingBlocks(hashes: readonly string[], urls: readonly string[], tierCredit = 0): Map<string, number> {
    const out = new Map<string, number>();
    const bySlot = new Map<number, string>();
    let alive = 0;
    for (const url of urls) {
      const state = this.slots.get(url);
      if (!state?.synced) continue;
      out.set(url, 0);
      bySlot.set(state.slot, url);
      alive |= 1 << state.slot;
    }
    const useTier = tierCredit > 0 && this.tierEntries.size > 0;
    // A slot's count: the index of its first miss, less (1 - credit) per tier block before it.
    // Per slot work happens only where a slot's run ends or goes through a tier block.
    const tierBlocks = new Map<number, number>();
    const close = (i: number, slots: number) => {
      for (const [slot, url] of bySlot) if (slots & (1 << slot)) out.set(url, i - (1 - tierCredit) * (tierBlocks.get(slot) ?? 0));
    };
    let i = 0;
    for (; i < hashes.length && alive !== 0; i++) {
      const h = hashes[i]!;
      const pool = this.entries.get(h) ?? 0;
      const tier = useTier ? (this.tierEntries.get(h) ?? 0) : 0;
      close(i, alive & ~(pool | tier));
      alive &= pool | tier;
      const tierOnly = alive & tier & ~pool;
      if (tierOnly !== 0) for (const slot of bySlot.keys()) if (tierOnly & (1 << slot)) tierBlocks.set(slot, (tierBlocks.get(slot) ?? 0) + 1);
      if (alive & pool) this.touch(h, pool);
      if (alive & tier) this.touch(h, tier, this.tierEntries);
    }
    close(i, alive);
    return out;
  }

  private unsync(state: SlotState): "resync" {
    if (state.synced) this.clearBit(1 << state.slot);
    state.synced = false;
    return "resync";
  }

  private add(h: string, bit: number, map = this.entries): void {
    const bits = map.get(h);
    if (bits !== undefined) map.delete(h);
    map.set(h, (bits ?? 0) | bit);
    if (map.size > this.maxEntries) this.evictOldest(map);
  }

  /**
   * Drops the oldest 1/64 of the cap in one pass. One at a time would be quadratic: V8's Map
   * keeps deleted slots until it rehashes, and every new iterator walks past them from the front.
   */
  private evictOldest(map: Map<string, number>): void {
    let n = map.size - this.maxEntries + Math.max(0, evictionBatch(this.maxEntries) - 1);
    for (const h of map.keys()) {
      if (n-- <= 0) break;
      map.delete(h);
    }
  }

  private remove(h: string, bit: number, map = this.entries): void {
    const bits = map.get(h);
    if (bits === undefined) return;
    const rest = bits & ~bit;
    if (rest === 0) map.delete(h);
    else map.set(h, rest);
  }

  private touch(h: string, bits: number, map = this.entries): void {
    map.delete(h);
    map.set(h, bits);
  }

  /** O(entries): run on snapshots, drops and resyncs only (both tiers). */
  private clearBit(bit: number): void {
    for (const map of [this.entries, this.tierEntries]) {
      for (const [h, bits] of map) {
        if ((bits & bit) === 0) continue;
        const rest = bits & ~bit;
        if (rest === 0) map.delete(h);
        else map.set(h, rest);
      }
    }
  }
}

/** Default cap on indexed hashes (2^17: ~2.1 M tokens of distinct prefixes at block size 16). */
export const DEFAULT_MAX_INDEX_ENTRIES = 131_072;

/** How many of the oldest hashes the index drops at once when it is over its cap (1/64 of it). */
export function evictionBatch(maxEntries: number): number {
  return Math.max(1, Math.floor(maxEntries / 64));
}

/**
 * Bytes one indexed hash costs (a 16-character string and its Map slot), as measured on Node 20
 * (V8, 64-bit) once evictions churn the Map (~60 before): docs/architecture.md, The pool and placement.
 */
export const INDEX_ENTRY_BYTES = 88;
/** Bytes one backend's slot costs (its url key, a small object, a Map slot): an estimate. */
export const INDEX_SLOT_BYTES = 200;

/** Backends indexed at once: one bit each in an entry's mask. */
export const MAX_INDEX_BACKENDS = 32;

interface SlotState {
  slot: number;
  /** `seq` of the last batch applied. */
  seq: number;
  /** False until a snapshot arrives (new slot, or a delta that did not follow). */
  synced: boolean;
}
