import { setTimeout as sleep } from "node:timers/promises";
import type { Heartbeat } from "../../protocol/messages";
import type { OpsResponse, PoolIndexStats, PoolOp } from "./driver-protocol";
import { childCpuMs } from "./child-cpu";
import { ExactIndex } from "./exact-index";
import { oracleIndexChoice } from "./oracle-placement";
import { poolCells, type PoolCells, type PoolDesign } from "./pool-cells";
import type { PoolWorker } from "./pool-worker";
import { SimBackend } from "./sim-backend";
import type { TraceTurn } from "./trace-turns";

/**
 * Beats sent at once in a replay round, at most, and their hashes at most: a thousand beats (or
 * a few hundred snapshots) in flight at once outgrow the isolate's memory and workerd restarts it.
 */
const BEAT_BATCH = 128;
const BATCH_HASHES = 100_000;

/** `beats` cut into batches of at most BEAT_BATCH beats and (but for a single beat) BATCH_HASHES hashes. */
function beatBatches(beats: readonly Heartbeat[]): Heartbeat[][] {
  const out: Heartbeat[][] = [];
  let batch: Heartbeat[] = [];
  let hashes = 0;
  for (const b of beats) {
    const n = (b.kvEvents?.stored.length ?? 0) + (b.kvEvents?.removed.length ?? 0);
    if (batch.length > 0 && (batch.length >= BEAT_BATCH || hashes + n > BATCH_HASHES)) {
      out.push(batch);
      batch = [];
      hashes = 0;
    }
    batch.push(b);
    hashes += n;
  }
  if (batch.length > 0) out.push(batch);
  return out;
}

/** One backend count's replay: what to run, in rounds of one heartbeat interval each. */
export interface ReplayOptions {
  worker: PoolWorker;
  /** The run's name: its objects are `<pool>/<cell>`. */
  pool: string;
  design: PoolDesign;
  /** Backends a cell holds at most (sharded). */
  cellBackends: number;
  backends: number;
  turns: readonly TraceTurn[];
  /** Placed turns per round (per heartbeat interval). */
  turnsPerRound: number;
  capacityBlocks: number;
  /** The pool's POOL_DOWN_AFTER_MS (the worker's). */
  downAfterMs: number;
  /** In the down phase, every backend whose number is a multiple of this stops beating. */
  stopEvery: number;
  /** Called after each round with the turns placed so far. */
  onRound?: (placed: number) => void;
}

