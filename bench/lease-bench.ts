import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ChatMessage, DoneFrame, Frame, GenerateRequest } from "../protocol/messages";
import { LEASE_DEFAULTS, percentile, predictLeaseTtl, type LeaseSettings } from "../durable-objects/lease-policy";
import { Engine } from "../gpu-backend/engine/engine";
import { BlockPool } from "../gpu-backend/kv/block-pool";
import { CpuExecutor } from "../gpu-backend/model/cpu-executor";
import { prefillWastePerToken } from "../gpu-backend/model/decoder-spec";
import { materializeTinyModel } from "../gpu-backend/model/demo-model";
import { loadModel, type LoadedModel } from "../gpu-backend/model/load-model";
import { mulberry32 } from "../gpu-backend/model/random-weights";
import { Progress, note } from "./progress";
import { lineChart } from "./svg-plot";

export interface LeaseBenchOptions {
  quick: boolean;
  trajectories?: number;
  turns?: number;
  /** Model folder; default: the embedded demo model (`tiny`: the tiny test model). */
  model?: string;
  /** Lease cap as a fraction of the pool (default 0.25, the backend's default). */
  leaseCap?: number;
  outDir: string;
}

/** Per variant, what the issue asks for. */
export interface VariantResult {
  reprefilledTokens: number;
  hitRate: number;
  jctMs: number;
  p99TtftMs: number;
  computedTokens: number;
  promptTokens: number;
  meanTrajectoryMs: number;
  leases?: { created: number; hits: number; savedTokens: number; expired: number; broken: number; capped: number };
}

/**
 * Lease time scale: the workload's tool pauses are scaled down ~100x from real agents (tens of
 * milliseconds to seconds instead of seconds to minutes) so a run takes a minute; the lease
 * settings are scaled alike (default TTL 1 s instead of 15 s, bounds [50 ms, 10 s]).
 */
export const BENCH_LEASE_SETTINGS: LeaseSettings = { ...LEASE_DEFAULTS, minMs: 50, maxMs: 10_000, defaultMs: 1000 };

interface Workload {
  trajectories: { id: string; system: string; task: string; observations: string[]; maxTokens: number[]; pausesMs: number[]; startMs: number }[];
}

/**
 * `npm run bench -- leases [--quick] [--json] [--trajectories M] [--turns T] [--model DIR|tiny] [--lease-cap F]`
 *
 * M agent trajectories run concurrently on one in-process engine whose KV pool holds about a third
 * of their final contexts. Between turns each agent "runs a tool" for a pause drawn from a
 * heavy-tailed distribution (per trajectory a log-uniform median in [100 ms, 1.2 s], times a
 * lognormal with sigma 1; seeded). The same workload runs three times:
 *
 * - `lru`: plain LRU eviction (no leases);
 * - `leases`: after each turn that will be followed by another (the agent called a tool), the
 *   trajectory's state is leased for `predictLeaseTtl` (the Durable Object's policy: p90 of its
 *   observed pauses, else the pooled p90 of all trajectories so far, else the default; x1.5,
 *   clamped; `BENCH_LEASE_SETTINGS`);
 * - `leasesMispredicted`: the same, but the policy sees pauses 3x shorter than the real ones
 *   (actual pauses are 3x longer than predicted).
 *
 * Re-prefilled tokens of a turn: computed prompt tokens minus those no cache could have supplied
 * (the prompt beyond the full blocks of the trajectory's previous prompt + reply).
 */
export async function runLeaseBench(o: LeaseBenchOptions): Promise<{ summary: Record<string, unknown>; details: Record<string, unknown> }> {
  const tmp = o.model === "tiny" ? mkdtempSync(join(tmpdir(), "lease-bench-")) : undefined;
  try {
    const model = await loadModel({ dir: tmp ? await materializeTinyModel(join(tmp, "tiny")) : o.model, log: (l) => note("leases", l) });
    return await bench(o, model);
  } finally {
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  }
}

