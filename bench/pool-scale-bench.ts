import { availableParallelism, loadavg } from "node:os";
import { measureCpu, startCpuMeter, type CpuShare } from "./kit/machine";
import { note, Progress } from "./kit/progress";
import { round, table } from "./kit/report";
import { childCpuMs } from "./pool-scale/child-cpu";
import { rampLoad, RAMP_RATES, timeDerivedBeats, type RampStep } from "./pool-scale/load-ramp";
import type { PoolDesign } from "./pool-scale/pool-cells";
import { startPoolWorker } from "./pool-scale/pool-worker";
import { populate, type PopulateResult } from "./pool-scale/populate";
import { replay, type DownCheck, type ReplayResult } from "./pool-scale/replay";
import { BLOCK_TOKENS, DEFAULT_TRACE, loadTraceTurns } from "./pool-scale/trace-turns";

/**
 * `npm run bench -- pool-scale [--backends 8,32,...] [--trajectories M] [--designs single,sharded]
 *   [--cell-backends K] [--live-per-backend L] [--quick] [--json]`
 *
 * The real `PoolDO` in workerd (bench/pool-scale/worker/: a bench Worker exporting it, with a
 * driver that calls it over RPC as the edge does), against N simulated backends, per N and per
 * design: `single` (one pool object) and `sharded` (issue 38: cells of at most K backends,
 * durable-objects/pool/cells.ts, one `PoolDO` each; a backend beats into its cell's, a turn is
 * placed by its cells in `cellOrder` and noted in the one that placed it):
 *   1. replay: M turns of the Mooncake conversation trace placed in rounds of one heartbeat
 *      interval (every backend beats with its KV events, then N/8 turns are placed and served on
 *      the chosen backend's simulated LRU cache), each placement scored against an exact oracle;
 *   2. the heartbeat cost at the derived agent-workload batch (EVENTS_PER_BEAT);
 *   3. the ramp: open-loop placed turns at doubling rates under every backend's heartbeats at
 *      their real rate, until placement p99 doubles (maxRps);
 *   4. the down phase: 1 backend in 8 stops beating, and placements go on past POOL_DOWN_AFTER_MS.
 * Method, definitions and a run's figures: docs/benchmarks.md, "Pool at scale".
 */

/** gpu-backend/server/heartbeat.ts: a backend beats every 2 s (`intervalMs` default). */
export const BEAT_EVERY_MS = 2000;
/**
 * Blocks stored per beat under an agent workload, derived: a busy backend computing ~10,000 new
 * tokens a second (8,000 prefill not reused, 2,000 decode) fills 10,000 * 2 s / 16 tokens a block
 * = 1,250 blocks per beat, and at a full cache evicts as many: 2,500 events a beat. (The
 * backend's `KvEventLog` sends at most 16,384 distinct hashes in a delta before it falls back to
 * a snapshot.)
 */
export const EVENTS_PER_BEAT = Math.round((10_000 * (BEAT_EVERY_MS / 1000)) / BLOCK_TOKENS);
/** Blocks each simulated backend caches: 16,384 (262,144 tokens; ~32 GiB of KV for an 8B model at 128 KiB a token). */
export const SIM_CAPACITY_BLOCKS = 16_384;
/** Backends a cell holds at most in the sharded design (POOL_CELL_BACKENDS' default, cells.ts). */
export const CELL_BACKENDS = 32;
/** Live trajectories per backend put in a sharded pool before its ramp (100,000 at 1,000 backends: issue 38's target); quick: QUICK_LIVE_PER_BACKEND. */
export const LIVE_PER_BACKEND = 100;
export const QUICK_LIVE_PER_BACKEND = 2;
/** --quick ramps up to 800 turns a second at most (6 steps). */
export const QUICK_MAX_STEPS = 6;
/** How long a placed turn runs before its trajectory notes it (`notePrefix`) in the ramp: a short agent turn. */
export const TURN_MS = 1000;
/** The pool's POOL_DOWN_AFTER_MS in the bench: the product default (durable-objects/settings.ts). */
export const DOWN_AFTER_MS = 6000;
/** --quick: half of it (still longer than a beat interval), so the down phase waits less. */
export const QUICK_DOWN_AFTER_MS = 3000;

