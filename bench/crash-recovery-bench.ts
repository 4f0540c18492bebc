import { setTimeout as sleep } from "node:timers/promises";
import type { ChatMessage } from "../protocol/messages";
import { note } from "./kit/progress";
import { round } from "./kit/report";
import { startBenchStack, type BenchStack } from "./kit/stack";
import { createTrajectory, servedModel, storedMessages, trajectoryState, transcriptDifference, type TrajectoryView } from "./kit/trajectory-view";
import { sendTurn, TurnFailed } from "./kit/turn-client";

/**
 * `npm run bench -- crash-recovery [--trajectories N] [--turns T] [--json] [--out DIR]`
 *
 * Restarts with nothing lost (issue 19): one backend and `wrangler dev` (Durable Object storage
 * in a folder on disk), N trajectories (16; half through trajectory URLs, half through chat
 * completions resending the transcript) of T streamed turns (6) each, sent concurrently. Once
 * every client has done 2 turns (the third in flight), wrangler dev gets SIGTERM and is started
 * again on the same port and folder; once every client has done 4, the backend is SIGKILLed and
 * started again on its port (its states gone). Clients retry a failed turn with the same
 * Idempotency-Key once the edge answers, after checking that the failed try stored nothing.
 *
 * Then every trajectory is checked: the stored transcript equals the client's (nothing lost,
 * nothing duplicated), T turn records, and every reply equals the oracle's, the same transcript
 * sent as a stateless turn. A delta turn keeps the model's own reply tokens (prompt-builder.ts),
 * so its prompt can differ from the re-rendered one: such turns (oracle prompt tokens differ) are
 * counted as not comparable, not as mismatches.
 */
export interface CrashRecoveryOptions {
  trajectories?: number;
  turns?: number;
  outDir: string;
}

/** The first turn of each trajectory sent after a restart, and how the design ran it. */
export interface FirstTurnsAfter {
  turns: number;
  delta: number;
  full: number;
  fullReasons: Record<string, number>;
  cachedTokens: number;
  promptTokens: number;
}

export interface RestartFigures {
  /** Seconds from the signal until the part was back (edge: healthy with the backend up in its pool). */
  downS: number;
  /** Turns sent (a chunk streamed or not) when the signal went. */
  inFlight: number;
  /** Turns with at least one failed try between the signal and their success. */
  failedTurns: number;
  /** Failed tries (a client retries every 250 ms while the part is down). */
  failedTries: number;
  /** Failed tries by code: `cut` (stream ended), `connection`, an HTTP status or an SSE error code. */
  codes: Record<string, number>;
  /** Seconds from the signal to the first content chunk of a successful try sent after it. */
  firstTokenAfterS: number;
  /** Seconds from the signal to the end of the first successful try sent after it. */
  firstOkAfterS: number;
  firstTurns: FirstTurnsAfter;
}

export interface CrashRecoverySummary {
  trajectories: number;
  turnsPerTrajectory: number;
  turnsOk: number;
  /** Failed tries after which the trajectory had more messages than before the try: must be 0. */
  failedTriesThatStored: number;
  /** Retries (tries after a failed one) that succeeded. */
  retriesSucceeded: number;
  /** Retries answered from storage (`x-agent-edge-replayed`; streaming answers do not say). */
  replayed: number;
  edge: RestartFigures;
  backend: RestartFigures;
  /** Trajectories whose stored transcript and turn count equal the client's. */
  transcriptsVerified: number;
  transcriptMismatches: number;
  /** Stored messages beyond the client's plus turn records beyond T, summed: must be 0. */
  duplicates: number;
  /** Replies checked against the oracle; those that differ, where, and how the turn ran. */
  oracle: { checked: number; mismatches: OracleMismatch[]; notComparable: number };
  wallS: number;
}

export interface OracleMismatch {
  trajectory: string;
  turn: number;
  mode: "delta" | "full";
  fullReason: string | null;
  /** Whether a restart touched the turn: it failed at least once, or it is the trajectory's first after a restart. */
  touched: boolean;
  /** Leading characters the reply and the oracle's share. */
  sameChars: number;
  chars: number;
}