async function bench(o: LeaseBenchOptions, model: LoadedModel): Promise<{ summary: Record<string, unknown>; details: Record<string, unknown> }> {
  const { spec, codec } = model;
  const M = o.trajectories ?? 24;
  const T = o.turns ?? (o.quick ? 5 : 8);
  const blockSize = 16;
  const cap = o.leaseCap ?? 0.25;
  const workload = makeWorkload({ trajectories: M, turns: T, seed: 11, systemWords: o.quick ? 160 : 240, observationWords: o.quick ? [60, 160] : [80, 220] });

  // Size the pool to about a third of the trajectories' final contexts.
  const finalTokens = workload.trajectories.map((t) => {
    const msgs: ChatMessage[] = [{ role: "system", content: t.system }, { role: "user", content: t.task }];
    for (const obs of t.observations) msgs.push({ role: "assistant", content: "x ".repeat(12) }, { role: "tool", content: obs, tool_call_id: "c" });
    return codec.encode(codec.render({ messages: msgs, addGenerationPrompt: true })).length + 16;
  });
  const totalBlocks = finalTokens.reduce((a, n) => a + Math.ceil(n / blockSize), 0);
  const numBlocks = Math.max(Math.ceil(Math.max(...finalTokens) / blockSize) * 3, Math.round(totalBlocks / 3));
  note("leases", `${M} trajectories x ${T} turns, final contexts ${Math.min(...finalTokens)}-${Math.max(...finalTokens)} tokens (${totalBlocks} blocks in all); pool ${numBlocks} blocks of ${blockSize}; lease cap ${cap}`);
  const executor = await CpuExecutor.create({ spec, weights: model.weights, numBlocks, blockSize });
  const makeEngine = () =>
    new Engine({
      executor,
      pool: new BlockPool({ numBlocks, blockSize }),
      codec,
      modelId: spec.modelId,
      // Two turns at a time: running work stays well inside the pool, so what is measured is what
      // survives a tool pause, not preemption thrash among 24 concurrent prefills.
      scheduler: { maxBatchTokens: 512, maxRunningSequences: 2, blockSize, prefillWastePerToken: prefillWastePerToken(spec) },
      enablePrefixCache: true,
      backendId: "bench",
      leases: { maxLeasedFraction: cap },
    });

  // Warm the executor's shapes once, outside the measured runs.
  await makeEngine().generateTokens({ tokenIds: codec.encode("warm up ".repeat(64)), sampling: { maxTokens: 4, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true } });

  // One untimed pass first: onnxruntime's first runs of each shape are slow, and whichever
  // variant ran first would pay for them.
  await runVariant(makeEngine(), workload, { label: "warm-up (lru, not reported)", lease: false, predictScale: 1 });
  const runs = {
    lru: await runVariant(makeEngine(), workload, { label: "lru", lease: false, predictScale: 1 }),
    leases: await runVariant(makeEngine(), workload, { label: "leases", lease: true, predictScale: 1 }),
    leasesMispredicted: await runVariant(makeEngine(), workload, { label: "leases, pauses 3x predicted", lease: true, predictScale: 1 / 3 }),
  };
  await executor.dispose();

  const reduction = 1 - runs.leases.result.reprefilledTokens / Math.max(1, runs.lru.result.reprefilledTokens);
  const reductionMispredicted = 1 - runs.leasesMispredicted.result.reprefilledTokens / Math.max(1, runs.lru.result.reprefilledTokens);
  const allPauses = workload.trajectories.flatMap((t) => t.pausesMs);
  const summary = {
    lru: runs.lru.result,
    leases: runs.leases.result,
    leasesMispredicted: runs.leasesMispredicted.result,
    reprefillReduction: round(reduction, 3),
    reprefillReductionMispredicted: round(reductionMispredicted, 3),
    targetMet: reduction >= 0.3,
  };
  const details = {
    model: spec.modelId,
    trajectories: M,
    turns: T,
    numBlocks,
    blockSize,
    leaseCap: cap,
    pausesMs: { p50: Math.round(percentile(allPauses, 0.5)), p90: Math.round(percentile(allPauses, 0.9)), p99: Math.round(percentile(allPauses, 0.99)), max: Math.round(Math.max(...allPauses)) },
    settings: BENCH_LEASE_SETTINGS,
  };

  mkdirSync(o.outDir, { recursive: true });
  const plot = join(o.outDir, "lease-reprefill.svg");
  const cumulative = (records: TurnRecord[]) => {
    let acc = 0;
    return records.map((r, i) => ({ x: i + 1, y: (acc += r.reprefilled) }));
  };
  writeFileSync(
    plot,
    lineChart({
      title: `Re-prefilled tokens, cumulative (${M} agents, pool = 1/3 of their contexts)`,
      xLabel: "turns finished",
      yLabel: "re-prefilled tokens",
      series: [
        { name: "LRU", color: "#d62728", points: cumulative(runs.lru.records) },
        { name: "leases", color: "#1f77b4", points: cumulative(runs.leases.records) },
        { name: "leases, pauses 3x predicted", color: "#ff7f0e", points: cumulative(runs.leasesMispredicted.records) },
      ],
    }),
  );
  process.stderr.write(`\n${JSON.stringify({ ...summary, details }, null, 2)}\nplot: ${plot}\n`);
  return { summary, details };
}

interface TurnRecord {
  trajectory: number;
  turn: number;
  promptTokens: number;
  cachedTokens: number;
  computedTokens: number;
  reprefilled: number;
  ttftMs: number;
}

