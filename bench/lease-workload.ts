import { mulberry32 } from "../protocol/random";

/**
 * The lease benchmark's workload and its model of time (no engine here: see lease-bench.ts).
 *
 * Workload (seeded, `makeLeaseWorkload`): M agent trajectories of T turns arrive as a Poisson
 * process (mean gap `arrivalGapMs` = 500 ms: a loaded server, ~30 agents active at a time). Each has its own system prompt and task; every later turn
 * appends one tool observation. Between turns the agent waits on a tool:
 *
 *   toolMedianMs ~ lognormal(median `toolMedianMs` = 3 s, sigma `acrossSigma` = 1.6), clamped to
 *                  [100 ms, 10 min]       one draw per trajectory: which tools this agent runs
 *   pauseMs      = toolMedianMs x lognormal(1, sigma `withinSigma` = 0.5), clamped alike
 *
 * Across trajectories that spans p10 ~0.4 s (file reads, greps), p50 3 s (searches, web fetches),
 * p90 ~23 s (builds, test suites) to p99 ~2 min (long jobs, a human approving); within one
 * trajectory pauses cluster around its own scale (x/÷1.65 at one sigma): an agent keeps using the
 * same kind of tool. That clustering is what a per-trajectory predictor relies on; the
 * mispredicted variant of the benchmark (pauses 3x longer than predicted) covers agents that break it.
 *
 * Time model (`TIME_MODEL`, fixed constants, not measured: the CPU runs a tiny model whose speed
 * says nothing about a GPU): one GPU serving an ~8B model. Prefill is compute-bound, so turns
 * prefill one at a time, first come first served, at `prefillTokensPerS` (10,000) computed tokens
 * per second; decode is memory-bound and batches, so a turn decodes concurrently with others at
 * `decodeMsPerToken` (25 ms) per completion token. TTFT = queueing + prefill.
 */
export interface LeaseWorkloadParams {
  trajectories: number;
  turns: number;
  seed: number;
  /** Words of each system prompt (after its agent-specific first sentence). */
  systemWords: number;
  /** Words of each tool observation, uniform in [lo, hi]. */
  observationWords: [number, number];
  /** Mean gap between trajectory arrivals (exponential). Default 500. */
  arrivalGapMs?: number;
  /** Median over trajectories of their tool median. Default 3000. */
  toolMedianMs?: number;
  /** Lognormal sigma of the tool median across trajectories. Default 1.6. */
  acrossSigma?: number;
  /** Lognormal sigma of pauses within a trajectory. Default 0.5. */
  withinSigma?: number;
}

export interface LeaseTrajectory {
  id: string;
  system: string;
  task: string;
  /** One per turn after the first. */
  observations: string[];
  /** Completion tokens per turn. */
  maxTokens: number[];
  /** Tool pause after each turn but the last. */
  pausesMs: number[];
  /** This trajectory's tool scale (the median its pauses are drawn around). */
  toolMedianMs: number;
  /** Arrival of its first turn, on the virtual clock. */
  startMs: number;
}

export const PAUSE_BOUNDS_MS: readonly [number, number] = [100, 600_000];

/** @example makeLeaseWorkload({ trajectories: 48, turns: 6, seed: 11, systemWords: 160, observationWords: [60, 160] }) */
export function makeLeaseWorkload(p: LeaseWorkloadParams): LeaseTrajectory[] {
  const rand = mulberry32(p.seed);
  const words = (n: number) => Array.from({ length: n }, () => WORDS[Math.floor(rand() * WORDS.length)]).join(" ");
  const between = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  const normal = () => Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
  const clamp = (ms: number) => Math.min(PAUSE_BOUNDS_MS[1], Math.max(PAUSE_BOUNDS_MS[0], ms));
  const gap = p.arrivalGapMs ?? 500;
  const median = p.toolMedianMs ?? 3000;
  const across = p.acrossSigma ?? 1.6;
  const within = p.withinSigma ?? 0.5;
  let t = 0;
  return Array.from({ length: p.trajectories }, (_, i) => {
    const toolMedianMs = clamp(median * Math.exp(across * normal()));
    const startMs = t;
    t += -gap * Math.log(1 - rand());
    return {
      id: `lease-bench-${i}`,
      system: `You are agent ${i}, ${words(4)}. ${words(p.systemWords)}`,
      task: `Task ${i}: ${words(30)}`,
      observations: Array.from({ length: p.turns - 1 }, () => words(between(p.observationWords[0], p.observationWords[1]))),
      maxTokens: Array.from({ length: p.turns }, () => between(8, 16)),
      pausesMs: Array.from({ length: p.turns - 1 }, () => Math.round(clamp(toolMedianMs * Math.exp(within * normal())))),
      toolMedianMs: Math.round(toolMedianMs),
      startMs: Math.round(startMs),
    };
  });
}

/** The modeled GPU (see the file comment). */
export const TIME_MODEL = { prefillTokensPerS: 10_000, decodeMsPerToken: 25 } as const;

/** Modeled prefill time of `computedTokens` (at least one token is always computed). */
export function prefillMs(computedTokens: number): number {
  return (1000 * Math.max(1, computedTokens)) / TIME_MODEL.prefillTokensPerS;
}

/** Modeled decode time of a turn's completion after its first token. */
export function decodeMs(completionTokens: number): number {
  return Math.max(0, completionTokens - 1) * TIME_MODEL.decodeMsPerToken;
}

/**
 * A discrete-event queue on a virtual clock: events run in time order, ties in insertion order.
 *
 * @example
 * const q = new EventQueue<string>(); q.push(5, "b"); q.push(1, "a"); q.pop() // { at: 1, event: "a" }
 */
export class EventQueue<E> {
  private readonly heap: { at: number; seq: number; event: E }[] = [];
  private seq = 0;

  get size(): number {
    return this.heap.length;
  }

  push(at: number, event: E): void {
    const h = this.heap;
    h.push({ at, seq: this.seq++, event });
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(h[i]!, h[parent]!)) break;
      [h[i], h[parent]] = [h[parent]!, h[i]!];
      i = parent;
    }
  }

  pop(): { at: number; event: E } | undefined {
    const h = this.heap;
    if (h.length === 0) return undefined;
    const top = h[0]!;
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && before(h[l]!, h[m]!)) m = l;
        if (r < h.length && before(h[r]!, h[m]!)) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m]!, h[i]!];
        i = m;
      }
    }
    return { at: top.at, event: top.event };
  }
}

function before(a: { at: number; seq: number }, b: { at: number; seq: number }): boolean {
  return a.at < b.at || (a.at === b.at && a.seq < b.seq);
}

const WORDS = (
  "the agent reads file path line error value result table query index cache block token model server request response status config " +
  "build test deploy branch commit patch diff review merge function class method module package import export return async await"
).split(" ");
