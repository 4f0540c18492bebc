import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ChatMessage, DoneFrame, Frame, GenerateRequest } from "../protocol/messages";
import { commonPrefixLength } from "../protocol/common-prefix";
import { MAX_PAUSE_SAMPLES, percentile, predictLeaseReturn, predictLeaseTtl } from "../durable-objects/trajectory/lease-policy";
import { LEASE_DEFAULTS, type LeaseSettings } from "../durable-objects/settings";
import type { Engine } from "../gpu-backend/engine/engine";
import { createEngine } from "../gpu-backend/engine/create-engine";
import { BlockPool } from "../gpu-backend/kv/block-pool";
import { CpuExecutor } from "../gpu-backend/model/executors/cpu-executor";
import { prefillWastePerToken } from "../gpu-backend/model/graph/decoder-spec";
import { materializeTinyModel } from "../gpu-backend/model/checkpoint/demo-model";
import type { Executor } from "../gpu-backend/model/executors/executor";
import { loadModel, type LoadedModel } from "../gpu-backend/engine/load-model";
import { decodeMs, EventQueue, makeLeaseWorkload, prefillMs, TIME_MODEL, type LeaseTrajectory, type LeaseWorkloadParams } from "./lease-workload";
import { Progress, note } from "./progress";
import { lineChart } from "./svg-plot";

export interface LeaseBenchOptions {
  quick: boolean;
  trajectories?: number;
  turns?: number;
  /** Model folder; default: the embedded demo model (`tiny`: the tiny test model). */
  model?: string;
  /** Lease cap as a fraction of the pool (default: the backend's default). */
  leaseCap?: number;
  outDir: string;
  /** Variants to run (default `DEFAULT_VARIANTS`); the first must be plain LRU. */
  variants?: LeaseVariant[];
  seed?: number;
  /** Workload settings over the defaults (lease-workload.ts). */
  workload?: Partial<LeaseWorkloadParams>;
}

/** One way of running the workload. */
export interface LeaseVariant {
  /** Key in the JSON summary. */
  name: string;
  label: string;
  lease: boolean;
  /** The policy sees pauses x this (1/3: real pauses are 3x longer than predicted). Default 1. */
  predictScale?: number;
  /** Default `LEASE_DEFAULTS` (the Durable Object's, unscaled: the clock is virtual). */
  settings?: LeaseSettings;
  /** Lease cap (fraction of the pool); default the backend's (or `--lease-cap`). */
  cap?: number;
  /** Where blocks of expired leases go in the LRU. Default the backend's. */
  expiredTo?: "front" | "back";
  /** Where blocks of capped or broken leases go in the LRU. Default the backend's. */
  droppedTo?: "front" | "back";
  /** Which lease admission breaks. Default the backend's. */
  breakOrder?: "oldest" | "latest-deadline";
  /** Which leases a new lease over the cap ends. Default the backend's ("oldest"). */
  capOrder?: "oldest" | "latest-return";
  /** A prediction above `settings.maxMs`: lease for maxMs (`clamp`) or not at all (`skip`). Default `clamp`. */
  overMax?: "clamp" | "skip";
  /** An oracle: the TTL is the real next pause + 1 ms (the best any prediction could do). */
  oracle?: boolean;
  /**
   * A prediction of when the agent comes back (ms after the lease), sent as the lease's
   * `expectedReturnMs`: the break order's key instead of the deadline. Sees the same (scaled)
   * samples as the TTL; `nextPauseMs` (the real next pause) is there for an oracle only. Without
   * it, leases break by deadline (the previous default). The default variants use the DO's
   * `predictLeaseReturn`.
   */
  /** A host KV tier this many times the pool's size (evicted blocks kept and copied back on a hit; kv/host-tier.ts). Default none. */
  hostTier?: number;
  predictReturn?: (p: { pauses: readonly number[]; fallbackPauses: readonly number[]; settings: LeaseSettings; ttlMs: number; nextPauseMs: number }) => number;
}

export const DEFAULT_VARIANTS: LeaseVariant[] = [
  { name: "lru", label: "lru", lease: false },
  // As the Durable Object does: TTL by predictLeaseTtl, expected return by predictLeaseReturn.
  { name: "leases", label: "leases", lease: true, predictReturn: predictLeaseReturn },
  { name: "leasesMispredicted", label: "leases, pauses 3x predicted", lease: true, predictScale: 1 / 3, predictReturn: predictLeaseReturn },
  // The leases above plus a host tier twice the pool (host memory is the larger one).
  { name: "hostTier", label: "leases + host tier (2x pool)", lease: true, predictReturn: predictLeaseReturn, hostTier: 2 },
];

