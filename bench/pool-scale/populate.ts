import { childCpuMs } from "./child-cpu";
import type { PoolOp } from "./driver-protocol";
import type { PoolCells } from "./pool-cells";
import type { PoolWorker } from "./pool-worker";
import type { SimBackend } from "./sim-backend";
import type { TraceTurn } from "./trace-turns";

/** New trajectories placed at once per request (each cell serializes its own). */
const PLACE_BATCH = 500;
/** Beats sent at once per request while populating (they carry only the events since the last). */
const BEAT_BATCH = 128;

/** What populating the pool with live trajectories took. */
export interface PopulateResult {
  /** Distinct trajectory ids placed (each a new trajectory's first `place`, left open: its turn is in flight). */
  placed: number;
  /** Placements answered null (no backend up in any of its cells). */
  unplaced: number;
  wallS: number;
  /** Placements a second over the place batches' wall time (every call in flight at once, per batch). */
  placedPerS: number;
  /** workerd's CPU per placement (its objects' and the driver's), ms. */
  cpuMsPerPlace: number;
}

/**
 * Fills the pool with `count` live trajectories before the ramp: distinct ids `live-<i>`, each a
 * NEW trajectory (no hashes yet, as the edge places one) under the prefix key of trace turn
 * `i mod turns` (the trace has far fewer distinct keys than trajectories), placed by the first of
 * its cells that answers and never noted, so each stays an open placement in its cell (PoolDO
 * keeps those PLACED_PREFIX_MS, 30 s, and MAX_OPEN_PLACEMENTS, 10,000, at most per object). Every
 * backend keeps beating into its cell meanwhile (at least every half `beatEveryMs`), so none is
 * taken for down.
 */
export async function populate(o: { worker: PoolWorker; cells: PoolCells; sims: readonly SimBackend[]; turns: readonly TraceTurn[]; count: number; beatEveryMs: number; onBatch?: (placed: number) => void }): Promise<PopulateResult> {
  const t0 = performance.now();
  let lastBeat = -Infinity;
  let placed = 0;
  let unplaced = 0;
  let placeMs = 0;
  let cpuMs = 0;
  for (let i = 0; i < o.count; ) {
    if (performance.now() - lastBeat >= o.beatEveryMs / 2) {
      lastBeat = performance.now();
      for (let b = 0; b < o.sims.length; b += BEAT_BATCH) {
        const sims = o.sims.slice(b, b + BEAT_BATCH);
        const res = await o.worker.ops({ pool: o.cells.pools[0]!, concurrent: true, ops: sims.map((s) => ({ op: "heartbeat" as const, beat: s.beat(), pool: o.cells.poolOf(s.url) })) });
        res.results.forEach((r, k) => sims[k]!.heard(r.kv));
      }
    }
    const ops: PoolOp[] = [];
    for (const end = Math.min(o.count, i + PLACE_BATCH); i < end; i++) {
      const key = o.turns[i % o.turns.length]!.key;
      ops.push({ op: "place", hashes: [], key, trajectoryId: `live-${i}`, pools: o.cells.order(key) });
    }
    const cpu0 = childCpuMs("workerd");
    const res = await o.worker.ops({ pool: o.cells.pools[0]!, concurrent: true, ops });
    cpuMs += childCpuMs("workerd") - cpu0;
    placeMs += res.wallMs;
    for (const r of res.results) if (r.url) placed++;
    else unplaced++;
    o.onBatch?.(placed + unplaced);
  }
  const wallS = (performance.now() - t0) / 1000;
  return { placed, unplaced, wallS, placedPerS: Math.round((placed * 1000) / Math.max(1, placeMs)), cpuMsPerPlace: cpuMs / Math.max(1, placed + unplaced) };
}