export interface PoolScaleOptions {
  quick: boolean;
  backends?: number[];
  trajectories?: number;
  /** Seconds per ramp step (default 3; quick 1.5). */
  stepSeconds?: number;
  /** Ramp steps at most (default all of RAMP_RATES; quick QUICK_MAX_STEPS). */
  maxSteps?: number;
  /** The pool's POOL_DOWN_AFTER_MS (default DOWN_AFTER_MS; quick QUICK_DOWN_AFTER_MS). */
  downAfterMs?: number;
  trace?: string;
  /** Designs measured at each N, in order (default both). */
  designs?: PoolDesign[];
  /** Backends per cell at most, sharded (default CELL_BACKENDS). */
  cellBackends?: number;
  /** Live trajectories per backend put in a sharded pool before its ramp (default LIVE_PER_BACKEND; quick QUICK_LIVE_PER_BACKEND). */
  livePerBackend?: number;
}

/**
 * One design at one backend count (`single`: the one pool object; `sharded`: cells of backends,
 * one object each); the hit figures as the replay defines them (`ReplayResult`, replay.ts).
 */
export interface PoolScaleRow extends Pick<ReplayResult, "longestPicks" | "hitVsCell" | "hitVsKnown" | "hitOfIndex" | "hitVsOracleIndex" | "lossByCause"> {
  design: PoolDesign;
  backends: number;
  /** Pool objects (cells; 1 for single) and the most backends one holds. */
  cells: number;
  cellBackends: number;
  /** Distinct trajectory ids placed before the ramp: the replay's turns and the live ones. */
  trajectories: number;
  /** Of them, new trajectories left open (in flight) before the ramp (sharded; 0 for single), and what placing them took. */
  liveTrajectories: number;
  populate: PopulateResult | null;
  p50PlacementMs: number;
  p99PlacementMs: number;
  heartbeatMs: number;
  maxRps: number;
  hitVsExact: number;
  indexBytes: number;
  meanPlacementMs: number;
  meanNoteMs: number;
  /** workerd's CPU per derived heartbeat and per placed turn of the replay (place + notePrefix), ms: the pool object's and its driver's. */
  heartbeatCpuMs: number;
  turnCpuMs: number;
  /** The cores the N backends' heartbeats alone take at their real rate (heartbeatCpuMs x N / 2 s). */
  heartbeatCores: number;
  /** Placed turns a second one core left to the object would sustain after the heartbeats, from the CPU costs (0: the beats alone take more than a core). */
  oneCoreRps: number;
  replayHeartbeatMs: number;
  replayEventsPerBeat: number;
  /** The beats of one full cell on its own object, in cores (single: = heartbeatCores), and the placed turns a second the pool would sustain with a core per object (oneCoreRps x cells). */
  cellHeartbeatCores: number;
  cellsOneCoreRps: number;
  indexEntries: number;
  /** Beats answered `resync` in the replay after a backend's first (its slot dropped: taken for down, as when the object falls behind on beats). */
  resyncs: number;
  indexedBackends: number;
  exactHashes: number;
  down: DownCheck;
  wallS: number;
  /** Cores kept busy over this backend count's run: the whole machine, workerd (the pool and its driver), the rest (this process and others). */
  cpu: { machineCores: number; workerdCores: number; otherCores: number } | null;
}

export interface PoolScaleSummary {
  rows: PoolScaleRow[];
  /** Backend counts and designs whose run threw (their rows are missing). */
  failed: { backends: number; design: PoolDesign; error: string }[];
  settings: { trace: string; designs: PoolDesign[]; cellBackends: number; livePerBackend: number; beatEveryMs: number; eventsPerBeat: number; capacityBlocks: number; downAfterMs: number; stepSeconds: number; turnMs: number; rates: number[] };
  machine: { cores: number; loadAvg1: number; before: CpuShare | null };
}

