import { setTimeout as sleep } from "node:timers/promises";
import { SECRET_HEADER } from "../protocol/messages";
import { scrapeBackends, waitIdle } from "./kit/backend-metrics";
import { residentBytes } from "./kit/machine";
import { lineChart } from "./kit/plot";
import { note } from "./kit/progress";
import { mean, round, writeOut } from "./kit/report";
import { startBenchStack, type BenchStack } from "./kit/stack";
import { servedModel } from "./kit/trajectory-view";
import { openWorkerHeap, type WorkerHeap } from "./worker-heap";
import { emptyCounts, runSoakClient, SOAK_KINDS, type SoakCounts, type SoakKind } from "./soak-clients";

/**
 * `npm run bench -- soak [--trajectories N] [--seconds S] [--quick] [--json]`
 *
 * N agent clients (64) for S seconds (300) through `wrangler dev` and 2 backends, each client
 * running trajectories one after another over one API (soak-clients.ts: chat completions with a
 * trajectory id, trajectory URLs with idempotency keys, Responses chained by
 * `previous_response_id`, Anthropic Messages, stateless chat), half of the turns streamed, with
 * tool pauses. The edge runs with short windows so their expiry shows within the run:
 * IDEMPOTENCY_TURNS=4, LEASES=always with LEASE_MAX_MS=10000.
 *
 * Every 10 s: the resident memory of each backend's processes and of workerd. Growth is the mean
 * of the last 3 samples over the mean of the first 3 after warm-up (the first 40% of the run:
 * `rssGrowth`), minus 1. At the end: the sequences, queued tokens and turn states left on each
 * backend once the clients stopped, how long until every tool-pause lease expired (none may be
 * left), and one more memory sample after a minute without traffic (`idle`).
 */
export interface SoakOptions {
  trajectories: number;
  seconds: number;
  backends?: number;
  /** Backend `--model` (default: the embedded demo model). */
  model?: string;
  turnsPerTrajectory?: number;
  /**
   * Also sample the Worker isolate's JS heap after a forced GC (`workerHeapMiB`, through wrangler's
   * inspector: devtools on, which costs CPU), to tell a leak in the Worker's code from workerd's
   * own memory.
   */
  workerHeap?: boolean;
  /** The APIs the clients use, in turn (default all: SOAK_KINDS). */
  kinds?: readonly SoakKind[];
  pauseMs?: [number, number];
  maxTokens?: number;
  sampleEveryMs?: number;
  /** After the run, how long to leave the stack without traffic before one more memory sample (`idle`); 0: none. Default 60 s. */
  idleMs?: number;
  outDir: string;
}

export interface RssSample {
  atS: number;
  backendsMiB: number[];
  workerdMiB: number;
  /** The Worker isolate's JS heap after a forced GC (with `workerHeap`). */
  workerHeapMiB?: number;
}

export interface SoakSummary extends Omit<SoakCounts, "errorSamples" | "mismatchSamples"> {
  clients: number;
  seconds: number;
  backends: number;
  /** Per backend: (last 3 samples) / (first 3 after warm-up) - 1; the largest is `backendRssGrowth`. */
  backendRssGrowths: number[];
  backendRssGrowth: number;
  workerdRssGrowth: number;
  /** Growth of the Worker's JS heap after warm-up, as for RSS (null without `workerHeap`). */
  workerHeapGrowth: number | null;
  samples: RssSample[];
  /** Once the clients stopped: sequences running or waiting, and queued tokens, on all backends. */
  sequencesLeft: number;
  queuedTokensLeft: number;
  /** Turn states kept per backend at the end, and the capacity they are held under. */
  turnStates: number[];
  /** Leases still active on all backends when the clients stopped, and seconds until none was left (-1: some never expired). */
  leasesAtStop: number;
  leasesExpiredAfterS: number;
  /** Resident memory after `idleMs` without traffic (null: not taken): what of the growth idle objects held. */
  idle: RssSample | null;
  errorSamples: string[];
  mismatchSamples: string[];
  wallS: number;
}