const MAX_TOKENS = 48;
/** Turns 3 and 5 (in flight when the edge, then the backend, goes down) are longer. */
const LONG_MAX_TOKENS = 200;
const maxTokensOf = (k: number) => (k === 3 || k === 5 ? LONG_MAX_TOKENS : MAX_TOKENS);
const TURN_DEADLINE_MS = 180_000;

interface Attempt {
  sentAt: number;
  /** When its first content chunk arrived (undefined: none did). */
  firstChunkAt?: number;
  endedAt: number;
  ok: boolean;
  code?: string;
}

interface Client {
  id: string;
  via: "session" | "chat";
  transcript: ChatMessage[];
  done: number;
  /** The turn in flight (sent at; null between turns). */
  inFlightSince: number | null;
  /** Per turn: its tries in order. */
  attempts: Attempt[][];
}

export async function runCrashRecoveryBench(o: CrashRecoveryOptions): Promise<CrashRecoverySummary> {
  const n = o.trajectories ?? 16;
  const turns = o.turns ?? 6;
  if (turns < 6) throw new Error("--turns must be at least 6 (the edge restarts after turn 2, the backend after turn 4)");
  const t0 = performance.now();
  note("crash-recovery", `starting a backend and wrangler dev; ${n} trajectories x ${turns} turns; log: ${o.outDir}/crash-recovery-stack.log`);
  const stack = await startBenchStack({ name: "crash-recovery", backends: 1, outDir: o.outDir, backend: { kvMemory: "512MiB", threads: 1 } });
  try {
    const model = await servedModel(stack.edgeUrl);
    const run = Date.now().toString(36);
    const system: ChatMessage = { role: "system", content: `You are a careful agent. ${"Check each step before the next. ".repeat(12)}` };
    const clients: Client[] = Array.from({ length: n }, (_, i) => ({ id: `restarts-${run}-${i}`, via: i % 2 === 0 ? "session" : "chat", transcript: [system], done: 0, inFlightSince: null, attempts: [] }));
    for (const c of clients) if (c.via === "session") await createTrajectory(stack.edgeUrl, c.id);

    const counters: Counters = { storedByFailed: 0, replayed: 0, log: stack.onLine };
    const events = { edge: { at: Infinity, downS: 0, inFlight: 0 }, backend: { at: Infinity, downS: 0, inFlight: 0 } };
    const everyDone = (k: number) => clients.every((c) => c.done >= k);
    const restarts = (async () => {
      while (!everyDone(2)) await sleep(50);
      await whileFewInFlight(clients);
      events.edge = await restart("edge", stack, clients);
      while (!everyDone(4)) await sleep(50);
      await whileFewInFlight(clients);
      events.backend = await restart("backend", stack, clients);
    })();
    const progress = setInterval(() => note("crash-recovery", `${clients.reduce((a, c) => a + c.done, 0)}/${n * turns} turns done, ${((performance.now() - t0) / 1000).toFixed(0)} s`), 5000);
    try {
      await Promise.all([
        restarts,
        ...clients.map(async (c, i) => {
          for (let k = 1; k <= turns; k++) {
            // The third turn waits for nothing; the fourth and sixth only go once the restart began.
            if (k === 4) while (events.edge.at === Infinity) await sleep(50);
            if (k === 6) while (events.backend.at === Infinity) await sleep(50);
            await sleep(100 + ((i * 37 + k * 91) % 300));
            await clientTurn(stack, model, c, k, counters);
          }
        }),
      ]);
    } finally {
      clearInterval(progress);
    }
    note("crash-recovery", `all turns done in ${((performance.now() - t0) / 1000).toFixed(1)} s; checking transcripts and the oracle`);
    const states = new Map<string, TrajectoryView>();
    let transcriptsVerified = 0;
    let duplicates = 0;
    for (const c of clients) {
      const state = await trajectoryState(stack.edgeUrl, c.id);
      states.set(c.id, state);
      duplicates += Math.max(0, state.message_count - c.transcript.length) + Math.max(0, state.turns.length - turns);
      const diff = transcriptDifference(await storedMessages(stack.edgeUrl, c.id), c.transcript);
      if (diff === undefined && state.turns.length === turns) transcriptsVerified++;
      else note("crash-recovery", `${c.id}: ${diff ?? `${state.turns.length} turn records`}`);
    }
    const oracle: CrashRecoverySummary["oracle"] = { checked: 0, mismatches: [], notComparable: 0 };
    for (const c of clients) {
      for (let k = 1; k <= turns; k++) {
        const record = states.get(c.id)!.turns[k - 1]!;
        const prompt = c.transcript.slice(0, 2 * k); // system, then (user, assistant) per turn: up to turn k's user message
        const answer = await sendTurn({ edgeUrl: stack.edgeUrl, model, via: "chat", messages: prompt, maxTokens: maxTokensOf(k), stream: false });
        if (record.mode === "delta" && answer.promptTokens !== record.prompt_tokens) {
          oracle.notComparable++;
          continue;
        }
        oracle.checked++;
        const reply = c.transcript[2 * k]!.content ?? "";
        if (answer.content !== reply) {
          let same = 0;
          while (same < reply.length && reply[same] === answer.content[same]) same++;
          const touched = c.attempts[k - 1]!.length > 1 || [events.edge.at, events.backend.at].some((at) => firstTurnAfter(c, at) === k - 1);
          oracle.mismatches.push({ trajectory: c.id, turn: k, mode: record.mode, fullReason: record.full_reason, touched, sameChars: same, chars: reply.length });
          note("crash-recovery", `${c.id} turn ${k} (${record.mode} ${record.full_reason ?? ""}): the reply differs from the oracle's after ${same} of ${reply.length} characters`);
        }
      }
    }
    const all = clients.flatMap((c) => c.attempts.flat());
    // A failed try belongs to the restart whose signal last preceded its end.
    const figures = (event: typeof events.edge, next: number): RestartFigures => {
      const inWindow = (a: Attempt) => !a.ok && a.endedAt >= event.at && a.endedAt < next;
      const failedTurns = clients.flatMap((c) => c.attempts.filter((tries) => tries.some(inWindow)));
      const failed = failedTurns.flat().filter(inWindow);
      const codes: Record<string, number> = {};
      for (const a of failed) codes[a.code!] = (codes[a.code!] ?? 0) + 1;
      const after = all.filter((a) => a.ok && a.sentAt >= event.at);
      return {
        downS: event.downS,
        inFlight: event.inFlight,
        failedTurns: failedTurns.length,
        failedTries: failed.length,
        codes,
        firstTokenAfterS: round((Math.min(...after.map((a) => a.firstChunkAt ?? a.endedAt)) - event.at) / 1000, 2),
        firstOkAfterS: round((Math.min(...after.map((a) => a.endedAt)) - event.at) / 1000, 2),
        firstTurns: firstTurnsAfter(clients, states, event.at),
      };
    };
    return {
      trajectories: n,
      turnsPerTrajectory: turns,
      turnsOk: clients.reduce((a, c) => a + c.done, 0),
      failedTriesThatStored: counters.storedByFailed,
      retriesSucceeded: clients.reduce((a, c) => a + c.attempts.filter((tries) => tries.length > 1 && tries.at(-1)!.ok).length, 0),
      replayed: counters.replayed,
      edge: figures(events.edge, events.backend.at),
      backend: figures(events.backend, Infinity),
      transcriptsVerified,
      transcriptMismatches: n - transcriptsVerified,
      duplicates,
      oracle,
      wallS: round((performance.now() - t0) / 1000, 1),
    };
  } finally {
    await stack.close();
  }
}