/** What one backend count's replay measured (definitions: docs/benchmarks.md, Pool at scale). */
export interface ReplayResult {
  /** Turns placed in the main replay (scored). */
  placements: number;
  /** Σ leading blocks the placed backend holds / Σ leading blocks the best backend holds (exact), over placements where some backend holds any. */
  hitVsExact: number;
  /** Fraction of those placements on a backend holding the longest leading run. */
  longestPicks: number;
  /**
   * The same ratio against the best backend of the cell that placed the turn (the single design:
   * every backend): what the cell's own index reached of what its cell held. hitVsExact below it
   * is what routing the turn to that cell by its key lost.
   */
  hitVsCell: number;
  /**
   * The same ratio against what was knowable when the round's placements were made: the exact
   * index before any of the round's turns is served (hitVsExact also counts blocks a turn placed
   * earlier in the same round is computing: a trace conversation's next turns, whose real gaps
   * the replay compresses into one round, and other turns under a prefix not yet noted anywhere).
   */
  hitVsKnown: number;
  /**
   * hitVsExact for the backend the pool's indexes ranked first (the most leading blocks it
   * counted), whether or not the load margin then placed the turn there: how good the index is,
   * apart from the routing rule's trade of cache for load.
   */
  hitOfIndex: number;
  /**
   * Σ leading blocks the placed backend holds / Σ those the backend holds that the same affinity
   * rule picks over the same loads with the EXACT index in place of the pool's (over every
   * backend, whatever the design; `bench/pool-scale/oracle-placement.ts`): the hit rate against an exact oracle
   * index, the load margin's trade counted on both sides.
   */
  hitVsOracleIndex: number;
  /**
   * Of the blocks lost against the exact index (best - held), the share by cause: `margin`, the
   * pool placed off the longest holder it knew (the affinity rule's load margin, on purpose);
   * `unknown`, it placed on its longest known holder but did not know the best one's blocks (the
   * index one beat behind, a turn of the same round, a prefix noted in another cell).
   */
  lossByCause: Record<string, number>;
  /** A round's beats sent at once: the object's time per beat with its KV events, ms (the round's wall time over its beats). */
  heartbeatMs: number;
  /** Mean KV events (stored + removed) per delta beat, and the most in one. */
  eventsPerBeat: { mean: number; max: number };
  /** Beats of the main replay answered `resync` after a backend's first (its index slot was dropped: the pool took it for down, or a batch did not follow). */
  resyncs: number;
  /** workerd's CPU per placed turn (its `place` and its `notePrefix`, one after another, request parsing included), ms. */
  turnCpuMs: number;
  /** Mean `place` and `notePrefix` times, ms (sequential). */
  placeMeanMs: number;
  noteMeanMs: number;
  /** The pool's index figures at the end of the main replay (before the down phase), summed over its cells. */
  index: PoolIndexStats;
  /** Which object each backend beats into and each turn is placed by. */
  cells: PoolCells;
  /** Hashes some simulated backend holds (the oracle's size). */
  exactHashes: number;
  /**
   * The down phase, run when called (after the load ramp, so that every backend beats through
   * it): 1 backend in `stopEvery` stops beating and rounds go on (at least 250 ms apart) until
   * POOL_DOWN_AFTER_MS has passed and four more rounds placed turns.
   */
  checkDown: () => Promise<DownCheck>;
  sims: SimBackend[];
}

/** The down phase: placements made once the stopped backends' last beat is POOL_DOWN_AFTER_MS old. */
export interface DownCheck {
  stopped: number;
  /** Placements made after that deadline, and how many named a stopped backend (must be 0). */
  placementsAfter: number;
  onStopped: number;
  /** Of those placements, how many had the longest exact leading run (ties included) on a stopped backend (what placing there would have reused). */
  wantedStopped: number;
  /** Placements on a stopped backend before the deadline (allowed: it was still up). */
  onStoppedBefore: number;
}

/**
 * Replays `turns` against the real pool over `backends` simulated backends, in rounds of one
 * heartbeat interval: every live backend beats (its KV events since the last round; all sent at
 * once), then the last round's turns are noted (`notePrefix`) and `turnsPerRound` turns are placed (`place` with their prompt hashes and prefix key); each lands
 * on the backend the pool chose, which caches its blocks. Every placement is scored against
 * the oracle's exact leading blocks at that moment. The down phase is `checkDown`, run when the
 * caller wants it.
 */