/** Edge vars of a soak: short windows, so expiry shows within the run. */
export const SOAK_VARS = { IDEMPOTENCY_TURNS: "4", LEASES: "always", LEASE_MAX_MS: "10000" };
const LEASE_MAX_MS = Number(SOAK_VARS.LEASE_MAX_MS);

export async function runSoakBench(o: SoakOptions): Promise<SoakSummary> {
  const t0 = performance.now();
  const numBackends = o.backends ?? 2;
  const stack = await startBenchStack({
    name: "soak",
    backends: numBackends,
    outDir: o.outDir,
    ...(o.model ? { model: o.model } : {}),
    backend: { kvMemory: "512MiB", threads: 1 },
    edge: { vars: SOAK_VARS, devtools: o.workerHeap ?? false },
  });
  note("soak", `${o.trajectories} clients x ${o.seconds} s, ${numBackends} backends; log: ${stack.logPath}`);
  try {
    const heap = o.workerHeap ? await openWorkerHeap(stack.inspectorPort) : undefined;
    const summary = await soak(stack, o, numBackends, t0, heap).finally(() => heap?.close());
    note("soak", `resident memory plot: ${writeOut(o.outDir, "soak-rss.svg", rssChart(summary))}`);
    return summary;
  } finally {
    await stack.close();
  }
}

async function soak(stack: BenchStack, o: SoakOptions, numBackends: number, t0: number, heap: WorkerHeap | undefined): Promise<SoakSummary> {
  const model = await servedModel(stack.edgeUrl);
  const counts = emptyCounts();
  const start = performance.now();
  const deadline = start + o.seconds * 1000;
  const samples: RssSample[] = [];
  const measure = async (): Promise<RssSample> => {
    const workerHeapMiB = heap ? await heap.usedAfterGcMiB() : undefined;
    const backendsMiB = stack.backends.map((b) => residentBytes(b.pids()) / 2 ** 20);
    const workerdMiB = residentBytes(stack.edge!.pids(), (comm) => comm.startsWith("workerd")) / 2 ** 20;
    return { atS: round((performance.now() - start) / 1000, 1), backendsMiB: backendsMiB.map((m) => round(m, 1)), workerdMiB: round(workerdMiB, 1), ...(workerHeapMiB !== undefined ? { workerHeapMiB } : {}) };
  };
  const sample = async () => {
    const last = await measure();
    samples.push(last);
    const heapNote = last.workerHeapMiB !== undefined ? `, Worker JS heap ${last.workerHeapMiB} MiB` : "";
    note("soak", `${last.atS} s: ${counts.turns} turns, ${counts.errors} errors, ${counts.overloaded} 429s, ${counts.devProxyResets} dev proxy resets, ${counts.mismatches} mismatches; RSS backends ${last.backendsMiB.join(" / ")} MiB, workerd ${last.workerdMiB} MiB${heapNote}`);
  };
  await sample();
  const every = o.sampleEveryMs ?? 10_000;
  const sampler = setInterval(() => void sample(), every);
  try {
    await Promise.all(
      Array.from({ length: o.trajectories }, (_, i) =>
        runSoakClient(
          {
            edgeUrl: stack.edgeUrl,
            model,
            kind: (o.kinds ?? SOAK_KINDS)[i % (o.kinds ?? SOAK_KINDS).length]!,
            index: i,
            turnsPerTrajectory: o.turnsPerTrajectory ?? 6,
            pauseMs: o.pauseMs ?? [200, 1500],
            maxTokens: o.maxTokens ?? 12,
            idempotencyTurns: Number(SOAK_VARS.IDEMPOTENCY_TURNS),
            deadline,
          },
          counts,
        ),
      ),
    );
  } finally {
    clearInterval(sampler);
  }
  await sample();

  // Nothing left running: every turn ended, so every sequence must have.
  await waitIdle(stack, 10_000).catch(() => undefined);
  const after = await scrapeBackends(stack);
  const sequencesLeft = after.reduce((n, m) => n + m("agent_edge_running_sequences") + m("agent_edge_waiting_sequences"), 0);
  const queuedTokensLeft = after.reduce((n, m) => n + m("agent_edge_queued_tokens"), 0);
  const turnStates = after.map((m) => m("agent_edge_turn_states"));
  const leasesAtStop = await activeLeases(stack);
  const leaseStart = performance.now();
  let leasesExpiredAfterS = -1;
  while (performance.now() - leaseStart < LEASE_MAX_MS + 5000) {
    if ((await activeLeases(stack)) === 0) {
      leasesExpiredAfterS = round((performance.now() - leaseStart) / 1000, 1);
      break;
    }
    await sleep(250);
  }
  note("soak", `end: ${sequencesLeft} sequences and ${queuedTokensLeft} queued tokens left; turn states ${turnStates.join(" / ")}; ${leasesAtStop} leases at stop, none after ${leasesExpiredAfterS} s`);

  const idleMs = o.idleMs ?? 60_000;
  let idle: RssSample | null = null;
  if (idleMs > 0) {
    await sleep(idleMs);
    idle = await measure();
    note("soak", `after ${idleMs / 1000} s idle: RSS backends ${idle.backendsMiB.join(" / ")} MiB, workerd ${idle.workerdMiB} MiB`);
  }
  const growth = (pick: (s: RssSample) => number) => rssGrowth(samples, o.seconds, pick);
  const backendRssGrowths = Array.from({ length: numBackends }, (_, b) => growth((s) => s.backendsMiB[b]!));
  const { errorSamples, mismatchSamples, ...rest } = counts;
  return {
    ...rest,
    clients: o.trajectories,
    seconds: o.seconds,
    backends: numBackends,
    backendRssGrowths,
    backendRssGrowth: Math.max(...backendRssGrowths),
    workerdRssGrowth: growth((s) => s.workerdMiB),
    workerHeapGrowth: heap ? growth((s) => s.workerHeapMiB ?? 0) : null,
    samples,
    sequencesLeft,
    queuedTokensLeft,
    turnStates,
    leasesAtStop,
    leasesExpiredAfterS,
    idle,
    errorSamples,
    mismatchSamples,
    wallS: round((performance.now() - t0) / 1000, 1),
  };
}

