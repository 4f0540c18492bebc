import { childCpuMs } from "./child-cpu";
import type { LoadResponse } from "./driver-protocol";
import type { PoolCells } from "./pool-cells";
import type { PoolWorker } from "./pool-worker";
import type { SimBackend } from "./sim-backend";
import type { TraceTurn } from "./trace-turns";

/** Offered placement rates, turns a second: each step doubles the last. */
export const RAMP_RATES = [25, 50, 100, 200, 400, 800, 1600, 3200, 6400];
/** workerd's clock ticks in whole milliseconds: a p99 under this is not told apart from it. */
export const CLOCK_MS = 1;
/** The first step's p99 must be under this for it to hold: past it the object is behind already (on the beats alone). */
export const BASELINE_P99_CEILING_MS = 100;

export interface RampOptions {
  worker: PoolWorker;
  /** Which object each backend beats into and each turn is placed by. */
  cells: PoolCells;
  /** The live simulated backends (their `seq` goes on from the replay). */
  sims: readonly SimBackend[];
  turns: readonly TraceTurn[];
  stepSeconds: number;
  beatEveryMs: number;
  eventsPerBeat: number;
  turnMs: number;
  /** Steps at most, the warm-up and reruns not counted (default all of RAMP_RATES). */
  maxSteps?: number | undefined;
  onStep?: (step: RampStep) => void;
}

/** One offered rate: what the pool's callers saw. */
export interface RampStep {
  offeredRps: number;
  /** Placed turns answered per second of the step. */
  answeredRps: number;
  p50PlacementMs: number;
  p99PlacementMs: number;
  p50HeartbeatMs: number;
  p99HeartbeatMs: number;
  unfinished: number;
  resyncs: number;
  /** Heartbeats answered, and workerd's CPU over the step (the pool object and its driver, ms). */
  beats: number;
  cpuMs: number;
  /** Whether it held: p99 within twice the first step's (at least CLOCK_MS), all answered, answered >= 95% of offered. */
  held: boolean;
  /** It did not hold at first and this is its one rerun. */
  retried?: boolean;
}

export interface RampResult {
  steps: RampStep[];
  /** The highest offered rate that held (0: not even the first). */
  maxRps: number;
}

/**
 * Steps the offered placement rate up (RAMP_RATES) under the backends' heartbeats at their real
 * rate, after one uncounted warm-up step, until a step does not hold (twice: a step that fails
 * is rerun once): its placement p99 more than twice the first step's (the baseline, at least
 * CLOCK_MS), a call unanswered, or fewer turns answered than 95% offered. The first step
 * holds only if its p99 is at most BASELINE_P99_CEILING_MS (then maxRps is 0).
 */
export async function rampLoad(o: RampOptions): Promise<RampResult> {
  const steps: RampStep[] = [];
  const rates = RAMP_RATES.slice(0, o.maxSteps);
  let baseline: number | undefined;
  // A warm-up step at the first rate (not counted: the first calls after the replay meet a cold JIT and a GC).
  await runStep(o, rates[0]!);
  // The first step holds under the ceiling; each later one within twice the first's p99.
  const judge = (step: RampStep) => (baseline === undefined ? holds(step, BASELINE_P99_CEILING_MS / 2) : holds(step, baseline));
  for (const rate of rates) {
    let step = await runStep(o, rate);
    step.held = judge(step);
    // On a shared machine one burst elsewhere can double a p99: a step that did not hold runs once more.
    if (!step.held) {
      step = { ...(await runStep(o, rate)), retried: true };
      step.held = judge(step);
    }
    if (step.held) baseline ??= Math.max(CLOCK_MS, step.p99PlacementMs);
    steps.push(step);
    o.onStep?.(step);
    if (!step.held) break;
  }
  const held = steps.filter((s) => s.held);
  return { steps, maxRps: held.length > 0 ? held[held.length - 1]!.offeredRps : 0 };
}

