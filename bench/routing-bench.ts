import { appendFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { ChatMessage } from "../protocol/messages";
import { SECRET_HEADER } from "../protocol/messages";
import { ROUTING_POLICIES, type RoutingPolicyName } from "../durable-objects/routing/routing-policy";
import { loadModel } from "../gpu-backend/model/load-model";
import { generateFrames } from "../durable-objects/backend/backend-client";
import { freePort, startStack, type Stack } from "../scripts/stack";
import { makeRoutingWorkload, type RoutingTrajectory } from "./routing-workload";
import { Progress, note } from "./progress";
import { lineChart, type Series } from "./svg-plot";
import type { TraceWindow } from "./step-costs";

/**
 * `npm run bench -- routing [--backends N] [--trajectories M] [--turns T] [--quick] [--json]`
 *
 * For each routing policy (affinity, round-robin, least-loaded, consistent-hash) it starts the
 * real local stack (N backends + `wrangler dev` with `ROUTING_POLICY` set), runs the same M
 * concurrent synthetic agent trajectories through the OpenAI-compatible API (streaming, tool
 * pauses between turns), reads every turn's record from the session URLs, and stops the stack.
 * Each policy starts from cold caches on fresh backends.
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
export interface RoutingBenchOptions {
  quick: boolean;
  backends?: number;
  trajectories?: number;
  turns?: number;
  /** Tokens of each tool observation, drawn uniformly from [lo, hi]. */
  observationTokens?: [number, number];
  policies?: RoutingPolicyName[];
  model?: string;
  outDir: string;
  /** Backends trace every engine step into this folder (`--step-trace`), with `windows.json`: each policy's run. */
  stepTraceDir?: string | undefined;
}

/** One finished turn as the client and the session URL saw it. */
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
  /** From the session URL's turn record. */
  computedTokens: number;
  backend: string;
  mode: string;
  fullReason: string | null;
  /** The turn record's `route` (why it went to its backend); absent from older records. */
  route?: string | null;
  /** TTFT as the trajectory object saw it (backend request to first token frame). */
  doTtftMs: number;
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