async function runVariant(engine: Engine, workload: Workload, v: { label: string; lease: boolean; predictScale: number }): Promise<{ result: VariantResult; records: TurnRecord[] }> {
  const progress = new Progress("leases", workload.trajectories.reduce((a, t) => a + t.observations.length + 1, 0));
  const records: TurnRecord[] = [];
  const pooledPauses: number[] = [];
  const trajectoryMs: number[] = [];
  const B = engine.kv.blockSize;
  const t0 = performance.now();
  await Promise.all(
    workload.trajectories.map(async (traj, t) => {
      await sleep(traj.startMs);
      const tStart = performance.now();
      const pauses: number[] = [];
      let stateId: string | undefined;
      let previous: number[] = [];
      for (let k = 0; k <= traj.observations.length; k++) {
        const messages: ChatMessage[] =
          k === 0 ? [{ role: "system", content: traj.system }, { role: "user", content: traj.task }] : [{ role: "tool", content: traj.observations[k - 1]!, tool_call_id: `call_${t}_${k}` }];
        const req: GenerateRequest = {
          requestId: `${traj.id}-${k}`,
          trajectoryId: traj.id,
          mode: k === 0 ? "full" : "delta",
          messages,
          sampling: { maxTokens: traj.maxTokens[k]!, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true },
          ...(stateId ? { stateId } : {}),
        };
        const done = await submit(engine, req);
        const state = engine.states.get(done.stateId)!;
        const prompt = state.promptTokenIds;
        // Tokens no cache could supply: beyond the full blocks of the previous prompt + reply it extends.
        const reusable = Math.floor(commonPrefix(previous, prompt) / B) * B;
        const unavoidable = Math.max(1, prompt.length - Math.min(reusable, Math.floor((prompt.length - 1) / B) * B));
        records.push({
          trajectory: t,
          turn: k,
          promptTokens: done.usage.promptTokens,
          cachedTokens: done.usage.cachedTokens,
          computedTokens: done.usage.computedTokens,
          reprefilled: Math.max(0, done.usage.computedTokens - unavoidable),
          ttftMs: done.timings.ttftMs,
        });
        progress.tick(v.label);
        previous = [...prompt, ...state.generatedTokenIds];
        stateId = done.stateId;
        if (k === traj.observations.length) break;
        // The agent calls a tool: lease for the predicted pause, then wait the real one.
        if (v.lease) {
          const scale = (xs: number[]) => xs.map((p) => p * v.predictScale);
          const { ttlMs } = predictLeaseTtl({ pauses: scale(pauses), fallbackPauses: scale(pooledPauses), settings: BENCH_LEASE_SETTINGS });
          engine.leases.lease(done.stateId, ttlMs);
        }
        const p0 = performance.now();
        await sleep(traj.pausesMs[k]!);
        const observed = performance.now() - p0;
        pauses.push(observed);
        pooledPauses.push(observed);
      }
      trajectoryMs.push(performance.now() - tStart);
    }),
  );
  const jctMs = performance.now() - t0;
  const sum = (f: (r: TurnRecord) => number) => records.reduce((a, r) => a + f(r), 0);
  const c = engine.leases.table.counters;
  const result: VariantResult = {
    reprefilledTokens: sum((r) => r.reprefilled),
    hitRate: round(sum((r) => r.cachedTokens) / sum((r) => r.promptTokens), 3),
    jctMs: Math.round(jctMs),
    p99TtftMs: round(percentile(records.map((r) => r.ttftMs), 0.99), 1),
    computedTokens: sum((r) => r.computedTokens),
    promptTokens: sum((r) => r.promptTokens),
    meanTrajectoryMs: Math.round(trajectoryMs.reduce((a, b) => a + b, 0) / trajectoryMs.length),
    ...(v.lease ? { leases: { created: c.created, hits: c.hits, savedTokens: c.savedTokens, expired: c.expired, broken: c.broken, capped: c.capped } } : {}),
  };
  note("leases", `${v.label}: ${JSON.stringify(result)}`);
  return { result, records };
}

const WORDS = (
  "the agent reads file path line error value result table query index cache block token model server request response status config " +
  "build test deploy branch commit patch diff review merge function class method module package import export return async await"
).split(" ");

function makeWorkload(o: { trajectories: number; turns: number; seed: number; systemWords: number; observationWords: [number, number] }): Workload {
  const rand = mulberry32(o.seed);
  const words = (n: number) => Array.from({ length: n }, () => WORDS[Math.floor(rand() * WORDS.length)]).join(" ");
  const between = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  const normal = () => Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
  return {
    trajectories: Array.from({ length: o.trajectories }, (_, t) => {
      // Heavy tail: per trajectory a tool speed (median 100 ms..1.2 s, log-uniform), per pause a lognormal factor (sigma 1).
      const median = Math.exp(Math.log(100) + rand() * (Math.log(1200) - Math.log(100)));
      return {
        id: `lease-bench-${t}`,
        system: `You are agent ${t}, ${words(4)}. ${words(o.systemWords)}`,
        task: `Task ${t}: ${words(30)}`,
        observations: Array.from({ length: o.turns - 1 }, () => words(between(o.observationWords[0], o.observationWords[1]))),
        maxTokens: Array.from({ length: o.turns }, () => between(8, 16)),
        pausesMs: Array.from({ length: o.turns - 1 }, () => Math.min(20_000, median * Math.exp(normal()))),
        startMs: rand() * 1000,
      };
    }),
  };
}

function submit(engine: Engine, req: GenerateRequest): Promise<DoneFrame> {
  return new Promise((resolve, reject) => {
    engine.submit(req, (f: Frame) => {
      if (f.type === "done") resolve(f);
      else if (f.type === "error") reject(new Error(`${f.code}: ${f.message}`));
    });
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function commonPrefix(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

function round(v: number, digits: number): number {
  const p = Math.pow(10, digits);
  return Math.round(v * p) / p;
}
