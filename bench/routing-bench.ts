import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { commonPrefixLength } from "../protocol/common-prefix";
import { ROUTING_POLICIES, type RoutingPolicyName } from "../durable-objects/routing/routing-policy";
import { generateFrames } from "../durable-objects/backend/backend-client";
import { loadModel, type LoadedModel } from "../gpu-backend/engine/load-model";
import { BLOCK_SIZE, greedy } from "./kit/engine";
import { note } from "./kit/progress";
import { round, writeOut } from "./kit/report";
import { startBenchStack, type BenchStack } from "./kit/stack";
import { makeWorkload, WORDS, type WorkloadOptions, type WorkloadTrajectory } from "./kit/workload";
import { runPolicy } from "./routing-policy-run";
import { writePlots } from "./routing-plots";
import type { TraceWindow } from "./studies/step-costs";
import { checkTargets, cpuTable, idealCachedTokens, oracleTable, policyTable, summarizePolicy, summaryJson, type OracleRow, type PolicyDetails, type RoutingSummary, type TurnResult } from "./routing-report";

/**
 * `npm run bench -- routing [--backends N] [--trajectories M] [--turns T] [--quick] [--json]`
 *
 * For each routing policy (affinity, round-robin, least-loaded, consistent-hash) it starts the
 * real local stack (N backends + `wrangler dev` with `ROUTING_POLICY` set), runs the same M
 * concurrent synthetic agent trajectories through the OpenAI-compatible API (streaming, tool
 * pauses between turns), reads every turn's record from the trajectory URLs, and stops the stack.
 * Each policy starts from cold caches on fresh backends.
 *
 * Workload: `routingWorkload` below (kit/workload.ts); one policy's run: routing-policy-run.ts;
 * figures, targets and tables: routing-report.ts (definitions there and in docs/benchmarks.md);
 * plots: routing-plots.ts.
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
  /**
   * The backends' `--kv-pull` (default theirs, auto): `never` turns KV transfer off. Several
   * settings run the policies once per setting, each on backends started with it (backends read
   * it at start); their default policies are then affinity and round-robin.
   */
  kvPull?: KvPull | KvPull[];
  /** `shared` (default): four system-prompt groups; `distinct`: every trajectory its own system prompt and tools. */
  workload?: RoutingWorkloadKind;
}

export type KvPull = "auto" | "always" | "never";
export type RoutingWorkloadKind = "shared" | "distinct";
export const ROUTING_WORKLOADS: readonly RoutingWorkloadKind[] = ["shared", "distinct"];

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

/**
 * The routing workload (also the rolling restart's): trajectories in four groups (one popular,
 * three smaller), each group with its own system prompt and tools, tool pauses between turns,
 * starts spread over 2 s. Its words: the first 56 of `WORDS` (the vocabulary it was written with).
 * `kind: "distinct"`: one group per trajectory (every trajectory its own system prompt and tools,
 * of the same sizes), so no two first prompts share more than the chat template's first tokens.
 */
export function routingWorkload(
  model: LoadedModel,
  o: { trajectories: number; turns: number; quick: boolean; observationTokens?: [number, number]; pauseMs?: [number, number]; seed?: number; kind?: RoutingWorkloadKind },
): WorkloadTrajectory[] {
  const sizes = workloadSizes(o.quick);
  const options: WorkloadOptions = {
    trajectories: o.trajectories,
    turns: o.turns,
    groupShares: o.kind === "distinct" ? Array.from({ length: o.trajectories }, () => 1) : [0.5, 0.2, 0.15, 0.15],
    systemTokens: sizes.systemTokens,
    tools: { count: sizes.tools, descriptionWords: 24, args: 3, argWords: 8 },
    taskTokens: 40,
    observationTokens: o.observationTokens ?? sizes.observationTokens,
    replyTokens: sizes.replyTokens,
    pauseMs: o.pauseMs ?? [50, 300],
    startSpreadMs: 2000,
    vocabulary: WORDS.slice(0, 56),
    seed: o.seed ?? 17,
    countTokens: (t) => model.codec.encode(t).length,
  };
  return makeWorkload(options);
}