export interface CpuBreakdown {
  machineBusyS: number;
  machineTotalS: number;
  backendsS: number;
  edgeS: number;
  clientS: number;
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

// ---------------------------------------------------------------------------------------------
// Pure parts (tested in routing-bench.test.ts)

/** Nearest-rank percentile (p in 0..100) of `xs`; NaN for none. */
export function percentile(xs: readonly number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const sorted = [...xs].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
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
  return {
    hitRate: round(prompt > 0 ? cached / prompt : 0, 4),
    idealHitRate: round(prompt > 0 ? idealCached / prompt : 0, 4),
    throughputTokPerS: round((completion / params.wallMs) * 1000, 2),
    p50TtftMs: round(percentile(ttft, 50), 1),
    p99TtftMs: round(percentile(ttft, 99), 1),
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
    p50DoTtftMs: round(percentile(doTtft, 50), 1),
    p99DoTtftMs: round(percentile(doTtft, 99), 1),
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

// ---------------------------------------------------------------------------------------------

const BLOCK_SIZE = 16; // the backends' default --block-size
const API_KEY = "sk-local-dev";

/**
 * Sizes. --quick fits the four policies in about 5 minutes on the 2-core CPU machine with the
 * demo model (102 M parameters), whose prefill is most of a turn's cost: 6 tools + ~300 tokens of
 * system prompt (~1,330 tokens rendered with the user task), 5 turns, 150-300 token tool
 * observations, 8-12 token replies.
 */
export function workloadSizes(quick: boolean) {
  return quick
    ? { turns: 5, systemTokens: 300, tools: 6, observationTokens: [150, 300] as [number, number], replyTokens: [8, 12] as [number, number] }
    : { turns: 8, systemTokens: 600, tools: 10, observationTokens: [200, 400] as [number, number], replyTokens: [8, 16] as [number, number] };
}

export async function runRoutingBench(o: RoutingBenchOptions): Promise<{ summary: RoutingSummary; details: Partial<Record<RoutingPolicyName, PolicyDetails>> }> {
  const numBackends = o.backends ?? 4;
  const numTrajectories = o.trajectories ?? 32;
  const sizes = workloadSizes(o.quick);
  const turns = o.turns ?? sizes.turns;
  const policies = o.policies ?? [...ROUTING_POLICIES];
  const t0 = performance.now();

  // Default: the embedded demo model (materialized on first use), as the backends serve it.
  const modelDir = o.model;
  const model = await loadModel({ dir: modelDir, log: () => {} });
  const modelId = model.spec.modelId;
  const { codec } = model;
  const countTokens = (t: string) => codec.encode(t).length;
  const workload = makeRoutingWorkload({
    trajectories: numTrajectories,
    turns,
    groupShares: [0.5, 0.2, 0.15, 0.15],
    systemTokens: sizes.systemTokens,
    tools: sizes.tools,
    observationTokens: o.observationTokens ?? sizes.observationTokens,
    replyTokens: sizes.replyTokens,
    pauseMs: [50, 300],
    startSpreadMs: 2000,
    seed: 17,
    countTokens,
  });
  // First prompts as token ids, for the shared prefix of two first turns.
  const firstIds = new Map(
    workload.map((t) => [t.id, codec.encode(codec.render({ messages: t.turns[0]!.newMessages, tools: t.tools, addGenerationPrompt: true }))]),
  );
  const sharedPrefix = (a: string, b: string) => commonPrefix(firstIds.get(a)!, firstIds.get(b)!);
  const meanFirst = [...firstIds.values()].reduce((s, ids) => s + ids.length, 0) / firstIds.size;
  note(
    "routing",
    `${modelId}, ${numBackends} backends x ${numTrajectories} trajectories x ${turns} turns; first prompt ~${Math.round(meanFirst)} tokens; groups ${[0, 1, 2, 3].map((g) => workload.filter((t) => t.group === g).length).join("/")}; policies ${policies.join(", ")}`,
  );

  const details: Partial<Record<RoutingPolicyName, PolicyDetails>> = {};
  const perTurn: Partial<Record<RoutingPolicyName, { results: TurnResult[]; ideal: number[] }>> = {};
  const allTurns: Record<string, unknown[]> = {};
  const dir = mkdtempSync(join(tmpdir(), "agent-edge-routing-"));
  const edgePort = await freePort();
  const backendPorts: number[] = [];
  for (let i = 0; i < numBackends; i++) backendPorts.push(await freePort());
  mkdirSync(o.outDir, { recursive: true });
  const logPath = join(o.outDir, "routing-stack.log");
  writeFileSync(logPath, "");
  const onLine = (line: string) => {
    appendFileSync(logPath, `${new Date().toISOString()} ${line}\n`);
    if (process.env.BENCH_VERBOSE) note("routing", line);
  };
  // The backends run once for all policies (each policy's edge gets its own cache salt, so no
  // policy reuses another's blocks); only the edge restarts, with ROUTING_POLICY set.
  note("routing", `starting ${numBackends} backends`);
  const traceDir = o.stepTraceDir === undefined ? undefined : resolve(o.stepTraceDir);
  if (traceDir) {
    mkdirSync(traceDir, { recursive: true });
    if (readdirSync(traceDir).some((f) => f.endsWith(".jsonl"))) throw new Error(`--step-trace ${traceDir} already holds step traces: give an empty folder`);
  }
  const backendArgs = traceDir ? ["--step-trace", traceDir] : [];
  const backendStack = await startStack({ ...(modelDir ? { modelDir } : {}), backendPorts, edgePort, kvMemory: "1GiB", threads: 1, startEdge: false, backendArgs, onLine });
  const windows: TraceWindow[] = [];
  try {
    await warmUp(backendStack, modelId);
    for (const policy of policies) {
      onLine(`[routing] ---- ${policy} ----`);
      const run = await runPolicy({ policy, backendStack, edgePort, inspectorPort: await freePort(), persistTo: join(dir, policy), workload, modelId, onLine });
      windows.push({ name: policy, fromMs: run.startedAt, toMs: run.startedAt + run.wallMs });
      const ideal = idealCachedTokens(run.results, sharedPrefix, BLOCK_SIZE);
      const firstMismatch = run.results.find((r) => r.turn === 1 && r.promptTokens !== firstIds.get(r.trajectory)!.length);
      if (firstMismatch) note("routing", `note: ${firstMismatch.trajectory} turn 1 has ${firstMismatch.promptTokens} prompt tokens, the local render ${firstIds.get(firstMismatch.trajectory)!.length}`);
      details[policy] = { ...summarizePolicy({ results: run.results, ideal, wallMs: run.wallMs, backends: run.backends, sampledLoad: run.sampledLoad, usage: run.usage }), downSamples: run.downSamples, retries: run.retries, cpu: run.cpu };
      perTurn[policy] = { results: run.results, ideal };
      allTurns[policy] = run.results.map((r, i) => ({ ...r, idealCachedTokens: ideal[i]! }));
      const d = details[policy]!;
      process.stderr.write(`\n${policyTable({ [policy]: d })}\nturns per backend: ${JSON.stringify(d.turnsPerBackend)}; computed prompt tokens per backend: ${JSON.stringify(d.computedPerBackend)}; mean sampled load (pool view): ${JSON.stringify(d.sampledLoadPerBackend)}; full turns ${d.fullTurns}; DO-side TTFT p50/p99 ${d.p50DoTtftMs}/${d.p99DoTtftMs} ms; ideal - cached tokens: ${JSON.stringify(d.lostVsIdeal)}; backend CPU ${d.backendCpuS} s, executor steps ${d.executorS} s in ${d.wallS} s wall; moves by route: ${JSON.stringify(d.movesByRoute)}; pool samples showing a backend down: ${JSON.stringify(d.downSamples)}; resent turns ${d.retries}; CPU s (machine busy/total, backends, edge, client): ${JSON.stringify(d.cpu)}\n\n`);
    }
  } finally {
    await backendStack.stop();
    rmSync(dir, { recursive: true, force: true });
    if (traceDir) {
      writeFileSync(join(traceDir, "windows.json"), `${JSON.stringify(windows)}\n`);
      process.stderr.write(`step traces: ${traceDir} (npm run bench -- step-costs ${o.stepTraceDir})\n`);
    }
  }

  const summary = summaryJson(details);
  process.stderr.write(`\nRouting: ${numBackends} backends, ${numTrajectories} trajectories x ${turns} turns, ${modelId} (${((performance.now() - t0) / 1000).toFixed(0)} s in all)\n${policyTable(details)}\n`);
  process.stderr.write(`CPU during each run (core-seconds):\n${cpuTable(details)}\n`);
  process.stderr.write(`targets: ${JSON.stringify(checkTargets(summary.policies))}\n`);
  const plots = writePlots(o.outDir, perTurn, turns, { numBackends, numTrajectories, modelId });
  const turnsPath = join(o.outDir, "routing-turns.json");
  writeFileSync(turnsPath, `${JSON.stringify({ numBackends, numTrajectories, turns, modelId, details, turnsByPolicy: allTurns })}\n`);
  process.stderr.write(`plots: ${plots.join(", ")}; every turn: ${turnsPath}\n`);
  return { summary, details };
}

async function runPolicy(params: {
  policy: RoutingPolicyName;
  backendStack: Stack;
  edgePort: number;
  inspectorPort: number;
  persistTo: string;
  workload: RoutingTrajectory[];
  modelId: string;
  onLine: (line: string) => void;
}): Promise<{
  results: TurnResult[];
  /** Epoch ms when the workload started. */
  startedAt: number;
  wallMs: number;
  backends: string[];
  sampledLoad: Record<string, number>;
  downSamples: Record<string, number>;
  usage: Record<string, { cpuS: number; executorS: number }>;
  retries: number;
  cpu: CpuBreakdown;
}> {
  const { policy, workload } = params;
  note("routing", `${policy}: starting wrangler dev`);
  let stack: Stack | undefined;
  try {
    stack = await startStack({
      backendUrls: params.backendStack.backendUrls,
      secret: params.backendStack.secret,
      edgePort: params.edgePort,
      inspectorPort: params.inspectorPort,
      // wrangler dev's devtools inspector reports every streamed chunk to its Node process (~40 ms
      // of CPU per turn here), a cost of the local tool that a deployed Worker does not have.
      devtools: false,
      persistTo: params.persistTo,
      // A salt of its own per policy: blocks cached under another policy never hit.
      vars: { ROUTING_POLICY: policy, CACHE_SALT_SECRET: `routing-bench-${policy}-${Date.now()}` },
      onLine: params.onLine,
    });
    const backends = params.backendStack.parts.filter((p) => p.kind === "backend").map((p) => p.name);
    await waitForPool(stack, backends.length);
    note("routing", `${policy}: stack ready in ${stack.readySeconds.toFixed(1)} s; running the workload`);

    const headers = { authorization: `Bearer ${API_KEY}`, "content-type": "application/json" };
    const run = `${policy}-${Date.now().toString(36)}`;
    const progress = new Progress("routing", workload.reduce((a, t) => a + t.turns.length, 0));
    const client: Omit<TurnResult, "computedTokens" | "backend" | "mode" | "fullReason" | "route" | "doTtftMs">[] = [];
    const retries: string[] = [];
    const sampler = samplePool(stack);
    const before = await meters(params.backendStack);
    const cpuBefore = cpuSnapshot(params.backendStack, stack);
    const start = performance.now();
    const startedAt = Date.now();
    await Promise.all(
      workload.map(async (traj) => {
        await sleep(traj.startDelayMs);
        const transcript: ChatMessage[] = [];
        for (let k = 0; k < traj.turns.length; k++) {
          const turn = traj.turns[k]!;
          await sleep(turn.pauseMs);
          transcript.push(...turn.newMessages);
          const body = { model: params.modelId, messages: transcript, tools: traj.tools, max_tokens: turn.maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true } };
          let sent = performance.now();
          let reply: Awaited<ReturnType<typeof streamTurn>>;
          // A failed turn stores nothing, so a client may resend it; count every resend.
          for (let attempt = 1; ; attempt++) {
            try {
              reply = await streamTurn(stack!.edgeUrl, headers, `${run}-${traj.id}`, body);
              break;
            } catch (e) {
              if (attempt >= 3) throw e;
              retries.push(`${traj.id} turn ${k + 1}: ${(e as Error).message.slice(0, 160)}`);
              params.onLine(`[routing] retrying ${traj.id} turn ${k + 1}: ${(e as Error).message}`);
              await sleep(500);
              sent = performance.now();
            }
          }
          transcript.push(reply.message);
          client.push({
            trajectory: traj.id,
            group: traj.group,
            turn: k + 1,
            sentAtMs: sent - start,
            ttftMs: reply.ttftMs,
            totalMs: performance.now() - sent,
            promptTokens: reply.usage.prompt_tokens,
            cachedTokens: reply.usage.prompt_tokens_details?.cached_tokens ?? 0,
            completionTokens: reply.usage.completion_tokens,
          });
          progress.tick(policy);
        }
      }),
    );
    const wallMs = performance.now() - start;
    const after = await meters(params.backendStack);
    const cpuAfter = cpuSnapshot(params.backendStack, stack);
    const cpu = {
      machineBusyS: round(cpuAfter.machineBusyS - cpuBefore.machineBusyS, 1),
      machineTotalS: round(cpuAfter.machineTotalS - cpuBefore.machineTotalS, 1),
      backendsS: round(cpuAfter.backendsS - cpuBefore.backendsS, 1),
      edgeS: round(cpuAfter.edgeS - cpuBefore.edgeS, 1),
      clientS: round(cpuAfter.clientS - cpuBefore.clientS, 1),
    };
    const sampledLoad = await sampler.stop();
    const usage = Object.fromEntries(
      Object.keys(after).map((id) => [id, { cpuS: round(after[id]!.cpuS - (before[id]?.cpuS ?? 0), 1), executorS: round((after[id]!.stepMs - (before[id]?.stepMs ?? 0)) / 1000, 1) }]),
    );

    // Which backend served each turn, what it computed: the session URLs' turn records.
    const records = new Map<string, SessionTurn>();
    for (const traj of workload) {
      const res = await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories/${run}-${traj.id}`, { headers });
      if (!res.ok) throw new Error(`session URL of ${traj.id} answered ${res.status}: ${await res.text()}`);
      const state = (await res.json()) as { turns: SessionTurn[] };
      for (const t of state.turns) records.set(`${traj.id}\u0000${t.turn}`, t);
    }
    const results: TurnResult[] = client.map((c) => {
      const r = records.get(`${c.trajectory}\u0000${c.turn}`);
      if (!r) throw new Error(`no turn record for ${c.trajectory} turn ${c.turn}`);
      return { ...c, computedTokens: r.computed_tokens, backend: r.backend, mode: r.mode, fullReason: r.full_reason, route: r.route ?? null, doTtftMs: r.ttft_ms };
    });
    if (retries.length > 0) note("routing", `${policy}: ${retries.length} turn(s) resent after an error, first: ${retries[0]}`);
    return { results, startedAt, wallMs, backends, sampledLoad: sampledLoad.load, downSamples: sampledLoad.down, usage, retries: retries.length, cpu };
  } finally {
    await stack?.stop();
  }
}

/** One short request straight to each backend, so the first policy does not pay first-run costs. */
async function warmUp(stack: Stack, modelId: string): Promise<void> {
  await Promise.all(
    stack.backendUrls.map(async (url, i) => {
      const frames = generateFrames(
        { url, secret: stack.secret },
        {
          requestId: `warm-${i}`,
          trajectoryId: `warm-${i}`,
          cacheSalt: "routing-bench-warm-up",
          mode: "full",
          messages: [{ role: "user", content: "warm up ".repeat(100) }],
          model: modelId,
          sampling: { maxTokens: 4, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true },
        },
        { timeoutMs: 120_000 },
      );
      for await (const f of frames) if (f.type === "error") throw new Error(`warm-up on ${url}: ${f.code}: ${f.message}`);
    }),
  );
}

interface SessionTurn {
  turn: number;
  mode: string;
  full_reason: string | null;
  route?: string | null;
  computed_tokens: number;
  ttft_ms: number;
  backend: string;
}

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  prompt_tokens_details?: { cached_tokens?: number };
}

/** One streaming chat completion; TTFT is the first chunk with content or a tool call. */
async function streamTurn(edgeUrl: string, headers: Record<string, string>, trajectoryId: string, body: object): Promise<{ message: ChatMessage; usage: Usage; ttftMs: number }> {
  const t0 = performance.now();
  const res = await fetch(`${edgeUrl}/v1/chat/completions`, { method: "POST", headers: { ...headers, "x-trajectory-id": trajectoryId }, body: JSON.stringify(body) });
  if (!res.ok || !res.body) throw new Error(`edge answered ${res.status}: ${await res.text()}`);
  let ttft: number | undefined;
  let text = "";
  const calls: { id: string; type: "function"; function: { name: string; arguments: string } }[] = [];
  let usage: Usage | undefined;
  let pending = "";
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    pending += value;
    const lines = pending.split("\n");
    pending = lines.pop()!;
    for (const line of lines) {
      if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
      const chunk = JSON.parse(line.slice(6)) as {
        error?: { message: string; code: string };
        choices?: { delta?: { content?: string; tool_calls?: { index: number; id: string; function: { name: string; arguments: string } }[] } }[];
        usage?: Usage;
      };
      if (chunk.error) throw new Error(`turn failed mid-stream (${trajectoryId}): ${chunk.error.code}: ${chunk.error.message}`);
      const delta = chunk.choices?.[0]?.delta;
      if (delta?.content || delta?.tool_calls?.length) ttft ??= performance.now() - t0;
      if (delta?.content) text += delta.content;
      for (const c of delta?.tool_calls ?? []) calls[c.index] = { id: c.id, type: "function", function: { name: c.function.name, arguments: c.function.arguments } };
      if (chunk.usage) usage = chunk.usage;
    }
  }
  if (!usage) throw new Error(`no usage chunk for ${trajectoryId}`);
  const message: ChatMessage = calls.length > 0 ? { role: "assistant", content: text || null, tool_calls: calls } : { role: "assistant", content: text };
  return { message, usage, ttftMs: ttft ?? performance.now() - t0 };
}

interface BackendMeters {
  /** Process CPU seconds (onnxruntime threads included). */
  cpuS: number;
  /** Executor time, ms: tokens stepped / the step tokens-per-second gauge (both since start). */
  stepMs: number;
}

/** CPU seconds so far: the machine (/proc/stat), the backends' and the edge's process groups, this process. */
function cpuSnapshot(backendStack: Stack, edgeStack: Stack): CpuBreakdown {
  const hz = 100; // USER_HZ
  const procS = (pids: number[]) =>
    pids.reduce((a, pid) => {
      try {
        const fields = readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /, "").split(" ");
        return a + (Number(fields[11]) + Number(fields[12])) / hz; // utime, stime
      } catch {
        return a;
      }
    }, 0);
  let machineBusyS = 0;
  let machineTotalS = 0;
  try {
    const cpu = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
    machineTotalS = cpu.slice(0, 8).reduce((a, b) => a + b, 0) / hz;
    machineBusyS = machineTotalS - (cpu[3]! + cpu[4]!) / hz; // minus idle and iowait
  } catch {
    // not Linux
  }
  const usage = process.cpuUsage();
  return {
    machineBusyS,
    machineTotalS,
    backendsS: procS(backendStack.pids()),
    edgeS: procS(edgeStack.pids()),
    clientS: (usage.user + usage.system) / 1e6,
  };
}

/** Reads each backend's /metrics (prom-client text). */
async function meters(stack: Stack): Promise<Record<string, BackendMeters>> {
  const out: Record<string, BackendMeters> = {};
  for (const part of stack.parts.filter((p) => p.kind === "backend")) {
    const res = await fetch(`${part.url}/metrics`, { headers: { [SECRET_HEADER]: stack.secret } });
    const text = await res.text();
    const value = (name: string) => Number(new RegExp(`^${name} ([0-9.e+-]+)$`, "m").exec(text)?.[1] ?? 0);
    const tokens = value("agent_edge_computed_prompt_tokens_total") + value("agent_edge_generated_tokens_total");
    const rate = value("agent_edge_step_tokens_per_second");
    out[part.name] = { cpuS: value("agent_edge_process_process_cpu_seconds_total"), stepMs: rate > 0 ? (tokens / rate) * 1000 : 0 };
  }
  return out;
}

/** Waits until every backend has registered with the edge's pool by heartbeat. */
async function waitForPool(stack: Stack, n: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const view = await poolView(stack).catch(() => []);
    if (view.filter((b) => b.source === "registered" && b.up).length >= n) return;
    if (Date.now() > deadline) throw new Error(`only ${view.filter((b) => b.source === "registered").length} of ${n} backends registered with the pool within 30 s`);
    await sleep(250);
  }
}

async function poolView(stack: Stack): Promise<{ id: string; source: string; up: boolean; running: number; waiting: number }[]> {
  const res = await fetch(`${stack.edgeUrl}/v1/pool`, { headers: { [SECRET_HEADER]: stack.secret } });
  if (!res.ok) throw new Error(`GET /v1/pool answered ${res.status}`);
  return ((await res.json()) as { backends: { id: string; source: string; up: boolean; running: number; waiting: number }[] }).backends;
}

/** Samples the pool's view of load (running + waiting, from heartbeats) every second. */
function samplePool(stack: Stack): { stop: () => Promise<{ load: Record<string, number>; down: Record<string, number> }> } {
  const sums = new Map<string, number>();
  const down = new Map<string, number>();
  let samples = 0;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const view = await poolView(stack).catch(() => undefined);
      if (view) {
        samples++;
        for (const b of view) {
          if (b.source !== "registered") continue;
          sums.set(b.id, (sums.get(b.id) ?? 0) + b.running + b.waiting);
          down.set(b.id, (down.get(b.id) ?? 0) + (b.up ? 0 : 1));
        }
      }
      await sleep(1000);
    }
  })();
  return {
    stop: async () => {
      stopped = true;
      await loop;
      return {
        load: Object.fromEntries([...sums].sort().map(([id, s]) => [id, round(s / Math.max(1, samples), 2)])),
        down: Object.fromEntries([...down].sort().filter(([, n]) => n > 0)),
      };
    },
  };
}

/** Writes the hit-rate and TTFT plots of a run (also from a saved routing-turns.json). */
export function writePlots(
  outDir: string,
  perTurn: Partial<Record<RoutingPolicyName, { results: TurnResult[]; ideal: number[] }>>,
  turns: number,
  info: { numBackends: number; numTrajectories: number; modelId: string },
): string[] {
  mkdirSync(outDir, { recursive: true });
  const colors: Record<RoutingPolicyName, string> = { affinity: "#1f77b4", "round-robin": "#d62728", "least-loaded": "#2ca02c", "consistent-hash": "#ff7f0e" };
  const ks = Array.from({ length: turns }, (_, i) => i + 1);
  const entries = Object.entries(perTurn) as [RoutingPolicyName, { results: TurnResult[]; ideal: number[] }][];
  const hitAt = (rs: TurnResult[], k: number, cached: (r: TurnResult, i: number) => number) => {
    let c = 0;
    let p = 0;
    rs.forEach((r, i) => {
      if (r.turn !== k) return;
      c += cached(r, i);
      p += r.promptTokens;
    });
    return p > 0 ? c / p : 0;
  };
  const hitSeries: Series[] = entries.map(([name, { results }]) => ({ name, color: colors[name], points: ks.map((k) => ({ x: k, y: hitAt(results, k, (r) => r.cachedTokens) })) }));
  const first = entries[0];
  if (first) hitSeries.push({ name: "ideal", color: "#7f7f7f", dashed: true, points: ks.map((k) => ({ x: k, y: hitAt(first[1].results, k, (_r, i) => first[1].ideal[i]!) })) });
  const title = `${info.numBackends} backends, ${info.numTrajectories} agent trajectories (${info.modelId}, CPU)`;
  const hitPath = join(outDir, "routing-hit-rate.svg");
  writeFileSync(hitPath, lineChart({ title: `Prefix hit rate per turn: ${title}`, xLabel: "turn", yLabel: "cached / prompt tokens", series: hitSeries, legend: "bottom-right" }));
  const ttftPath = join(outDir, "routing-ttft.svg");
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  writeFileSync(
    ttftPath,
    lineChart({
      title: `Mean time to first token per turn: ${title}`,
      xLabel: "turn",
      yLabel: "TTFT (ms, mean over trajectories)",
      logY: true,
      series: entries.map(([name, { results }]) => ({ name, color: colors[name], points: ks.map((k) => ({ x: k, y: mean(results.filter((r) => r.turn === k).map((r) => r.ttftMs)) })) })),
    }),
  );
  return [hitPath, ttftPath];
}

function commonPrefix(a: number[], b: number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function round(v: number, digits: number): number {
  const p = Math.pow(10, digits);
  return Math.round(v * p) / p;
}