export async function runPoolScaleBench(o: PoolScaleOptions): Promise<{ summary: PoolScaleSummary; details: { ramps: Record<string, RampStep[]> } }> {
  const counts = o.backends ?? (o.quick ? [8, 64] : [8, 32, 128, 512, 1000]);
  const designs = o.designs ?? (["single", "sharded"] as PoolDesign[]);
  const cellBackends = o.cellBackends ?? CELL_BACKENDS;
  const livePerBackend = o.livePerBackend ?? (o.quick ? QUICK_LIVE_PER_BACKEND : LIVE_PER_BACKEND);
  const trajectories = o.trajectories ?? (o.quick ? 200 : 2000);
  const stepSeconds = o.stepSeconds ?? (o.quick ? 1.5 : 3);
  const maxSteps = o.maxSteps ?? (o.quick ? QUICK_MAX_STEPS : undefined);
  const downAfterMs = o.downAfterMs ?? (o.quick ? QUICK_DOWN_AFTER_MS : DOWN_AFTER_MS);
  const turnMs = TURN_MS;
  const trace = o.trace ?? DEFAULT_TRACE;
  const before = await measureCpu(o.quick ? 300 : 1000);
  note("pool-scale", `machine before: ${JSON.stringify(before)} load average ${loadavg()[0]!.toFixed(2)}`);
  const turns = loadTraceTurns(trace, trajectories);
  const rows: PoolScaleRow[] = [];
  const ramps: Record<string, RampStep[]> = {};
  const failed: PoolScaleSummary["failed"] = [];
  for (const n of counts) {
    for (const design of designs) {
      // A fresh workerd per backend count and design: nothing of the last run's pool stays in its memory.
      const worker = await startPoolWorker({ downAfterMs });
      const label = `N=${n} ${design}`;
      try {
        const t0 = performance.now();
        const meter = startCpuMeter();
        const workerd0 = childCpuMs("workerd");
        const pool = `pool-${n}-${design}-${Date.now()}`;
        const progress = new Progress(`pool-scale ${label}`, trajectories);
        let placed = 0;
        const r = await replay({
          worker,
          pool,
          design,
          cellBackends,
          backends: n,
          turns,
          turnsPerRound: Math.max(2, Math.ceil(n / 8)),
          capacityBlocks: SIM_CAPACITY_BLOCKS,
          downAfterMs,
          stopEvery: 8,
          onRound: (done) => {
            progress.tick("replay", done - placed);
            placed = done;
          },
        });
        const { cells } = r;
        const derived = await timeDerivedBeats(worker, cells, r.sims, EVENTS_PER_BEAT);
        const live = design === "sharded" ? livePerBackend * n : 0;
        let populated: PopulateResult | null = null;
        if (live > 0) {
          const filling = new Progress(`pool-scale ${label} live trajectories`, live);
          let done = 0;
          populated = await populate({ worker, cells, sims: r.sims, turns, count: live, beatEveryMs: BEAT_EVERY_MS, onBatch: (k) => (filling.tick("placed", k - done), (done = k)) });
          note("pool-scale", `${label}: ${populated.placed} live trajectories placed in ${round(populated.wallS, 1)} s (${populated.placedPerS}/s, ${round(populated.cpuMsPerPlace, 3)} ms CPU each, ${populated.unplaced} unplaced)`);
        }
        const ramp = await rampLoad({
          worker,
          cells,
          sims: r.sims,
          turns: turns.slice(-64),
          stepSeconds,
          beatEveryMs: BEAT_EVERY_MS,
          eventsPerBeat: EVENTS_PER_BEAT,
          turnMs,
          maxSteps,
          onStep: (s) => note("pool-scale", `${label} ${s.offeredRps}/s: answered ${s.answeredRps}/s, place p50 ${s.p50PlacementMs} p99 ${s.p99PlacementMs} ms, beat p99 ${round(s.p99HeartbeatMs, 1)} ms${s.retried ? " (rerun)" : ""}${s.held ? "" : " (did not hold)"}`),
        });
        ramps[`${design}-${n}`] = ramp.steps;
        const down = await r.checkDown();
        const first = ramp.steps[0]!;
        const cpu = cpuModel(n, derived.cpuMs, r.turnCpuMs, cells.pools.length, Math.max(...cells.map.cells.map((c) => c.backends.length)));
        const wallS = (performance.now() - t0) / 1000;
        const share = meter();
        const workerdCores = (childCpuMs("workerd") - workerd0) / 1000 / wallS;
        rows.push({
          design,
          backends: n,
          cells: cells.pools.length,
          cellBackends: Math.max(...cells.map.cells.map((c) => c.backends.length)),
          trajectories: r.placements + (populated?.placed ?? 0),
          liveTrajectories: populated?.placed ?? 0,
          populate: populated && { ...populated, wallS: round(populated.wallS, 1), cpuMsPerPlace: round(populated.cpuMsPerPlace, 3) },
          p50PlacementMs: first.p50PlacementMs,
          p99PlacementMs: first.p99PlacementMs,
          heartbeatMs: round(derived.ms, 3),
          maxRps: ramp.maxRps,
          hitVsExact: round(r.hitVsExact, 4),
          indexBytes: r.index.indexBytes,
          meanPlacementMs: round(r.placeMeanMs, 3),
          meanNoteMs: round(r.noteMeanMs, 3),
          ...cpu,
          replayHeartbeatMs: round(r.heartbeatMs, 3),
          replayEventsPerBeat: Math.round(r.eventsPerBeat.mean),
          longestPicks: round(r.longestPicks, 4),
          hitVsCell: round(r.hitVsCell, 4),
          hitVsKnown: round(r.hitVsKnown, 4),
          hitOfIndex: round(r.hitOfIndex, 4),
          hitVsOracleIndex: round(r.hitVsOracleIndex, 4),
          lossByCause: r.lossByCause,
          indexEntries: r.index.entries,
          resyncs: r.resyncs,
          indexedBackends: r.index.backends.filter((b) => b.indexed).length,
          exactHashes: r.exactHashes,
          down,
          wallS: round(wallS, 1),
          cpu: share && { machineCores: share.machineCores, workerdCores: round(workerdCores, 2), otherCores: round(Math.max(0, share.machineCores - workerdCores), 2) },
        });
        note("pool-scale", `${label} done in ${rows[rows.length - 1]!.wallS} s`);
      } catch (e) {
        // One run's failure (workerd restarted under it) is reported; the others still run.
        failed.push({ backends: n, design, error: (e as Error).message.slice(0, 300) });
        note("pool-scale", `${label} failed: ${(e as Error).message.slice(0, 300)}`);
      } finally {
        await worker.stop();
      }
    }
  }
  note("pool-scale", "\n" + table(
    ["N", "design", "cells", "p50 ms", "p99 ms", "place mean ms", "beat ms", "max rps", "1-core rps", "core/cell rps", "beat cores", "hit/exact", "hit/cell", "hit/oracle index", "hit/known", "hit of index", "loss by cause", "index MiB", "indexed", "live", "on down", "other cores"],
    rows.map((r) => [r.backends, r.design, r.cells, r.p50PlacementMs, r.p99PlacementMs, r.meanPlacementMs, r.heartbeatMs, r.maxRps, r.oneCoreRps, r.cellsOneCoreRps, r.heartbeatCores, r.hitVsExact, r.hitVsCell, r.hitVsOracleIndex, r.hitVsKnown, r.hitOfIndex, Object.entries(r.lossByCause).map(([k, v]) => `${k} ${v}`).join(", "), round(r.indexBytes / 2 ** 20, 2), r.indexedBackends, r.liveTrajectories, r.down.onStopped, r.cpu?.otherCores ?? "-"]),
  ));
  return {
    summary: {
      rows,
      failed,
      settings: { trace, designs, cellBackends, livePerBackend, beatEveryMs: BEAT_EVERY_MS, eventsPerBeat: EVENTS_PER_BEAT, capacityBlocks: SIM_CAPACITY_BLOCKS, downAfterMs, stepSeconds, turnMs, rates: RAMP_RATES.slice(0, maxSteps) },
      machine: { cores: availableParallelism(), loadAvg1: round(loadavg()[0]!, 2), before },
    },
    details: { ramps },
  };
}