async function runStep(o: RampOptions, rate: number): Promise<RampStep> {
  const cpu0 = childCpuMs("workerd");
  const r = await o.worker.load({
    pool: o.cells.pools[0]!,
    seconds: o.stepSeconds,
    placeRate: rate,
    beatEveryMs: o.beatEveryMs,
    eventsPerBeat: o.eventsPerBeat,
    turnMs: o.turnMs,
    backends: o.sims.map((s) => ({ id: s.id, url: s.url, seq: s.seq, pool: o.cells.poolOf(s.url) })),
    turns: o.turns.map((t) => ({ hashes: t.hashes, key: t.key, pools: o.cells.order(t.key) })),
  });
  o.sims.forEach((s, i) => (s.seq = r.seqs[i]!));
  return { ...stepOf(rate, r, o.stepSeconds), cpuMs: childCpuMs("workerd") - cpu0 };
}

function holds(step: RampStep, baselineP99: number): boolean {
  return step.unfinished === 0 && step.answeredRps >= 0.95 * step.offeredRps && step.p99PlacementMs <= 2 * baselineP99;
}

function stepOf(rate: number, r: LoadResponse, seconds: number): RampStep {
  return {
    offeredRps: rate,
    answeredRps: Math.round(r.placeMs.length / seconds),
    p50PlacementMs: quantile(r.placeMs, 0.5),
    p99PlacementMs: quantile(r.placeMs, 0.99),
    p50HeartbeatMs: quantile(r.beatMs, 0.5),
    p99HeartbeatMs: quantile(r.beatMs, 0.99),
    unfinished: r.unfinished,
    resyncs: r.resyncs,
    beats: r.beatMs.length,
    cpuMs: 0,
    held: false,
  };
}

/** The q-quantile of `xs` (nearest rank); 0 for none. */
export function quantile(xs: readonly number[], q: number): number {
  if (xs.length === 0) return 0;
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/**
 * A heartbeat carrying `eventsPerBeat` stored and as many removed hashes (the derived
 * agent-workload batch): its mean time over beats of the first 64 `sims` sent back to back
 * (their sum is exact to the clock's ms), and workerd's CPU per beat over them. At least
 * DERIVED_BEATS are timed, in rounds; each round removes the hashes the one before stored (a
 * first, untimed round stores the first ones). Each beat goes to its backend's cell.
 */
export async function timeDerivedBeats(worker: PoolWorker, cells: PoolCells, sims: readonly SimBackend[], eventsPerBeat: number): Promise<{ ms: number; cpuMs: number }> {
  const some = sims.slice(0, 64);
  const rounds = 1 + Math.max(2, Math.ceil(DERIVED_BEATS / Math.max(1, some.length)));
  const chunk = (s: SimBackend, r: number) => Array.from({ length: eventsPerBeat }, (_, j) => `d${(r % 2).toString()}${s.index.toString(16).padStart(5, "0")}${j.toString(16).padStart(9, "0")}`);
  let ms = 0;
  let timed = 0;
  let cpu0 = 0;
  for (let r = 0; r < rounds; r++) {
    const ops = some.map((s) => {
      const beat = s.beat();
      beat.kvEvents = { seq: beat.kvEvents!.seq, kind: "delta", stored: chunk(s, r), removed: r === 0 ? [] : chunk(s, r - 1) };
      return { op: "heartbeat" as const, beat, pool: cells.poolOf(s.url) };
    });
    if (r === 1) cpu0 = childCpuMs("workerd");
    const res = await worker.ops({ pool: cells.pools[0]!, ops });
    if (r === 0) continue;
    ms += res.results.reduce((a, x) => a + x.ms, 0);
    timed += res.results.length;
  }
  return { ms: ms / Math.max(1, timed), cpuMs: (childCpuMs("workerd") - cpu0) / Math.max(1, timed) };
}

/** Derived beats timed at least (the CPU reading ticks in 10 ms). */
const DERIVED_BEATS = 128;
