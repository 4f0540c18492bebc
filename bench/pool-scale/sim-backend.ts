import { MAX_KV_EVENTS_PER_BATCH, type Heartbeat } from "../../protocol/messages";
import type { ExactIndex } from "./exact-index";

/**
 * A simulated GPU backend as the pool sees it: an LRU prefix cache of `capacityBlocks` short
 * block hashes, the KV events it has to report since its last beat (as gpu-backend's
 * `KvEventLog` keeps them: each hash's last event), and its heartbeats. It tells the bench's
 * oracle (`ExactIndex`) every store and eviction, so the oracle is exact at every moment.
 *
 * @example
 * const b = new SimBackend(0, 16_384, exact);
 * b.serve(turn.hashes);
 * const beat = b.beat(); // { id: "sim-0", ..., kvEvents: { seq: 1, kind: "snapshot", ... } }
 */
export class SimBackend {
  readonly id: string;
  readonly url: string;
  /** `seq` of the last batch sent. */
  seq = 0;
  /** Turns served since the last beat (reported as `running`). */
  private served = 0;
  private readonly cache = new Map<string, true>();
  private readonly stored = new Set<string>();
  private readonly removed = new Set<string>();
  private snapshotNext = true;

  constructor(
    readonly index: number,
    private readonly capacityBlocks: number,
    private readonly exact: ExactIndex,
  ) {
    this.id = `sim-${index}`;
    this.url = `http://sim-${index}.bench:8080`;
  }

  /** Blocks cached now. */
  get size(): number {
    return this.cache.size;
  }

  /**
   * Runs a turn: every block of its prompt is cached (touched last block first, so a prefix is
   * more recent than its suffix), then the least recently used blocks are evicted down to capacity.
   */
  serve(hashes: readonly string[]): void {
    this.served++;
    for (let i = hashes.length - 1; i >= 0; i--) {
      const h = hashes[i]!;
      if (this.cache.delete(h)) {
        this.cache.set(h, true);
        continue;
      }
      this.cache.set(h, true);
      this.exact.add(h, this.index);
      this.removed.delete(h);
      this.stored.add(h);
    }
    for (const h of this.cache.keys()) {
      if (this.cache.size <= this.capacityBlocks) break;
      this.cache.delete(h);
      this.exact.remove(h, this.index);
      if (!this.stored.delete(h)) this.removed.add(h);
    }
  }

  /** The next heartbeat with the events since the last (a snapshot first and after a `resync`). */
  beat(): Heartbeat {
    const snapshot = this.snapshotNext;
    this.snapshotNext = false;
    const stored = snapshot ? [...this.cache.keys()].slice(-MAX_KV_EVENTS_PER_BATCH) : [...this.stored];
    const removed = snapshot ? [] : [...this.removed];
    this.stored.clear();
    this.removed.clear();
    const running = this.served;
    this.served = 0;
    return {
      id: this.id,
      url: this.url,
      model: "sim",
      kvCapacityBlocks: this.capacityBlocks,
      running,
      waiting: 0,
      kvUsage: Math.round((this.cache.size / this.capacityBlocks) * 1000) / 1000,
      tokensPerS: 0,
      loadAvg: running,
      kvEvents: { seq: ++this.seq, kind: snapshot ? "snapshot" : "delta", stored, removed },
    };
  }

  /** The pool's answer to a beat: `resync` makes the next batch a snapshot. */
  heard(kv: string | undefined): void {
    if (kv === "resync") this.snapshotNext = true;
  }
}
