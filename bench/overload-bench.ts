import { setTimeout as sleep } from "node:timers/promises";
import { mulberry32 } from "../protocol/random";
import { DEFAULT_MAX_QUEUED_TOKENS } from "../gpu-backend/scheduler/scheduler";
import { scrapeBackends, waitIdle, type BackendAccess } from "./kit/backend-metrics";
import { note } from "./kit/progress";
import { percentile, round, table } from "./kit/report";
import { startBenchStack } from "./kit/stack";
import { sendTurn, TurnFailed } from "./kit/turn-client";

/**
 * `npm run bench -- overload [--backends N] [--seconds S] [--max-queued-tokens N] [--quick] [--json]`
 *
 * More work than the backends can take, through `wrangler dev` and N backends (2, one thread
 * each, the embedded demo model). Every turn is a streaming chat completion with a prompt of its
 * own (~1,000 tokens, no shared prefix: all of it is prefill) and a short reply.
 *
 * 1. The sustainable rate: a closed loop of 4 clients per backend for S seconds; the turns
 *    completed per second is the rate the backends sustain.
 * 2. Open loop (Poisson arrivals, seeded) at 1x, 2x and 4x that rate, S seconds each: per rate the
 *    429 share, p50/p99 TTFT of the served turns, other errors (there must be none), and from the
 *    backends' /metrics the turns each refused (`agent_edge_overloaded_total`) and the most
 *    queued tokens seen (sampled every 250 ms; the bound is `--max-queued-tokens`). A turn one
 *    backend refused and another served is "moved" (refusals minus N per client 429).
 */
export interface OverloadBenchOptions {
  quick: boolean;
  backends?: number;
  /** Seconds of each measured window (default 30; --quick 12). */
  seconds?: number;
  /** The backends' `--max-queued-tokens` (default theirs). */
  maxQueuedTokens?: number;
  model?: string;
  outDir: string;
}

export interface RateFigures {
  /** Multiple of the sustainable rate offered. */
  multiple: number;
  offeredPerS: number;
  sent: number;
  served: number;
  /** Turns answered 429 `overloaded` (every backend refused them). */
  overloaded: number;
  overloadedShare: number;
  /** 429s that carried a Retry-After header. */
  withRetryAfter: number;
  /** Answers that were neither a served turn nor a 429 (errors other than intended 429s). */
  errors: number;
  servedPerS: number;
  p50TtftMs: number;
  p99TtftMs: number;
  maxTtftMs: number;
  /** Turns a backend refused (its /metrics), all backends together. */
  backendRefusals: number;
  /** Turns refused by one backend and served by another. */
  moved: number;
  /** Most queued prompt tokens seen on any backend. */
  maxQueuedTokens: number;
}

export interface OverloadSummary {
  backends: number;
  promptTokens: number;
  maxTokens: number;
  queueBound: number;
  /** Turns per second a closed loop completed: the sustainable rate. */
  sustainablePerS: number;
  /** Prompt tokens per second at the sustainable rate (all backends). */
  sustainablePrefillTokPerS: number;
  rates: RateFigures[];
  /** Errors other than intended 429s, all windows. */
  errors: number;
  errorSamples: string[];
  wallS: number;
}

const CLIENTS_PER_BACKEND = 4;
const MAX_TOKENS = 8;
const WORDS_PER_PROMPT = 600;

interface Outcome {
  status: number;
  ttftMs?: number;
  code?: string;
  retryAfter?: string | null;
  promptTokens?: number;
  error?: string;
}

