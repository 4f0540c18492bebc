import type { RoutingPolicyName } from "../durable-objects/routing/routing-policy";
import type { CpuBreakdown } from "./kit/machine";
import { percentile, round } from "./kit/report";

/**
 * The routing bench's report: one policy's turns summarized into its figures, the JSON line
 * (six figures per policy), the targets and the markdown tables. Pure (tested in
 * routing-report.test.ts).
 *
 * Definitions (also in docs/benchmarks.md):
 * - hit rate: sum of `usage.prompt_tokens_details.cached_tokens` / sum of `usage.prompt_tokens`.
 * - ideal hit rate: the same ratio for one infinite cache with the engine's block granularity
 *   (`idealCachedTokens`): a later turn can reuse its own previous turn's prompt + completion, a
 *   first turn the longest token prefix it shares with any first turn sent before it (its
 *   group's system prompt and tools); whole blocks, at most prompt - 1 tokens.
 * - throughput: completion tokens of all turns / wall time of the workload (first start to
 *   last reply), tokens/s.
 * - TTFT: client-side, request sent to the first SSE chunk carrying content or a tool call.
 * - max/mean load: turns served by the busiest backend / mean turns per backend.
 */

/** One finished turn as the client and the trajectory URL saw it. */
export interface TurnResult {
  trajectory: string;
  group: number;
  /** 1-based. */
  turn: number;
  /** ms since the workload started, when the request was sent. */
  sentAtMs: number;
  ttftMs: number;
  totalMs: number;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  /** From the trajectory URL's turn record. */
  computedTokens: number;
  backend: string;
  mode: string;
  fullReason: string | null;
  /** The turn record's `route` (why it went to its backend); absent from older records. */
  route?: string | null;
  /** TTFT as the trajectory object saw it (backend request to first token frame). */
  doTtftMs: number;
  /** The turn record's `kv_pull` (a full turn that pulled, or tried to), and its `miss`. */
  kvPull?: { outcome: string; blocks: number; ms: number } | null;
  miss?: { reason: string; tokens: number; detail: string | null } | null;
}

/** What the JSON line reports per policy. */
export interface PolicyFigures {
  hitRate: number;
  idealHitRate: number;
  throughputTokPerS: number;
  p50TtftMs: number;
  p99TtftMs: number;
  maxOverMeanLoad: number;
}

export interface PolicyDetails extends PolicyFigures {
  wallS: number;
  turns: number;
  promptTokens: number;
  cachedTokens: number;
  idealCachedTokens: number;
  computedTokens: number;
  completionTokens: number;
  hitOverIdeal: number;
  /** Turns served per backend id. */
  turnsPerBackend: Record<string, number>;
  /** Prompt tokens computed (prefill) per backend id. */
  computedPerBackend: Record<string, number>;
  maxOverMeanComputed: number;
  /** Turns whose backend differs from the trajectory's previous turn. */
  moves: number;
  /** Those moves by the turn record's `route` reason (e.g. pinned-overloaded, pinned-down, failover). */
  movesByRoute: Record<string, number>;
  fullTurns: number;
  /** Distinct backends a trajectory visited, mean. */
  backendsPerTrajectory: number;
  p50DoTtftMs: number;
  p99DoTtftMs: number;
  /** Mean of running + waiting per backend over the pool's views sampled during the run. */
  sampledLoadPerBackend: Record<string, number>;
  /** Ideal minus cached tokens, summed, by kind of turn: where the hit rate fell short of ideal. */
  lostVsIdeal: { firstTurns: number; movedTurns: number; stayingTurns: number };
  /** CPU seconds the backend processes used during the run (all backends). */
  backendCpuS: number;
  /** Seconds the backends' executors spent in engine steps during the run (all backends). */
  executorS: number;
  /** Per backend: pool views (sampled each second) that showed it down (missed heartbeats). */
  downSamples?: Record<string, number>;
  /** Turns resent after an error (e.g. the edge restarting). */
  retries?: number;
  /** CPU seconds during the run: the machine (busy of total), backends, edge (wrangler + workerd), this client. */
  cpu?: CpuBreakdown;
}