/** Tokens two trajectories' first prompts share (their group's system prompt and tools), for `idealCachedTokens`. */
export function sharedFirstPrefix(model: LoadedModel, workload: readonly WorkloadTrajectory[]): { firstIds: Map<string, number[]>; sharedPrefix: (a: string, b: string) => number } {
  const { codec } = model;
  const firstIds = new Map(workload.map((t) => [t.id, codec.encode(codec.render({ messages: t.turns[0]!.newMessages, tools: t.tools, addGenerationPrompt: true }))]));
  return { firstIds, sharedPrefix: (a, b) => commonPrefixLength(firstIds.get(a)!, firstIds.get(b)!) };
}

export async function runRoutingBench(o: RoutingBenchOptions): Promise<{ summary: RoutingSummary | RoutingPullsSummary; details: Partial<Record<RoutingPolicyName, PolicyDetails>> | Partial<Record<KvPull, Partial<Record<RoutingPolicyName, PolicyDetails>>>> }> {
  const settings = o.kvPull === undefined ? [undefined] : [o.kvPull].flat();
  const workloadKind = o.workload ?? "shared";
  if (settings.length === 1) {
    const one = await runSetting({ ...o, kvPull: settings[0] });
    process.stderr.write(`\nAgainst the oracle (ideal placement), workload ${workloadKind}:\n${oracleTable(Object.entries(one.details).map(([policy, d]) => ({ policy, pulls: settings[0] ?? "auto", d: d!, loadAvg: one.loadAvg })))}\n`);
    return { summary: one.summary, details: one.details };
  }
  // Several pull settings: each its own backends (they read --kv-pull at start), its own out folder.
  const policies = o.policies ?? ["affinity", "round-robin"];
  const rows: OracleRow[] = [];
  const byPull: Partial<Record<KvPull, Partial<Record<RoutingPolicyName, PolicyDetails>>>> = {};
  const summary: RoutingPullsSummary = { workload: workloadKind, kvPull: {} };
  for (const kvPull of settings as KvPull[]) {
    const one = await runSetting({ ...o, policies, kvPull, outDir: join(o.outDir, `kv-pull-${kvPull}`) });
    byPull[kvPull] = one.details;
    summary.kvPull[kvPull] = one.summary.policies;
    for (const [policy, d] of Object.entries(one.details)) rows.push({ policy, pulls: kvPull, d: d!, loadAvg: one.loadAvg });
  }
  process.stderr.write(`\nAgainst the oracle (ideal placement), workload ${workloadKind}, kv pull ${settings.join(" / ")}:\n${oracleTable(rows)}\n`);
  writeOut(o.outDir, "routing-pulls.json", `${JSON.stringify({ workload: workloadKind, rows })}\n`);
  return { summary, details: byPull };
}

/** The JSON line of a run over several `--kv-pull` settings: the six figures per setting and policy. */
export interface RoutingPullsSummary {
  workload: RoutingWorkloadKind;
  kvPull: Partial<Record<KvPull, RoutingSummary["policies"]>>;
}