/** What the clients count across trajectories. */
interface Counters {
  storedByFailed: number;
  replayed: number;
  /** Writes a line to the run's log file. */
  log: (line: string) => void;
}

/** One turn of a client: tries until it succeeds; after a failed try, waits for the edge to answer and checks the try stored nothing. */
async function clientTurn(stack: BenchStack, model: string, c: Client, k: number, counters: Counters): Promise<void> {
  const message: ChatMessage = { role: "user", content: `Step ${k} of ${c.id}: look at file ${(k * 7919) % 97}.` };
  const before = c.transcript.length;
  const tries: Attempt[] = [];
  c.attempts.push(tries);
  const deadline = performance.now() + TURN_DEADLINE_MS;
  for (;;) {
    const sentAt = performance.now();
    c.inFlightSince = sentAt;
    let firstChunkAt: number | undefined;
    try {
      const reply = await sendTurn({
        edgeUrl: stack.edgeUrl,
        model,
        via: c.via,
        trajectoryId: c.id,
        messages: c.via === "session" ? (k === 1 ? [...c.transcript, message] : [message]) : [...c.transcript, message],
        maxTokens: maxTokensOf(k),
        stream: true,
        idempotencyKey: `${c.id}-${k}`,
        onChunk: () => void (firstChunkAt ??= performance.now()),
      });
      tries.push({ sentAt, firstChunkAt, endedAt: performance.now(), ok: true });
      if (reply.replayed) counters.replayed++;
      c.transcript.push(message, { role: "assistant", content: reply.content });
      c.done = k;
      c.inFlightSince = null;
      return;
    } catch (e) {
      if (!(e instanceof TurnFailed)) throw e;
      tries.push({ sentAt, firstChunkAt, endedAt: performance.now(), ok: false, code: e.code });
      counters.log(`[client] ${c.id} turn ${k} try ${tries.length} failed after ${e.chunks} chunks: ${e.message.slice(0, 200)}`);
      if (performance.now() > deadline) throw new Error(`${c.id} turn ${k} still failed after ${TURN_DEADLINE_MS / 1000} s: ${e.message}`);
      // The failed try stored nothing: the trajectory has the messages it had before (once the edge answers).
      for (;;) {
        const state = await trajectoryState(stack.edgeUrl, c.id).catch(() => undefined);
        if (state) {
          if (state.message_count !== before && !(k === 1 && state.message_count === 0)) {
            counters.storedByFailed++;
            counters.log(`[client] ${c.id} turn ${k}: the failed try stored ${state.message_count - before} messages`);
          }
          break;
        }
        await sleep(250);
      }
      await sleep(250);
    }
  }
}