/** Ideal minus cached tokens by kind of turn: first turns, turns on another backend than the previous, the rest. */
export function lostVsIdeal(rs: readonly TurnResult[], ideal: readonly number[]): { firstTurns: number; movedTurns: number; stayingTurns: number } {
  const backendOf = new Map(rs.map((r) => [`${r.trajectory}\u0000${r.turn}`, r.backend]));
  const lost = { firstTurns: 0, movedTurns: 0, stayingTurns: 0 };
  rs.forEach((r, i) => {
    const d = ideal[i]! - r.cachedTokens;
    if (r.turn === 1) lost.firstTurns += d;
    else if (backendOf.get(`${r.trajectory}\u0000${r.turn - 1}`) !== r.backend) lost.movedTurns += d;
    else lost.stayingTurns += d;
  });
  return lost;
}

export interface RoutingSummary {
  policies: Partial<Record<RoutingPolicyName, PolicyFigures>>;
}

/** max / mean of the values (1 when all are equal; backends that served nothing count as 0). */
export function maxOverMean(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  return mean > 0 ? Math.max(...values) / mean : 1;
}

/** A turn as the ideal hit rate needs it. */
export interface IdealTurn {
  trajectory: string;
  turn: number;
  sentAtMs: number;
  promptTokens: number;
  completionTokens: number;
}

/**
 * Tokens of each turn an ideal cache could serve (same order as `turns`): one infinite cache
 * shared by everything, reusing whole blocks of `blockSize` tokens. A later turn of a trajectory
 * can reuse its previous turn's prompt + completion (the transcript only grew); a first turn the
 * longest prefix it shares with a first turn sent before it (`sharedPrefix(a, b)`: tokens two
 * trajectories' first prompts have in common, their group's system prompt and tools), since a
 * backend shares a prefix still being prefilled with the requests queued behind it. Capped at
 * prompt - 1 (the engine computes at least one token) and floored to whole blocks. An upper
 * bound: N backends that each serve a group compute its system prompt once each.
 *
 * @example
 * idealCachedTokens([{ trajectory: "a", turn: 1, sentAtMs: 0, promptTokens: 100, completionTokens: 10 },
 *                    { trajectory: "a", turn: 2, sentAtMs: 5, promptTokens: 150, completionTokens: 10 }], () => 0, 16)
 * // [0, 96]   (turn 2 reuses floor(110 / 16) * 16)
 */
export function idealCachedTokens(turns: readonly IdealTurn[], sharedPrefix: (a: string, b: string) => number, blockSize: number): number[] {
  const byKey = new Map(turns.map((t) => [`${t.trajectory}\u0000${t.turn}`, t]));
  const firsts = turns.filter((t) => t.turn === 1);
  return turns.map((t) => {
    let reusable = 0;
    if (t.turn > 1) {
      const prev = byKey.get(`${t.trajectory}\u0000${t.turn - 1}`);
      if (prev) reusable = prev.promptTokens + prev.completionTokens;
    } else {
      for (const f of firsts) {
        if (f.sentAtMs >= t.sentAtMs || f.trajectory === t.trajectory) continue;
        reusable = Math.max(reusable, sharedPrefix(t.trajectory, f.trajectory));
      }
    }
    const capped = Math.max(0, Math.min(reusable, t.promptTokens - 1));
    return Math.floor(capped / blockSize) * blockSize;
  });
}

