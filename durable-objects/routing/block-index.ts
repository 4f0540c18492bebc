import type { KvEventBatch } from "../../protocol/messages";

/**
 * The pool's block-level prefix index: which backends hold which KV blocks, learnt from the KV
 * events they publish with their heartbeats (see `KvEventLog` on the backend). Approximate and
 * bounded, in memory only (a restarted pool answers `resync` and rebuilds it from snapshots).
 *
 *   entries: Map<short block hash (16 hex), its holders: one backend slot, or a sorted array of them>
 *   tierEntries: the same for blocks a backend holds in its host tier (`offloaded` events)
 *   slots:   backend url -> slot (0, 1, ...: a free slot is reused), the batch sequence number it
 *            is at, synced or not
 *
 * - Bounded: at most `maxEntries` hashes (default `DEFAULT_MAX_INDEX_ENTRIES` = 131,072); over
 *   it, the oldest 1/64 of the cap (2,048) go at once. The Map's insertion order is the eviction
 *   order; a hash is moved to the back when a backend
 *   stores it, when a trajectory's turn notes it (`noteHeld`) and when a placement query finds
 *   it held (`leadingBlocks`), so the oldest, least used hashes go first. Evicting an entry
 *   forgets it for every backend: the index may miss blocks a backend holds (a placement then
 *   sees a shorter prefix), never the other way round except between an eviction on a backend
 *   and the heartbeat that reports it (up to one interval, 2 s).
 * - Memory: about 100 bytes per hash held by one backend (a 16-character key, its Map slot and a
 *   small integer), about 60 more when two or more hold it (an array); measured figures in
 *   docs/architecture.md (The pool and placement). Not per backend: a hash costs the same
 *   whether the index knows 8 backends or 1,000.
 * - Any number of backends is indexed (each gets a slot; a slot is freed when its backend is
 *   removed or marked down, `drop`). A placement query costs one pass over the leading hashes,
 *   each checked against the backends whose run is still going: the holders of the first hash,
 *   then fewer.
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
  private readonly entries = new Map<string, Holders>();
  /** The same for blocks held in a backend's host tier (offloaded: reusable at copy cost). */
  private readonly tierEntries = new Map<string, Holders>();
  private readonly slots = new Map<string, SlotState>();
  private readonly freeSlots: number[] = [];
  private nextSlot = 0;

  constructor(params: { maxEntries?: number } = {}) {
    this.maxEntries = params.maxEntries ?? DEFAULT_MAX_INDEX_ENTRIES;
    if (!Number.isInteger(this.maxEntries) || this.maxEntries < 1) throw new Error(`BlockIndex: maxEntries must be a positive integer, got ${this.maxEntries}`);
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
   * What the index's Maps take, estimated from measured figures (docs/architecture.md):
   * INDEX_ENTRY_BYTES per hash in either tier, HOLDERS_ARRAY_BYTES + 8 per holder for a hash
   * held by several backends, INDEX_SLOT_BYTES per backend. O(hashes): for tests, the inspector
   * and the pool-scale bench, not for the placement path.
   *
   * @example index.memoryBytes() // 15_466_496 at the default cap of 131,072 hashes, each held by one backend
   */
  memoryBytes(): number {
    let bytes = (this.entries.size + this.tierEntries.size) * INDEX_ENTRY_BYTES + this.slots.size * INDEX_SLOT_BYTES;
    for (const map of [this.entries, this.tierEntries]) for (const holders of map.values()) if (typeof holders !== "number") bytes += HOLDERS_ARRAY_BYTES + 8 * holders.length;
    return bytes;
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
   * send a snapshot next.
   *
   * @example index.apply(url, heartbeat.kvEvents) // "ok" | "resync"
   */
  apply(url: string, batch: KvEventBatch): "ok" | "resync" {
    let state = this.slots.get(url);
    if (!state) {
      state = { slot: this.freeSlots.pop() ?? this.nextSlot++, seq: 0, synced: false };
      this.slots.set(url, state);
    }
    const slot = state.slot;
    if (batch.kind === "snapshot") {
      this.clearSlot(slot);
      for (const h of batch.stored) this.add(h, slot);
      for (const h of batch.offloaded ?? []) this.add(h, slot, this.tierEntries);
    } else {
      if (!state.synced || batch.seq !== state.seq + 1) return this.unsync(state);
      for (const h of batch.removed) {
        this.remove(h, slot);
        this.remove(h, slot, this.tierEntries);
      }
      for (const h of batch.stored) {
        this.add(h, slot);
        this.remove(h, slot, this.tierEntries);
      }
      for (const h of batch.offloaded ?? []) {
        this.remove(h, slot);
        this.add(h, slot, this.tierEntries);
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
    for (const h of hashes) {
      this.add(h, state.slot);
      this.remove(h, state.slot, this.tierEntries);
    }
  }

  /**
   * Forgets everything `url` holds and frees its slot (it was removed or went down). Its next
   * batch gets a slot again and must be a snapshot.
   */
  drop(url: string): void {
    const state = this.slots.get(url);
    if (!state) return;
    this.clearSlot(state.slot);
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
    const urlOf = new Map<number, string>();
    for (const url of urls) {
      const state = this.slots.get(url);
      if (!state?.synced) continue;
      out.set(url, 0);
      urlOf.set(state.slot, url);
    }
    const useTier = tierCredit > 0 && this.tierEntries.size > 0;
    // A slot's count: the index of its first miss, less (1 - credit) per tier block before it.
    const tierBlocks = new Map<number, number>();
    const countAt = (i: number, slot: number) => i - (1 - tierCredit) * (tierBlocks.get(slot) ?? 0);
    // The runs still going: at the first hash, its holders among `urls` (the others stay at 0).
    let alive: number[] = [];
    if (hashes.length > 0) {
      const first = new Set([...slotsOf(this.entries.get(hashes[0]!)), ...(useTier ? slotsOf(this.tierEntries.get(hashes[0]!)) : [])]);
      alive = [...first].filter((slot) => urlOf.has(slot));
    }
    let i = 0;
    for (; i < hashes.length && alive.length > 0; i++) {
      const h = hashes[i]!;
      const pool = this.entries.get(h);
      const tier = useTier ? this.tierEntries.get(h) : undefined;
      const next: number[] = [];
      let inPool = false;
      let inTier = false;
      for (const slot of alive) {
        if (holds(pool, slot)) {
          next.push(slot);
          inPool = true;
        } else if (holds(tier, slot)) {
          next.push(slot);
          inTier = true;
          tierBlocks.set(slot, (tierBlocks.get(slot) ?? 0) + 1);
        } else out.set(urlOf.get(slot)!, countAt(i, slot));
      }
      alive = next;
      if (inPool) this.touch(h, this.entries);
      if (inTier) this.touch(h, this.tierEntries);
    }
    for (const slot of alive) out.set(urlOf.get(slot)!, countAt(i, slot));
    return out;
  }

  private unsync(state: SlotState): "resync" {
    if (state.synced) this.clearSlot(state.slot);
    state.synced = false;
    return "resync";
  }

  private add(h: string, slot: number, map = this.entries): void {
    const holders = map.get(h);
    if (holders !== undefined) map.delete(h);
    map.set(h, withSlot(holders, slot));
    if (map.size > this.maxEntries) this.evictOldest(map);
  }

  /**
   * Drops the oldest 1/64 of the cap in one pass. One at a time would be quadratic: V8's Map
   * keeps deleted slots until it rehashes, and every new iterator walks past them from the front.
   */
  private evictOldest(map: Map<string, Holders>): void {
    let n = map.size - this.maxEntries + Math.max(0, evictionBatch(this.maxEntries) - 1);
    for (const h of map.keys()) {
      if (n-- <= 0) break;
      map.delete(h);
    }
  }

  private remove(h: string, slot: number, map = this.entries): void {
    const holders = map.get(h);
    if (holders === undefined || !holds(holders, slot)) return;
    const rest = withoutSlot(holders, slot);
    if (rest === undefined) map.delete(h);
    else map.set(h, rest);
  }

  private touch(h: string, map: Map<string, Holders>): void {
    const holders = map.get(h)!;
    map.delete(h);
    map.set(h, holders);
  }

  /** O(entries): run on snapshots, drops and resyncs only (both tiers). */
  private clearSlot(slot: number): void {
    for (const map of [this.entries, this.tierEntries]) {
      for (const [h, holders] of map) {
        if (!holds(holders, slot)) continue;
        const rest = withoutSlot(holders, slot);
        if (rest === undefined) map.delete(h);
        else map.set(h, rest);
      }
    }
  }
}

/**
 * The backends holding a hash: one slot (the common case, a number costs nothing beyond the
 * Map's slot) or two or more, sorted.
 */
type Holders = number | readonly number[];

function holds(holders: Holders | undefined, slot: number): boolean {
  if (holders === undefined) return false;
  return typeof holders === "number" ? holders === slot : holders.includes(slot);
}

function slotsOf(holders: Holders | undefined): readonly number[] {
  return holders === undefined ? [] : typeof holders === "number" ? [holders] : holders;
}

function withSlot(holders: Holders | undefined, slot: number): Holders {
  if (holders === undefined || holders === slot) return slot;
  if (typeof holders === "number") return holders < slot ? [holders, slot] : [slot, holders];
  if (holders.includes(slot)) return holders;
  return holders.concat(slot).sort((a, b) => a - b); // concat: an array of exactly that length (push or spread leave spare capacity)
}

function withoutSlot(holders: Holders, slot: number): Holders | undefined {
  if (typeof holders === "number") return holders === slot ? undefined : holders;
  const rest = holders.filter((s) => s !== slot);
  return rest.length === 1 ? rest[0]! : rest;
}

/** Default cap on indexed hashes (2^17: ~2.1 M tokens of distinct prefixes at block size 16). */
export const DEFAULT_MAX_INDEX_ENTRIES = 131_072;

/** How many of the oldest hashes the index drops at once when it is over its cap (1/64 of it). */
export function evictionBatch(maxEntries: number): number {
  return Math.max(1, Math.floor(maxEntries / 64));
}

/**
 * Bytes one indexed hash costs with one holder (a 16-character key string, its Map slot and a
 * small integer), measured on Node 20 (V8, 64-bit): docs/architecture.md, The pool and placement.
 */
export const INDEX_ENTRY_BYTES = 118;
/** Bytes an array of n >= 2 holders adds to its hash: HOLDERS_ARRAY_BYTES + 8 n (measured: +74 for two, +90 for four). */
export const HOLDERS_ARRAY_BYTES = 56;
/** Bytes one backend's slot costs (its url key, a small object, a Map slot): an estimate. */
export const INDEX_SLOT_BYTES = 200;

interface SlotState {
  slot: number;
  /** `seq` of the last batch applied. */
  seq: number;
  /** False until a snapshot arrives (new slot, or a delta that did not follow). */
  synced: boolean;
}