/** Per variant, what the issue asks for (times on the virtual clock, see lease-workload.ts). */
export interface VariantResult {
  reprefilledTokens: number;
  hitRate: number;
  /** Simulated: first arrival to last turn done. */
  jctMs: number;
  /** Simulated: mean over trajectories of first arrival to last turn done. */
  meanJctMs: number;
  /** Simulated: queueing + prefill, p99 over all turns. */
  p99TtftMs: number;
  /** Simulated GPU prefill time, all turns. */
  prefillMs: number;
  computedTokens: number;
  promptTokens: number;
  leases?: { created: number; refused: number; skipped: number; hits: number; savedTokens: number; expired: number; broken: number; capped: number };
  /** With a host tier: blocks copied into it on eviction, and prompt tokens brought back from it. */
  hostTier?: { storedBlocks: number; hitTokens: number };
}

export interface TurnRecord {
  trajectory: number;
  turn: number;
  promptTokens: number;
  cachedTokens: number;
  computedTokens: number;
  reprefilled: number;
  ttftMs: number;
  doneMs: number;
}

/**
 * `npm run bench -- leases [--quick] [--json] [--trajectories M] [--turns T] [--model DIR|tiny] [--lease-cap F]`
 *
 * A discrete-event simulation on a virtual clock around the real engine: M agent trajectories
 * (lease-workload.ts: Poisson arrivals, heavy-tailed tool pauses in seconds) share one in-process
 * engine (CpuExecutor) whose KV pool holds about a third of their final contexts. Events run in
 * virtual-time order: a turn arrives (trajectory start, or the end of its tool pause), waits for
 * the modeled GPU's prefill, and runs on the real engine, whose prefix cache and leases decide
 * what it computes; its modeled prefill + decode time sets when it is done; then the agent calls
 * a tool. The turn's blocks stay pinned (in use) until its simulated end, as a running sequence
 * would keep them. The lease table, the Durable Object's alarm and its pause samples all use the
 * virtual clock, so a seed gives the same figures on every run.
 *
 * Variants: `lru` (no leases); `leases` (after every turn but the last, `predictLeaseTtl` over
 * the trajectory's observed pauses, else the pooled recent pauses of all, else the default;
 * granted and alarmed as the DO does); `leasesMispredicted` (the policy sees pauses 3x shorter
 * than the real ones).
 *
 * Re-prefilled tokens of a turn: computed prompt tokens minus those no cache could have supplied
 * (the prompt beyond the full blocks of the trajectory's previous prompt + reply).
 */