/** Per-policy figures from its turns; `backends` lists every backend id (idle ones count as 0). */
export function summarizePolicy(params: {
  results: readonly TurnResult[];
  ideal: readonly number[];
  wallMs: number;
  backends: readonly string[];
  sampledLoad?: Record<string, number>;
  usage?: Record<string, { cpuS: number; executorS: number }>;
}): PolicyDetails {
  const { results: rs, ideal, backends } = params;
  const sum = (f: (r: TurnResult) => number) => rs.reduce((a, r) => a + f(r), 0);
  const prompt = sum((r) => r.promptTokens);
  const cached = sum((r) => r.cachedTokens);
  const idealCached = ideal.reduce((a, b) => a + b, 0);
  const completion = sum((r) => r.completionTokens);
  const turnsPer = Object.fromEntries(backends.map((b) => [b, 0]));
  const computedPer = Object.fromEntries(backends.map((b) => [b, 0]));
  for (const r of rs) {
    turnsPer[r.backend] = (turnsPer[r.backend] ?? 0) + 1;
    computedPer[r.backend] = (computedPer[r.backend] ?? 0) + r.computedTokens;
  }
  const byTrajectory = new Map<string, TurnResult[]>();
  for (const r of rs) byTrajectory.set(r.trajectory, [...(byTrajectory.get(r.trajectory) ?? []), r]);
  let moves = 0;
  let visited = 0;
  const movesByRoute: Record<string, number> = {};
  for (const turns of byTrajectory.values()) {
    const sorted = [...turns].sort((a, b) => a.turn - b.turn);
    for (let i = 1; i < sorted.length; i++) {
      if (sorted[i]!.backend === sorted[i - 1]!.backend) continue;
      moves++;
      const why = sorted[i]!.route ?? "unknown";
      movesByRoute[why] = (movesByRoute[why] ?? 0) + 1;
    }
    visited += new Set(sorted.map((t) => t.backend)).size;
  }
  const ttft = rs.map((r) => r.ttftMs);
  const doTtft = rs.map((r) => r.doTtftMs);
  // A policy with no turns has no TTFT sample: NaN (null in the JSON line), as before.
  const pct = (xs: readonly number[], q: number) => (xs.length > 0 ? percentile(xs, q) : Number.NaN);
  return {
    hitRate: round(prompt > 0 ? cached / prompt : 0, 4),
    idealHitRate: round(prompt > 0 ? idealCached / prompt : 0, 4),
    throughputTokPerS: round((completion / params.wallMs) * 1000, 2),
    p50TtftMs: round(pct(ttft, 0.5), 1),
    p99TtftMs: round(pct(ttft, 0.99), 1),
    maxOverMeanLoad: round(maxOverMean(Object.values(turnsPer)), 3),
    wallS: round(params.wallMs / 1000, 2),
    turns: rs.length,
    promptTokens: prompt,
    cachedTokens: cached,
    idealCachedTokens: idealCached,
    computedTokens: sum((r) => r.computedTokens),
    completionTokens: completion,
    hitOverIdeal: round(idealCached > 0 ? cached / idealCached : 0, 4),
    turnsPerBackend: turnsPer,
    computedPerBackend: computedPer,
    maxOverMeanComputed: round(maxOverMean(Object.values(computedPer)), 3),
    moves,
    movesByRoute,
    fullTurns: rs.filter((r) => r.mode === "full").length,
    backendsPerTrajectory: round(byTrajectory.size > 0 ? visited / byTrajectory.size : 0, 2),
    p50DoTtftMs: round(pct(doTtft, 0.5), 1),
    p99DoTtftMs: round(pct(doTtft, 0.99), 1),
    sampledLoadPerBackend: params.sampledLoad ?? {},
    lostVsIdeal: lostVsIdeal(rs, ideal),
    backendCpuS: round(Object.values(params.usage ?? {}).reduce((a, u) => a + u.cpuS, 0), 1),
    executorS: round(Object.values(params.usage ?? {}).reduce((a, u) => a + u.executorS, 0), 1),
  };
}

/** The JSON line: exactly the six figures per policy. */
export function summaryJson(details: Partial<Record<RoutingPolicyName, PolicyDetails>>): RoutingSummary {
  const policies: Partial<Record<RoutingPolicyName, PolicyFigures>> = {};
  for (const [name, d] of Object.entries(details) as [RoutingPolicyName, PolicyDetails][]) {
    policies[name] = {
      hitRate: d.hitRate,
      idealHitRate: d.idealHitRate,
      throughputTokPerS: d.throughputTokPerS,
      p50TtftMs: d.p50TtftMs,
      p99TtftMs: d.p99TtftMs,
      maxOverMeanLoad: d.maxOverMeanLoad,
    };
  }
  return { policies };
}

/** The targets, checked against the figures (undefined where a policy did not run). */
export function checkTargets(p: RoutingSummary["policies"]): { affinityHitVsIdeal?: boolean; affinityThroughputVsRoundRobin?: boolean; maxOverMeanLoad?: boolean } {
  const a = p.affinity;
  const rr = p["round-robin"];
  return {
    ...(a ? { affinityHitVsIdeal: a.hitRate >= 0.95 * a.idealHitRate } : {}),
    ...(a && rr ? { affinityThroughputVsRoundRobin: a.throughputTokPerS >= 2 * rr.throughputTokPerS } : {}),
    ...(a ? { maxOverMeanLoad: a.maxOverMeanLoad <= 1.5 } : {}),
  };
}