export async function runOverloadBench(o: OverloadBenchOptions): Promise<OverloadSummary> {
  const t0 = performance.now();
  const numBackends = o.backends ?? 2;
  const seconds = o.seconds ?? (o.quick ? 12 : 30);
  const queueBound = o.maxQueuedTokens ?? DEFAULT_MAX_QUEUED_TOKENS;
  const stack = await startBenchStack({ name: "overload", backends: numBackends, outDir: o.outDir, ...(o.model ? { model: o.model } : {}), backend: { threads: 1, backendArgs: ["--max-queued-tokens", String(queueBound)] } });
  note("overload", `${numBackends} backends (--max-queued-tokens ${queueBound}), ${seconds} s per window; log: ${stack.logPath}`);
  try {
    const prompts = promptSource(7);
    const send = (): Promise<Outcome> => streamOne(stack.edgeUrl, prompts());
    // Warm-up: every backend compiles and runs its first shapes.
    await Promise.all(Array.from({ length: numBackends * 2 }, send));

    note("overload", `sustainable rate: closed loop, ${CLIENTS_PER_BACKEND * numBackends} clients, ${seconds} s`);
    const closed = await closedLoop(send, CLIENTS_PER_BACKEND * numBackends, seconds * 1000);
    const served = closed.filter((c) => c.status === 200);
    const sustainablePerS = served.length / seconds;
    const promptTokens = Math.round(served.reduce((n, c) => n + (c.promptTokens ?? 0), 0) / Math.max(1, served.length));
    const errorSamples = closed.filter((c) => c.status !== 200).map(describe);
    note("overload", `sustainable: ${round(sustainablePerS, 2)} turns/s (${promptTokens} prompt tokens each; ${errorSamples.length} not served)`);

    const rates: RateFigures[] = [];
    for (const multiple of [1, 2, 4]) {
      await waitIdle(stack);
      const offeredPerS = sustainablePerS * multiple;
      note("overload", `${multiple}x: ${round(offeredPerS, 2)} turns/s offered for ${seconds} s (Poisson)`);
      const before = await backendFigures(stack);
      const queued = sampleQueued(stack);
      const outcomes = await openLoop(send, offeredPerS, seconds * 1000, 100 + multiple);
      const maxQueuedTokens = await queued.stop();
      const after = await backendFigures(stack);
      const figures = rateFigures(multiple, offeredPerS, outcomes, seconds, after.refusals - before.refusals, numBackends, maxQueuedTokens);
      errorSamples.push(...outcomes.filter((c) => c.status !== 200 && c.status !== 429).map(describe));
      rates.push(figures);
      note("overload", `${multiple}x: ${figures.served} served, ${figures.overloaded} 429 (${round(100 * figures.overloadedShare, 1)}%), ${figures.moved} moved, ${figures.errors} errors; TTFT p50 ${figures.p50TtftMs} ms, p99 ${figures.p99TtftMs} ms; most queued ${maxQueuedTokens} tokens`);
    }
    const summary: OverloadSummary = {
      backends: numBackends,
      promptTokens,
      maxTokens: MAX_TOKENS,
      queueBound,
      sustainablePerS: round(sustainablePerS, 3),
      sustainablePrefillTokPerS: Math.round(sustainablePerS * promptTokens),
      rates,
      errors: errorSamples.length,
      errorSamples: errorSamples.slice(0, 10),
      wallS: round((performance.now() - t0) / 1000, 1),
    };
    process.stderr.write(`\n${overloadTable(summary)}\n`);
    return summary;
  } finally {
    await stack.close();
  }
}

function rateFigures(multiple: number, offeredPerS: number, outcomes: Outcome[], seconds: number, backendRefusals: number, numBackends: number, maxQueuedTokens: number): RateFigures {
  const served = outcomes.filter((c) => c.status === 200);
  const overloaded = outcomes.filter((c) => c.status === 429 && c.code === "overloaded");
  const ttfts = served.map((c) => c.ttftMs!).sort((a, b) => a - b);
  return {
    multiple,
    offeredPerS: round(offeredPerS, 3),
    sent: outcomes.length,
    served: served.length,
    overloaded: overloaded.length,
    overloadedShare: round(overloaded.length / Math.max(1, outcomes.length), 4),
    withRetryAfter: overloaded.filter((c) => c.retryAfter !== null && c.retryAfter !== undefined && Number(c.retryAfter) > 0).length,
    errors: outcomes.length - served.length - overloaded.length,
    servedPerS: round(served.length / seconds, 3),
    p50TtftMs: ttfts.length ? Math.round(percentile(ttfts, 0.5)) : 0,
    p99TtftMs: ttfts.length ? Math.round(percentile(ttfts, 0.99)) : 0,
    maxTtftMs: Math.round(ttfts.at(-1) ?? 0),
    backendRefusals,
    moved: Math.max(0, backendRefusals - numBackends * overloaded.length),
    maxQueuedTokens,
  };
}