/** Every policy over one set of backends started with one `--kv-pull` setting. */
async function runSetting(o: RoutingBenchOptions & { kvPull: KvPull | undefined }): Promise<{ summary: RoutingSummary; details: Partial<Record<RoutingPolicyName, PolicyDetails>>; loadAvg: number }> {
  const numBackends = o.backends ?? 4;
  const numTrajectories = o.trajectories ?? 32;
  const turns = o.turns ?? workloadSizes(o.quick).turns;
  const policies = o.policies ?? [...ROUTING_POLICIES];
  const t0 = performance.now();
  // The machine's 1-minute load average before this run's processes start (other work on it).
  const loadAvg = round(loadavg()[0]!, 2);

  // Default: the embedded demo model (materialized on first use), as the backends serve it.
  const model = await loadModel({ dir: o.model, log: () => {} });
  const modelId = model.spec.modelId;
  const workload = routingWorkload(model, { trajectories: numTrajectories, turns, quick: o.quick, kind: o.workload, ...(o.observationTokens ? { observationTokens: o.observationTokens } : {}) });
  const { firstIds, sharedPrefix } = sharedFirstPrefix(model, workload);
  const meanFirst = [...firstIds.values()].reduce((s, ids) => s + ids.length, 0) / firstIds.size;
  const groups = [...new Set(workload.map((t) => t.group))].sort((a, b) => a - b);
  note(
    "routing",
    `${modelId}, ${numBackends} backends x ${numTrajectories} trajectories x ${turns} turns, workload ${o.workload ?? "shared"}, kv pull ${o.kvPull ?? "auto"}; first prompt ~${Math.round(meanFirst)} tokens; ${groups.length} groups${groups.length <= 8 ? ` ${groups.map((g) => workload.filter((t) => t.group === g).length).join("/")}` : ""}; policies ${policies.join(", ")}; load average ${loadAvg}`,
  );

  const details: Partial<Record<RoutingPolicyName, PolicyDetails>> = {};
  const perTurn: Partial<Record<RoutingPolicyName, { results: TurnResult[]; ideal: number[] }>> = {};
  const allTurns: Record<string, unknown[]> = {};
  // The backends run once for all policies (each policy's edge gets its own cache salt, so no
  // policy reuses another's blocks); only the edge restarts, with ROUTING_POLICY set.
  note("routing", `starting ${numBackends} backends`);
  const traceDir = o.stepTraceDir === undefined ? undefined : resolve(o.stepTraceDir);
  if (traceDir) {
    mkdirSync(traceDir, { recursive: true });
    if (readdirSync(traceDir).some((f) => f.endsWith(".jsonl"))) throw new Error(`--step-trace ${traceDir} already holds step traces: give an empty folder`);
  }
  const windows: TraceWindow[] = [];
  const stack = await startBenchStack({
    name: "routing",
    backends: numBackends,
    outDir: o.outDir,
    ...(o.model ? { model: o.model } : {}),
    backend: { kvMemory: "1GiB", threads: 1, backendArgs: [...(traceDir ? ["--step-trace", traceDir] : []), ...(o.kvPull ? ["--kv-pull", o.kvPull] : [])] },
    edge: false,
  });
  try {
    await warmUp(stack, modelId);
    for (const policy of policies) {
      stack.onLine(`[routing] ---- ${policy} ----`);
      const run = await runPolicy({ policy, stack, workload, modelId });
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
    await stack.close();
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
  const turnsPath = writeOut(o.outDir, "routing-turns.json", `${JSON.stringify({ numBackends, numTrajectories, turns, modelId, details, turnsByPolicy: allTurns })}\n`);
  process.stderr.write(`plots: ${plots.join(", ")}; every turn: ${turnsPath}\n`);
  return { summary, details, loadAvg };
}

/**
 * One short request straight to each backend, so the first policy does not pay first-run costs.
 *
 * @example await warmUp(stack, model.spec.modelId);
 */
export async function warmUp(stack: BenchStack, modelId: string): Promise<void> {
  await Promise.all(
    stack.backendUrls.map(async (url, i) => {
      const request = { requestId: `warm-${i}`, trajectoryId: `warm-${i}`, cacheSalt: "routing-bench-warm-up", mode: "full" as const, messages: [{ role: "user" as const, content: "warm up ".repeat(100) }], model: modelId, sampling: greedy(4) };
      for await (const f of generateFrames({ url, secret: stack.secret }, request, { timeoutMs: 120_000 })) if (f.type === "error") throw new Error(`warm-up on ${url}: ${f.code}: ${f.message}`);
    }),
  );
}