/** Markdown table, one row per policy. */
export function policyTable(details: Partial<Record<RoutingPolicyName, PolicyDetails>>): string {
  const head =
    "| policy | hit rate | ideal | hit/ideal | tok/s | p50 TTFT ms | p99 TTFT ms | max/mean turns | max/mean prefill | computed prompt tok | moves | backends/traj | executor s | backend CPU s | wall s |";
  const sep = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";
  const rows = (Object.entries(details) as [RoutingPolicyName, PolicyDetails][]).map(
    ([name, d]) =>
      `| ${name} | ${d.hitRate.toFixed(3)} | ${d.idealHitRate.toFixed(3)} | ${d.hitOverIdeal.toFixed(3)} | ${d.throughputTokPerS.toFixed(1)} | ${Math.round(d.p50TtftMs)} | ${Math.round(d.p99TtftMs)} | ${d.maxOverMeanLoad.toFixed(2)} | ${d.maxOverMeanComputed.toFixed(2)} | ${d.computedTokens} | ${d.moves} | ${d.backendsPerTrajectory.toFixed(2)} | ${d.executorS.toFixed(1)} | ${d.backendCpuS.toFixed(1)} | ${d.wallS.toFixed(1)} |`,
  );
  return [head, sep, ...rows].join("\n");
}

/** Where the CPU went during each policy's run (core-seconds). */
export function cpuTable(details: Partial<Record<RoutingPolicyName, PolicyDetails>>): string {
  const rows = (Object.entries(details) as [RoutingPolicyName, PolicyDetails][])
    .filter(([, d]) => d.cpu)
    .map(([name, d]) => {
      const c = d.cpu!;
      const others = c.machineBusyS - c.backendsS - c.edgeS - c.clientS;
      return `| ${name} | ${c.machineTotalS.toFixed(0)} | ${c.machineBusyS.toFixed(0)} | ${c.backendsS.toFixed(1)} | ${d.executorS.toFixed(1)} | ${c.edgeS.toFixed(1)} | ${c.clientS.toFixed(1)} | ${others.toFixed(1)} |`;
    });
  return ["| policy | machine core-s | busy | backends | (executor steps, wall) | edge (wrangler+workerd) | client | other processes |", "|---|---:|---:|---:|---:|---:|---:|---:|", ...rows].join("\n");
}

/** One policy's run for the oracle table: its `--kv-pull` setting and the load average before its backends started. */
export interface OracleRow {
  policy: string;
  pulls: string;
  d: PolicyDetails;
  loadAvg?: number;
}

/** Prompt tokens the oracle (ideal placement: every turn finds the ideal cache) computes: prompt - ideal cached. */
export function oracleComputed(d: Pick<PolicyDetails, "promptTokens" | "idealCachedTokens">): number {
  return d.promptTokens - d.idealCachedTokens;
}

/**
 * Markdown table of policies against the oracle (ideal placement): each run's hit rate as a
 * fraction of the ideal and its computed prompt tokens against the ideal's, then one oracle row
 * per distinct ideal (the ideal depends on the run's send order and replies only through first
 * turns' order; equal replies give one row). The oracle has no throughput: it is no policy that ran.
 */
export function oracleTable(rows: readonly OracleRow[]): string {
  const head = "| policy | pulls | hit rate | hit/ideal | computed prompt tok | computed / oracle's | tok/s | wall s | p50 TTFT ms | p99 TTFT ms | moves | other processes core-s | load avg before |";
  const sep = "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";
  const other = (d: PolicyDetails) => (d.cpu ? (d.cpu.machineBusyS - d.cpu.backendsS - d.cpu.edgeS - d.cpu.clientS).toFixed(1) : "-");
  const body = rows.map(({ policy, pulls, d, loadAvg }) => {
    const oracle = oracleComputed(d);
    return `| ${policy} | ${pulls} | ${d.hitRate.toFixed(3)} | ${d.hitOverIdeal.toFixed(3)} | ${d.computedTokens} | ${oracle > 0 ? (d.computedTokens / oracle).toFixed(2) : "-"} | ${d.throughputTokPerS.toFixed(1)} | ${d.wallS.toFixed(1)} | ${Math.round(d.p50TtftMs)} | ${Math.round(d.p99TtftMs)} | ${d.moves} | ${other(d)} | ${loadAvg === undefined ? "-" : loadAvg.toFixed(2)} |`;
  });
  const oracles = [...new Map(rows.map(({ d }) => [`${d.idealHitRate}/${oracleComputed(d)}`, d])).values()].map(
    (d) => `| oracle (ideal placement) | - | ${d.idealHitRate.toFixed(3)} | 1.000 | ${oracleComputed(d)} | 1.00 | - | - | - | - | - | - | - |`,
  );
  return [head, sep, ...body, ...oracles].join("\n");
}