/** A stream of prompts, each of its own from its first word (no prefix shared between turns). */
function promptSource(seed: number): () => string {
  const rand = mulberry32(seed);
  const syllables = ["ka", "lo", "mi", "ren", "tos", "vi", "da", "sel", "po", "nu", "gar", "fen", "zi", "bro", "quo", "ul"];
  let n = 0;
  const word = () => Array.from({ length: 1 + Math.floor(rand() * 3) }, () => syllables[Math.floor(rand() * syllables.length)]).join("");
  return () => `Request ${n++} ${Math.floor(rand() * 1e9)}: ${Array.from({ length: WORDS_PER_PROMPT }, word).join(" ")}`;
}

/** One streaming stateless chat completion: its status, TTFT (first chunk with content, else the end), and a refusal's code and Retry-After. */
async function streamOne(edgeUrl: string, prompt: string): Promise<Outcome> {
  try {
    const reply = await sendTurn({ edgeUrl, messages: [{ role: "user", content: prompt }], maxTokens: MAX_TOKENS, stream: true });
    return { status: 200, ttftMs: reply.ttftMs, promptTokens: reply.promptTokens };
  } catch (e) {
    if (!(e instanceof TurnFailed)) throw e;
    if (e.answer) return { status: e.answer.status, code: e.answer.errorCode, retryAfter: e.answer.retryAfter, error: e.message };
    return e.code === "connection" ? { status: 0, error: e.message } : { status: -1, code: e.code, error: `mid-stream: ${e.message}` };
  }
}

function describe(c: Outcome): string {
  return `${c.status} ${c.code ?? ""} ${c.error ?? ""}`.trim();
}

/** `clients` clients, each sending its next turn when the last one ended, for `ms`; outcomes of turns sent in the window. */
async function closedLoop(send: () => Promise<Outcome>, clients: number, ms: number): Promise<Outcome[]> {
  const end = performance.now() + ms;
  const out: Outcome[] = [];
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (performance.now() < end) {
        const c = await send();
        if (performance.now() <= end) out.push(c);
      }
    }),
  );
  return out;
}

/** Poisson arrivals at `perS` for `ms` (seeded gaps); waits for every turn sent. */
async function openLoop(send: () => Promise<Outcome>, perS: number, ms: number, seed: number): Promise<Outcome[]> {
  const rand = mulberry32(seed);
  const start = performance.now();
  const pending: Promise<Outcome>[] = [];
  let at = 0;
  for (;;) {
    at += (-Math.log(1 - rand()) / perS) * 1000;
    if (at >= ms) break;
    const wait = start + at - performance.now();
    if (wait > 0) await sleep(wait);
    pending.push(send());
  }
  return Promise.all(pending);
}

async function backendFigures(stack: BackendAccess): Promise<{ refusals: number }> {
  const all = await scrapeBackends(stack);
  return { refusals: all.reduce((n, m) => n + m("agent_edge_overloaded_total"), 0) };
}

/** Samples every backend's queued tokens every 250 ms; `stop` answers the most seen. */
function sampleQueued(stack: BackendAccess): { stop: () => Promise<number> } {
  let max = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      const all = await scrapeBackends(stack).catch(() => []);
      for (const m of all) max = Math.max(max, m("agent_edge_queued_tokens"));
      await sleep(250);
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return max;
    },
  };
}

function overloadTable(s: OverloadSummary): string {
  const head = `Overload, ${s.backends} backends, ~${s.promptTokens} prompt tokens per turn, queue bound ${s.queueBound} tokens; sustainable ${s.sustainablePerS} turns/s (${s.sustainablePrefillTokPerS} prompt tok/s)`;
  const rows = s.rates.map((r) => [`${r.multiple}x`, r.offeredPerS, r.sent, r.served, r.overloaded, `${round(100 * r.overloadedShare, 1)}%`, r.moved, r.errors, r.p50TtftMs, r.p99TtftMs, r.maxQueuedTokens]);
  return `${head}\n${table(["rate", "offered/s", "sent", "served", "429", "429 share", "moved", "errors", "p50 TTFT ms", "p99 TTFT ms", "most queued"], rows)}`;
}