/** The share of a run that is warm-up: the KV pools and onnxruntime's arenas are first touched (~100 s of 300 here). */
export const WARM_UP_SHARE = 0.4;

/**
 * Growth of one resident-memory series after warm-up: the mean of the last 3 samples over the mean
 * of the first 3 taken after `WARM_UP_SHARE` of the run, minus 1 (0 with fewer than 2 samples).
 *
 * @example rssGrowth(samples, 300, (s) => s.workerdMiB) // 0.11: 11% more at the end than after warm-up
 */
export function rssGrowth(samples: readonly RssSample[], seconds: number, pick: (s: RssSample) => number): number {
  const warm = samples.filter((s) => s.atS >= seconds * WARM_UP_SHARE);
  if (warm.length < 2) return 0;
  return round(mean(warm.slice(-3).map(pick)) / mean(warm.slice(0, 3).map(pick)) - 1, 4);
}

/** Active tool-pause leases on all backends (`GET /v1/leases`). */
async function activeLeases(stack: BenchStack): Promise<number> {
  let n = 0;
  for (const url of stack.backendUrls) {
    const res = await fetch(`${url}/v1/leases`, { headers: { [SECRET_HEADER]: stack.secret } });
    n += ((await res.json()) as { leases: unknown[] }).leases.length;
  }
  return n;
}

/** Resident memory of each backend and of workerd over the run, with the end of warm-up marked. */
export function rssChart(s: Pick<SoakSummary, "samples" | "clients" | "seconds">): string {
  const colors = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b"];
  const backends = s.samples[0]?.backendsMiB.length ?? 0;
  const series = [
    ...Array.from({ length: backends }, (_, b) => ({ name: `backend ${b + 1}`, color: colors[b % colors.length]!, points: s.samples.map((x) => ({ x: x.atS, y: x.backendsMiB[b]! })) })),
    { name: "workerd", color: "#d62728", points: s.samples.map((x) => ({ x: x.atS, y: x.workerdMiB })) },
  ];
  return lineChart({ title: `Resident memory, ${s.clients} agent clients for ${s.seconds} s (warm-up: first ${Math.round(s.seconds * WARM_UP_SHARE)} s)`, xLabel: "seconds", yLabel: "MiB", series, legend: "top-left" });
}