/** Waits until half the clients have a turn in flight, or 3 s. */
async function whileFewInFlight(clients: Client[]): Promise<void> {
  const deadline = performance.now() + 3000;
  while (clients.filter((c) => c.inFlightSince !== null).length < clients.length / 2 && performance.now() < deadline) await sleep(20);
}

/** Stops a part (edge: SIGTERM; backend: SIGKILL) and starts it again; `at`: when the signal went. */
async function restart(part: "edge" | "backend", stack: BenchStack, clients: Client[]): Promise<{ at: number; downS: number; inFlight: number }> {
  const inFlight = clients.filter((c) => c.inFlightSince !== null).length;
  note("crash-recovery", `${part === "edge" ? "SIGTERM to wrangler dev" : "SIGKILL to the backend"} with ${inFlight} turns in flight`);
  const at = performance.now();
  if (part === "edge") {
    await stack.stopEdge("SIGTERM");
    await stack.startEdge();
  } else {
    await stack.stopBackend(0, "SIGKILL");
    await stack.startBackend(0);
  }
  const downS = round((performance.now() - at) / 1000, 1);
  note("crash-recovery", `${part} back after ${downS} s`);
  return { at, downS, inFlight };
}

/** The index of the client's first turn whose successful try was sent after `at` (-1: none). */
function firstTurnAfter(c: Client, at: number): number {
  return c.attempts.findIndex((tries) => tries.at(-1)!.ok && tries.at(-1)!.sentAt >= at);
}

/** How the first turn of each trajectory whose successful try was sent after `at` ran. */
function firstTurnsAfter(clients: Client[], states: Map<string, TrajectoryView>, at: number): FirstTurnsAfter {
  const out: FirstTurnsAfter = { turns: 0, delta: 0, full: 0, fullReasons: {}, cachedTokens: 0, promptTokens: 0 };
  for (const c of clients) {
    const k = firstTurnAfter(c, at);
    if (k < 0) continue;
    const r = states.get(c.id)!.turns[k]!;
    out.turns++;
    out[r.mode]++;
    if (r.full_reason) out.fullReasons[r.full_reason] = (out.fullReasons[r.full_reason] ?? 0) + 1;
    out.cachedTokens += r.cached_tokens;
    out.promptTokens += r.prompt_tokens;
  }
  return out;
}