export async function runLeaseBench(o: LeaseBenchOptions): Promise<{ summary: Record<string, unknown>; details: Record<string, unknown> }> {
  return withModel(o.model, async (model) => {
    const { codec, spec } = model;
    const M = o.trajectories ?? (o.quick ? 64 : 128);
    const T = o.turns ?? (o.quick ? 6 : 8);
    const blockSize = 16;
    const workloadParams: LeaseWorkloadParams = { trajectories: M, turns: T, seed: o.seed ?? 11, systemWords: o.quick ? 160 : 240, observationWords: o.quick ? [60, 160] : [80, 220], ...o.workload };
    const workload = makeLeaseWorkload(workloadParams);
    const { numBlocks, finalTokens, totalBlocks, workingSetBlocks } = poolFor(workload, model, blockSize);
    const variants = (o.variants ?? DEFAULT_VARIANTS).map((v) => (v.lease && v.cap === undefined && o.leaseCap !== undefined ? { ...v, cap: o.leaseCap } : v));
    const pauses = workload.flatMap((t) => t.pausesMs);
    const medians = workload.map((t) => t.toolMedianMs);
    const q = (xs: number[], p: number) => Math.round(percentile(xs, p));
    note("leases", `${M} trajectories x ${T} turns, arrivals over ${(workload.at(-1)!.startMs / 1000).toFixed(0)} s (virtual); final contexts ${Math.min(...finalTokens)}-${Math.max(...finalTokens)} tokens (${totalBlocks} blocks in all, ${workingSetBlocks} active at once on average); pool ${numBlocks} blocks of ${blockSize}`);
    note("leases", `tool medians per trajectory (ms): p10 ${q(medians, 0.1)} p50 ${q(medians, 0.5)} p90 ${q(medians, 0.9)} max ${Math.max(...medians)}; pauses p50 ${q(pauses, 0.5)} p90 ${q(pauses, 0.9)} p99 ${q(pauses, 0.99)} max ${Math.max(...pauses)}`);
    note("leases", `time is SIMULATED: modeled GPU prefill ${TIME_MODEL.prefillTokensPerS} tokens/s (one at a time), decode ${TIME_MODEL.decodeMsPerToken} ms/token (batched); tool pauses on the virtual clock`);

    const executor = await CpuExecutor.create({ spec, weights: model.weights, numBlocks, blockSize, threads: 1 });
    let runs: Record<string, { result: VariantResult; records: TurnRecord[] }>;
    try {
      runs = await runLeaseVariants({ model, executor, workload, numBlocks, blockSize, variants, progress: true });
    } finally {
      await executor.dispose();
    }

    const base = runs[variants[0]!.name]!.result;
    const reductionOf = (name: string) => round(1 - (runs[name]?.result.reprefilledTokens ?? NaN) / Math.max(1, base.reprefilledTokens), 3);
    const summary: Record<string, unknown> = Object.fromEntries(variants.map((v) => [v.name, runs[v.name]!.result]));
    if (runs.leases) {
      summary.reprefillReduction = reductionOf("leases");
      if (runs.leasesMispredicted) summary.reprefillReductionMispredicted = reductionOf("leasesMispredicted");
      if (runs.hostTier) summary.reprefillReductionHostTier = reductionOf("hostTier");
      summary.targetMet = reductionOf("leases") >= 0.3;
    }
    const details = {
      model: spec.modelId,
      simulatedTime: { ...TIME_MODEL, note: "JCT and TTFT are simulated; token counts come from the real engine" },
      workload: { ...workloadParams, arrivalsOverMs: workload.at(-1)!.startMs },
      numBlocks,
      blockSize,
      totalBlocks,
      workingSetBlocks,
      pausesMs: { p50: q(pauses, 0.5), p90: q(pauses, 0.9), p99: q(pauses, 0.99), max: Math.max(...pauses) },
      toolMediansMs: { p10: q(medians, 0.1), p50: q(medians, 0.5), p90: q(medians, 0.9), max: Math.max(...medians) },
      variants: variants.map((v) => ({ ...v, settings: v.settings ?? LEASE_DEFAULTS })),
    };
    process.stderr.write(`\n${table(variants, runs, base)}\n`);

    mkdirSync(o.outDir, { recursive: true });
    const plot = join(o.outDir, "lease-reprefill.svg");
    const colors = ["#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
    const cumulative = (records: TurnRecord[]) => {
      let acc = 0;
      return [...records].sort((a, b) => a.doneMs - b.doneMs).map((r, i) => ({ x: i + 1, y: (acc += r.reprefilled) }));
    };
    writeFileSync(
      plot,
      lineChart({
        title: `Re-prefilled tokens, cumulative (${M} agents x ${T} turns, pool = 1/3 of the active working set)`,
        xLabel: "turns finished (simulated-time order)",
        yLabel: "re-prefilled tokens",
        series: variants.map((v, i) => ({ name: v.label, color: colors[i % colors.length]!, points: cumulative(runs[v.name]!.records) })),
      }),
    );
    process.stderr.write(`plot: ${plot}\n`);
    return { summary, details };
  });
}

/** Loads `dir` (`tiny`: the tiny test model, written to a temporary folder) for `fn`. */
export async function withModel<R>(dir: string | undefined, fn: (model: LoadedModel) => Promise<R>): Promise<R> {
  const tmp = dir === "tiny" ? mkdtempSync(join(tmpdir(), "lease-bench-")) : undefined;
  try {
    const model = await loadModel({ dir: tmp ? await materializeTinyModel(join(tmp, "tiny")) : dir, log: (l) => note("leases", l) });
    return await fn(model);
  } finally {
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  }
}

/**
 * A pool of about a third of the working set: the blocks of the trajectories active at once
 * (final context of each, from its arrival to its last turn), averaged over the arrival window;
 * at least six of the largest contexts (turns still decoding keep theirs in use).
 */
export function poolFor(workload: readonly LeaseTrajectory[], model: LoadedModel, blockSize: number): { numBlocks: number; finalTokens: number[]; totalBlocks: number; workingSetBlocks: number } {
  const { codec } = model;
  const finalTokens = workload.map((t) => {
    const msgs: ChatMessage[] = [{ role: "system", content: t.system }, { role: "user", content: t.task }];
    for (const obs of t.observations) msgs.push({ role: "assistant", content: "x ".repeat(12) }, { role: "tool", content: obs, tool_call_id: "c" });
    return codec.encode(codec.render({ messages: msgs, addGenerationPrompt: true })).length + 16;
  });
  const blocks = finalTokens.map((n) => Math.ceil(n / blockSize));
  const totalBlocks = blocks.reduce((a, n) => a + n, 0);
  const from = workload[0]!.startMs;
  const to = Math.max(from + 1, workload.at(-1)!.startMs);
  let area = 0;
  workload.forEach((t, i) => {
    const end = t.startMs + t.pausesMs.reduce((a, b) => a + b, 0);
    area += blocks[i]! * Math.max(0, Math.min(end, to) - Math.max(t.startMs, from));
  });
  const workingSetBlocks = Math.round(area / (to - from));
  const numBlocks = Math.max(Math.max(...blocks) * 6, Math.round(workingSetBlocks / 3));
  return { numBlocks, finalTokens, totalBlocks, workingSetBlocks };
}

/** Runs each variant on a fresh engine and pool over one executor. */
export async function runLeaseVariants(p: {
  model: LoadedModel;
  executor: Executor;
  workload: readonly LeaseTrajectory[];
  numBlocks: number;
  blockSize: number;
  variants: readonly LeaseVariant[];
  progress?: boolean;
}): Promise<Record<string, { result: VariantResult; records: TurnRecord[] }>> {
  const out: Record<string, { result: VariantResult; records: TurnRecord[] }> = {};
  for (const v of p.variants) {
    out[v.name] = await simulate({ ...p, variant: v });
    if (p.progress) note("leases", `${v.label}: ${JSON.stringify(out[v.name]!.result)}`);
  }
  return out;
}

type SimEvent = { kind: "arrive"; t: number; k: number } | { kind: "serve" } | { kind: "done"; t: number; k: number; pinned: number[] } | { kind: "alarm"; t: number; stateId: string };

interface TrajectoryState {
  stateId: string | undefined;
  previous: number[];
  /** Its observed tool pauses (the DO keeps the latest MAX_PAUSE_SAMPLES). */
  pauses: number[];
  doneAt: number;
  /** The state whose lease alarm is set, if any. */
  alarmFor: string | undefined;
}

/** The tenant's pooled pause sample (TenantIndexDO keeps its latest 256). */
const TENANT_PAUSES = 256;

async function simulate(p: { model: LoadedModel; executor: Executor; workload: readonly LeaseTrajectory[]; numBlocks: number; blockSize: number; variant: LeaseVariant; progress?: boolean }): Promise<{ result: VariantResult; records: TurnRecord[] }> {
  const { model, workload, variant: v, blockSize } = p;
  const settings = v.settings ?? LEASE_DEFAULTS;
  const clock = { now: 0 };
  const pool = new BlockPool({ numBlocks: p.numBlocks, blockSize });
  const engine = createEngine({
    executor: p.executor,
    pool,
    codec: model.codec,
    modelId: model.spec.modelId,
    scheduler: { maxBatchTokens: 512, maxRunningSequences: 1, blockSize, prefillWastePerToken: prefillWastePerToken(model.spec) },
    enablePrefixCache: true,
    backendId: "bench",
    ...(v.hostTier ? { hostTierBytes: Math.round(v.hostTier * p.numBlocks) * p.executor.blockIO!.bytesPerBlock } : {}),
    leases: { now: () => clock.now, ...(v.cap !== undefined ? { maxLeasedFraction: v.cap } : {}), ...(v.expiredTo ? { expiredTo: v.expiredTo } : {}), ...(v.droppedTo ? { droppedTo: v.droppedTo } : {}), ...(v.breakOrder ? { breakOrder: v.breakOrder } : {}), ...(v.capOrder ? { capOrder: v.capOrder } : {}) },
  });
  const total = workload.reduce((a, t) => a + t.observations.length + 1, 0);
  const progress = p.progress ? new Progress("leases", total) : undefined;
  const records: TurnRecord[] = [];
  const tenantPauses: number[] = [];
  const traj: TrajectoryState[] = workload.map(() => ({ stateId: undefined, previous: [], pauses: [], doneAt: 0, alarmFor: undefined }));
  const finishedAt: number[] = workload.map(() => NaN);
  const queue = new EventQueue<SimEvent>();
  const waiting: { t: number; k: number; arrivedAt: number }[] = [];
  let serveScheduled = false;
  let gpuFreeAt = 0;
  let prefillTotal = 0;
  let skipped = 0;
  for (let t = 0; t < workload.length; t++) queue.push(workload[t]!.startMs, { kind: "arrive", t, k: 0 });

  for (let e = queue.pop(); e; e = queue.pop()) {
    clock.now = e.at;
    const ev = e.event;
    if (ev.kind === "arrive") {
      const s = traj[ev.t]!;
      if (ev.k > 0) {
        // The DO's beforeTurn: record the pause, cancel the alarm.
        const pause = e.at - s.doneAt;
        s.pauses.push(pause);
        if (s.pauses.length > MAX_PAUSE_SAMPLES) s.pauses.shift();
        tenantPauses.push(pause);
        if (tenantPauses.length > TENANT_PAUSES) tenantPauses.shift();
        s.alarmFor = undefined;
      }
      // The backend ends the state's lease when the turn reaches it, before it queues for the GPU.
      if (s.stateId) engine.leases.onTurn(request(workload[ev.t]!, ev.t, ev.k, s.stateId));
      waiting.push({ t: ev.t, k: ev.k, arrivedAt: e.at });
      if (!serveScheduled) {
        serveScheduled = true;
        queue.push(Math.max(e.at, gpuFreeAt), { kind: "serve" });
      }
    } else if (ev.kind === "serve") {
      const job = waiting.shift()!;
      const w = workload[job.t]!;
      const s = traj[job.t]!;
      const done = await submit(engine, request(w, job.t, job.k, s.stateId));
      const state = engine.states.get(done.stateId)!;
      const prompt = state.promptTokenIds;
      // Tokens no cache could supply: beyond the full blocks of the previous prompt + reply it extends.
      const reusable = Math.floor(commonPrefixLength(s.previous, prompt) / blockSize) * blockSize;
      const unavoidable = Math.max(1, prompt.length - Math.min(reusable, Math.floor((prompt.length - 1) / blockSize) * blockSize));
      const fill = prefillMs(done.usage.computedTokens);
      prefillTotal += fill;
      const doneAt = e.at + fill + decodeMs(done.usage.completionTokens);
      records.push({
        trajectory: job.t,
        turn: job.k,
        promptTokens: done.usage.promptTokens,
        cachedTokens: done.usage.cachedTokens,
        computedTokens: done.usage.computedTokens,
        reprefilled: Math.max(0, done.usage.computedTokens - unavoidable),
        ttftMs: e.at + fill - job.arrivedAt,
        doneMs: doneAt,
      });
      s.previous = [...prompt, ...state.generatedTokenIds];
      s.stateId = done.stateId;
      // Still decoding until doneAt: its blocks stay in use, as a running sequence's would.
      const pinned = engine.kv.findCachedPrefix({ tokenIds: s.previous, root: state.hashRoot }).blockIds;
      pool.acquire(pinned);
      queue.push(doneAt, { kind: "done", t: job.t, k: job.k, pinned });
      gpuFreeAt = e.at + fill;
      if (waiting.length > 0) queue.push(gpuFreeAt, { kind: "serve" });
      else serveScheduled = false;
    } else if (ev.kind === "done") {
      pool.release(ev.pinned);
      progress?.tick(v.label);
      const s = traj[ev.t]!;
      const w = workload[ev.t]!;
      s.doneAt = e.at;
      if (ev.k === w.observations.length) {
        finishedAt[ev.t] = e.at;
        continue;
      }
      // The agent calls a tool: the DO's afterTurn leases for the predicted pause and sets its alarm.
      if (v.lease) {
        const scale = (xs: number[]) => xs.map((x) => x * (v.predictScale ?? 1));
        const unclamped = predictLeaseTtl({ pauses: scale(s.pauses), fallbackPauses: scale(tenantPauses), settings: { ...settings, maxMs: Infinity } }).ttlMs;
        const ttlMs = v.oracle ? w.pausesMs[ev.k]! + 1 : unclamped > settings.maxMs ? (v.overMax === "skip" ? null : settings.maxMs) : unclamped;
        if (ttlMs === null) skipped++;
        else {
          const expectedReturnMs = v.predictReturn?.({ pauses: scale(s.pauses), fallbackPauses: scale(tenantPauses), settings, ttlMs, nextPauseMs: w.pausesMs[ev.k]! });
          const r = engine.leases.lease(s.stateId!, ttlMs, expectedReturnMs);
          if (r.leased) {
            s.alarmFor = s.stateId;
            queue.push(r.expiresAt, { kind: "alarm", t: ev.t, stateId: s.stateId! });
          }
        }
      }
      queue.push(e.at + w.pausesMs[ev.k]!, { kind: "arrive", t: ev.t, k: ev.k + 1 });
    } else {
      const s = traj[ev.t]!;
      if (s.alarmFor !== ev.stateId) continue;
      s.alarmFor = undefined;
      engine.leases.release(ev.stateId, true);
    }
  }

  const sum = (f: (r: TurnRecord) => number) => records.reduce((a, r) => a + f(r), 0);
  const c = engine.leases.table.counters;
  const spans = workload.map((w, t) => finishedAt[t]! - w.startMs);
  const result: VariantResult = {
    reprefilledTokens: sum((r) => r.reprefilled),
    hitRate: round(sum((r) => r.cachedTokens) / sum((r) => r.promptTokens), 3),
    jctMs: Math.round(Math.max(...finishedAt) - Math.min(...workload.map((w) => w.startMs))),
    meanJctMs: Math.round(spans.reduce((a, b) => a + b, 0) / spans.length),
    p99TtftMs: round(percentile(records.map((r) => r.ttftMs), 0.99), 1),
    prefillMs: Math.round(prefillTotal),
    computedTokens: sum((r) => r.computedTokens),
    promptTokens: sum((r) => r.promptTokens),
    ...(v.lease ? { leases: { created: c.created, refused: c.refused, skipped, hits: c.hits, savedTokens: c.savedTokens, expired: c.expired, broken: c.broken, capped: c.capped } } : {}),
    ...(engine.hostTier ? { hostTier: { storedBlocks: engine.hostTier.stats.puts, hitTokens: engine.hostTier.stats.hitBlocks * blockSize } } : {}),
  };
  return { result, records };
}

function request(w: LeaseTrajectory, t: number, k: number, stateId: string | undefined): GenerateRequest {
  const messages: ChatMessage[] = k === 0 ? [{ role: "system", content: w.system }, { role: "user", content: w.task }] : [{ role: "tool", content: w.observations[k - 1]!, tool_call_id: `call_${t}_${k}` }];
  return {
    requestId: `${w.id}-${k}`,
    trajectoryId: w.id,
    mode: k === 0 ? "full" : "delta",
    messages,
    sampling: { maxTokens: w.maxTokens[k]!, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true },
    ...(stateId ? { stateId } : {}),
  };
}

function table(variants: readonly LeaseVariant[], runs: Record<string, { result: VariantResult }>, base: VariantResult): string {
  const rows = [
    "| variant | re-prefilled | vs lru | hit rate | JCT s (sim) | mean JCT s (sim) | p99 TTFT ms (sim) | prefill s (sim) | leases created / hits / expired / capped / broken / skipped | saved tokens |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
  ];
  const fmt = (n: number) => n.toLocaleString("en-US");
  for (const v of variants) {
    const r = runs[v.name]!.result;
    const change = r === base ? "" : `${r.reprefilledTokens <= base.reprefilledTokens ? "-" : "+"}${Math.abs(100 * (1 - r.reprefilledTokens / Math.max(1, base.reprefilledTokens))).toFixed(1)}%`;
    const l = r.leases;
    rows.push(
      `| ${v.label} | ${fmt(r.reprefilledTokens)} | ${change} | ${r.hitRate.toFixed(3)} | ${(r.jctMs / 1000).toFixed(1)} | ${(r.meanJctMs / 1000).toFixed(1)} | ${r.p99TtftMs.toFixed(1)} | ${(r.prefillMs / 1000).toFixed(2)} | ${l ? `${l.created} / ${l.hits} / ${l.expired} / ${l.capped} / ${l.broken} / ${l.skipped}` : ""} | ${l ? fmt(l.savedTokens) : ""} |`,
    );
  }
  return rows.join("\n");
}

function submit(engine: Engine, req: GenerateRequest): Promise<DoneFrame> {
  return new Promise((resolve, reject) => {
    engine.submit(req, (f: Frame) => {
      if (f.type === "done") resolve(f);
      else if (f.type === "error") reject(new Error(`${f.code}: ${f.message}`));
    });
  });
}

function round(v: number, digits: number): number {
  const p = Math.pow(10, digits);
  return Math.round(v * p) / p;
}