/**
 * The object's capacity from CPU costs rather than latency (which a busy shared machine
 * distorts): the beats' cores at their real rate (N / 2 s x CPU per derived beat), and what is
 * left of one core in placed turns at the replay's CPU per turn (`place` + `notePrefix`).
 */
function cpuModel(backends: number, beatCpuMs: number, turnCpuMs: number, cells: number, cellBackends: number) {
  const heartbeatCores = (backends * (1000 / BEAT_EVERY_MS) * beatCpuMs) / 1000;
  // A cell's object takes its own backends' beats only; turns spread over the cells by key.
  const cellHeartbeatCores = (cellBackends * (1000 / BEAT_EVERY_MS) * beatCpuMs) / 1000;
  return {
    cellHeartbeatCores: round(cellHeartbeatCores, 3),
    cellsOneCoreRps: cellHeartbeatCores >= 1 ? 0 : cells * Math.floor(((1 - cellHeartbeatCores) * 1000) / Math.max(0.001, turnCpuMs)),
    heartbeatCpuMs: round(beatCpuMs, 3),
    turnCpuMs: round(turnCpuMs, 3),
    heartbeatCores: round(heartbeatCores, 3),
    oneCoreRps: heartbeatCores >= 1 ? 0 : Math.floor(((1 - heartbeatCores) * 1000) / Math.max(0.001, turnCpuMs)),
  };
}