export async function replay(o: ReplayOptions): Promise<ReplayResult> {
  const exact = new ExactIndex();
  const sims = Array.from({ length: o.backends }, (_, i) => new SimBackend(i, o.capacityBlocks, exact));
  const byUrl = new Map(sims.map((s) => [s.url, s]));
  const cells = poolCells(o.design, o.pool, sims, o.cellBackends);
  const score = { held: 0, best: 0, longest: 0, scored: 0, cellHeld: 0, cellBest: 0, knownHeld: 0, knownBest: 0, indexHeld: 0, oracleHeld: 0 };
  const lost: Record<string, number> = {};
  const members = new Map<string, Set<number>>();
  for (const s of sims) {
    const pool = cells.poolOf(s.url);
    if (!members.has(pool)) members.set(pool, new Set());
    members.get(pool)!.add(s.index);
  }
  const time = { beatWall: 0, beats: 0, place: 0, places: 0, note: 0, notes: 0, events: 0, maxEvents: 0, deltas: 0, resyncs: 0, turnCpu: 0 };
  let notes: PoolOp[] = [];
  let next = 0;

  const round = async (live: readonly SimBackend[], scoreIt: boolean, wanted?: (best: Map<number, number>) => void) => {
    const beats = live.map((s) => s.beat());
    for (const b of beats) {
      if (b.kvEvents?.kind !== "delta") continue;
      const n = b.kvEvents.stored.length + b.kvEvents.removed.length;
      time.events += n;
      time.deltas++;
      time.maxEvents = Math.max(time.maxEvents, n);
    }
    // What the pool's load figures are for each backend at this round's placements: its beat's load plus the round's placements so far.
    const running = new Map(beats.map((b) => [b.url, b.running]));
    const pending = new Map<string, number>();
    const placed = Array.from({ length: o.turnsPerRound }, () => ({ turn: o.turns[next % o.turns.length]!, id: `t${next++}` }));
    // The beats arrive together (as N backends' do), then the ended turns' notes and the placements, one by one.
    const replies: (string | undefined)[] = [];
    for (const batch of beatBatches(beats)) {
      const beaten = await o.worker.ops({ pool: cells.pools[0]!, concurrent: true, ops: batch.map((beat) => ({ op: "heartbeat" as const, beat, pool: cells.poolOf(beat.url) })) });
      time.beatWall += beaten.wallMs;
      replies.push(...beaten.results.map((r) => r.kv));
    }
    time.beats += beats.length;
    beats.forEach((b, i) => {
      const kv = replies[i];
      if (kv === "resync" && scoreIt && b.kvEvents?.seq !== 1) time.resyncs++;
      byUrl.get(b.url)!.heard(kv);
    });
    const cpu0 = childCpuMs("workerd");
    const last: OpsResponse = await o.worker.ops({ pool: cells.pools[0]!, ops: [...notes, ...placed.map((p) => ({ op: "place" as const, hashes: p.turn.hashes, key: p.turn.key, trajectoryId: p.id, pools: cells.order(p.turn.key) }))] });
    if (scoreIt) time.turnCpu += childCpuMs("workerd") - cpu0;
    const results = last.results;
    const noted = notes.length;
    for (let i = 0; i < noted; i++) (time.note += results[i]!.ms), time.notes++;
    notes = [];
    // What was knowable: the exact index before any of this round's turns is served.
    if (scoreIt) {
      placed.forEach((p, i) => {
        const sim = results[noted + i]!.url ? byUrl.get(results[noted + i]!.url!) : undefined;
        const counts = exact.leadingBlocks(p.turn.hashes);
        const best = Math.max(0, ...counts.values());
        if (!sim || best === 0) return;
        score.knownHeld += counts.get(sim.index) ?? 0;
        score.knownBest += best;
      });
    }
    const urls: (string | null)[] = [];
    placed.forEach((p, i) => {
      const r = results[noted + i]!;
      time.place += r.ms;
      time.places++;
      urls.push(r.url ?? null);
      const sim = r.url ? byUrl.get(r.url) : undefined;
      if (!sim) return;
      if (wanted) wanted(exact.leadingBlocks(p.turn.hashes));
      if (scoreIt) {
        const counts = exact.leadingBlocks(p.turn.hashes);
        const best = Math.max(0, ...counts.values());
        if (best > 0) {
          const held = counts.get(sim.index) ?? 0;
          // The same placement rule over the same loads with the exact index in place of the pool's.
          const oracle = oracleIndexChoice(p.id, counts, live, running, pending);
          score.oracleHeld += oracle === undefined ? held : (counts.get(oracle) ?? 0);
          score.held += held;
          score.best += best;
          score.longest += held === best ? 1 : 0;
          score.scored++;
          // The index's own first choice, before the load margin: what the backend it ranked first really holds.
          const first = r.poolBestUrl ? byUrl.get(r.poolBestUrl) : undefined;
          score.indexHeld += first ? (counts.get(first.index) ?? 0) : held;
          // Why: the pool placed off its own longest holder (the affinity margin), or did not know the best one's blocks.
          const why = (r.poolPlaced ?? 0) < (r.poolBest ?? 0) ? "margin" : "unknown";
          if (best > held) lost[why] = (lost[why] ?? 0) + best - held;
        }
        const inCell = exact.leadingBlocks(p.turn.hashes, members.get(r.pool!));
        const cellBest = Math.max(0, ...inCell.values());
        if (cellBest > 0) {
          score.cellHeld += inCell.get(sim.index) ?? 0;
          score.cellBest += cellBest;
        }
      }
      pending.set(sim.url, (pending.get(sim.url) ?? 0) + 1);
      sim.serve(p.turn.hashes);
      notes.push({ op: "note", key: p.turn.key, url: sim.url, hashes: p.turn.hashes, trajectoryId: p.id, pool: r.pool! });
    });
    return urls;
  };

  const mainTurns = o.turns.length;
  while (next < mainTurns) {
    await round(sims, true);
    o.onRound?.(next);
  }
  const mainStats = (await o.worker.ops({ pool: cells.pools[0]!, ops: [], statsPools: cells.pools })).stats!;
  const mainPlacements = time.places;
  const mainExact = exact.size;
  const mainResyncs = time.resyncs;
  const checkDown = async (): Promise<DownCheck> => {
    const stopped = new Set(sims.filter((s) => s.index % o.stopEvery === 0).map((s) => s.url));
    const live = sims.filter((s) => !stopped.has(s.url));
    const deadline = Date.now() + o.downAfterMs + 500;
    const down: DownCheck = { stopped: stopped.size, placementsAfter: 0, onStopped: 0, wantedStopped: 0, onStoppedBefore: 0 };
    const stoppedIndex = new Set(sims.filter((s) => stopped.has(s.url)).map((s) => s.index));
    for (let after = 0; after < 4; ) {
      const startedAt = Date.now();
      const pastDeadline = startedAt > deadline;
      const urls = await round(live, false, (counts) => {
        const best = Math.max(0, ...counts.values());
        if (pastDeadline && best > 0 && [...counts].some(([b, n]) => n === best && stoppedIndex.has(b))) down.wantedStopped++;
      });
      const onStopped = urls.filter((u) => u !== null && stopped.has(u)).length;
      if (pastDeadline) {
        after++;
        down.placementsAfter += urls.length;
        down.onStopped += onStopped;
      } else down.onStoppedBefore += onStopped;
      await sleep(Math.max(0, 250 - (Date.now() - startedAt)));
    }
    return down;
  };
  return {
    placements: mainPlacements,
    hitVsExact: score.best > 0 ? score.held / score.best : 1,
    longestPicks: score.scored > 0 ? score.longest / score.scored : 1,
    hitVsCell: score.cellBest > 0 ? score.cellHeld / score.cellBest : 1,
    hitVsKnown: score.knownBest > 0 ? score.knownHeld / score.knownBest : 1,
    hitOfIndex: score.best > 0 ? score.indexHeld / score.best : 1,
    hitVsOracleIndex: score.oracleHeld > 0 ? score.held / score.oracleHeld : 1,
    lossByCause: Object.fromEntries(Object.entries(lost).map(([k, v]) => [k, Math.round((v / Math.max(1, score.best - score.held)) * 1000) / 1000])),
    heartbeatMs: time.beatWall / Math.max(1, time.beats),
    eventsPerBeat: { mean: time.events / Math.max(1, time.deltas), max: time.maxEvents },
    resyncs: mainResyncs,
    turnCpuMs: time.turnCpu / Math.max(1, mainPlacements),
    placeMeanMs: time.place / Math.max(1, time.places),
    noteMeanMs: time.note / Math.max(1, time.notes),
    index: mainStats,
    cells,
    exactHashes: mainExact,
    checkDown,
    sims,
  };
}
