import { setTimeout as sleep } from "node:timers/promises";
import type { ChatMessage } from "../protocol/messages";
import { mulberry32 } from "../protocol/random";
import { note } from "./kit/progress";
import { createTrajectory, trajectoryState, type TrajectoryView } from "./kit/trajectory-view";
import { sendTurn, TurnFailed } from "./kit/turn-client";

/**
 * The soak's agent clients: each runs trajectories one after another through one of the edge's
 * APIs, with tool pauses between turns, a short reply per turn, and half of its turns streamed.
 *
 * - `chat`: chat completions with `x-trajectory-id`, the whole transcript resent each turn;
 * - `session`: a trajectory URL (created first), only the new message each turn, each turn with an
 *   `Idempotency-Key`;
 * - `responses`: the Responses API chained by `previous_response_id`;
 * - `messages`: Anthropic's Messages API with `x-trajectory-id`, the whole transcript resent;
 * - `stateless`: chat completions without a trajectory, the whole transcript resent.
 *
 * A 429 is waited out (its `Retry-After`) and the turn resent: an intended refusal, counted apart.
 * A 503 from `wrangler dev`'s own proxy ("Your worker restarted mid-request": its connection to
 * the Worker was reset; a deployed Worker has no such hop) is counted apart too: the client reads
 * the trajectory's state to learn whether the turn was stored (it must not have been, unless the
 * answer was lost after the commit), then resends it (a session turn with the same
 * `Idempotency-Key`: a stored one is replayed). Any other failure is an error; the client then
 * starts a new trajectory. A finished trajectory
 * with an id is checked against the edge's state: its turns and messages as the client counts
 * them (nothing lost, nothing twice), and for sessions its idempotency keys (the last
 * IDEMPOTENCY_TURNS turns').
 */
export const SOAK_KINDS = ["chat", "session", "responses", "messages", "stateless"] as const;
export type SoakKind = (typeof SOAK_KINDS)[number];

export interface SoakClientParams {
  edgeUrl: string;
  model: string;
  kind: SoakKind;
  /** This client's number (its seed and its trajectories' ids). */
  index: number;
  turnsPerTrajectory: number;
  /** Tool pause between turns, ms [lo, hi). */
  pauseMs: [number, number];
  maxTokens: number;
  /** The trajectory URL's idempotency window (IDEMPOTENCY_TURNS as the edge was started with). */
  idempotencyTurns: number;
  deadline: number;
}

export interface SoakCounts {
  turns: number;
  streamed: number;
  /** 429s waited out and resent. */
  overloaded: number;
  /** 503s from `wrangler dev`'s proxy (its connection to the Worker reset), each resent. */
  devProxyResets: number;
  /** Of those, turns the trajectory had stored before the answer was lost (a session's resend replays it). */
  devProxyResetsStored: number;
  errors: number;
  errorSamples: string[];
  trajectories: number;
  /** Finished trajectories whose stored turns, messages or idempotency keys differ from the client's count. */
  mismatches: number;
  mismatchSamples: string[];
  byKind: Record<SoakKind, number>;
}

export function emptyCounts(): SoakCounts {
  return { turns: 0, streamed: 0, overloaded: 0, devProxyResets: 0, devProxyResetsStored: 0, errors: 0, errorSamples: [], trajectories: 0, mismatches: 0, mismatchSamples: [], byKind: { chat: 0, session: 0, responses: 0, messages: 0, stateless: 0 } };
}

/** A failure counted as an error (the client then starts a new trajectory). */
class SoakError extends Error {}
/** A 503 from `wrangler dev`'s proxy: its connection to the Worker was reset. */
class DevProxyReset extends Error {}

/** Runs the client's trajectories until the deadline (a trajectory under way finishes its turn, not its remaining turns). */
export async function runSoakClient(p: SoakClientParams, counts: SoakCounts): Promise<void> {
  const rand = mulberry32(1000 + p.index);
  const words = ["list", "files", "read", "config", "patch", "test", "build", "error", "line", "module", "grep", "diff", "commit", "value", "cache", "token"];
  const text = (n: number) => Array.from({ length: n }, () => words[Math.floor(rand() * words.length)]).join(" ");
  const system = `You are agent ${p.index % 8} of the soak. Tools: read_file, write_file, run_tests. ${text(120)}`;
  for (let t = 0; performance.now() < p.deadline; t++) {
    const id = `soak-${p.index}-${t}-${Date.now().toString(36)}`;
    const transcript: ChatMessage[] = [{ role: "system", content: system }];
    let previousResponseId: string | undefined;
    let done = 0;
    counts.trajectories++;
    try {
      if (p.kind === "session") await resendAfterResets(p, id, 0, counts, () => attempt(counts, `create ${id}`, () => createTrajectory(p.edgeUrl, id)));
      for (let turn = 0; turn < p.turnsPerTrajectory && performance.now() < p.deadline; turn++) {
        if (turn > 0) await sleep(p.pauseMs[0] + rand() * (p.pauseMs[1] - p.pauseMs[0]));
        const user: ChatMessage = { role: "user", content: turn === 0 ? `Task ${id}: ${text(30)}` : `Observation: ${text(20 + Math.floor(rand() * 80))}` };
        const stream = rand() < 0.5;
        const messages = p.kind === "session" ? [user] : [...transcript, user];
        const reply = await resendAfterResets(p, id, done, counts, () =>
          attempt(counts, `${p.kind} turn of ${id}`, () =>
            sendTurn({
              edgeUrl: p.edgeUrl,
              model: p.model,
              via: p.kind === "stateless" ? "chat" : p.kind,
              ...(p.kind === "chat" || p.kind === "session" || p.kind === "messages" ? { trajectoryId: id } : {}),
              messages,
              maxTokens: p.maxTokens,
              stream,
              ...(p.kind === "session" ? { idempotencyKey: `${id}-${turn}` } : {}),
              ...(previousResponseId ? { previousResponseId } : {}),
            }),
          ),
        );
        previousResponseId = reply.responseId ?? previousResponseId;
        transcript.push(user, { role: "assistant", content: reply.content });
        done++;
        counts.turns++;
        counts.byKind[p.kind]++;
        if (stream) counts.streamed++;
        // An empty reply cannot be resent to the Messages API (empty text blocks are refused): start over.
        if (p.kind === "messages" && reply.content === "") break;
      }
    } catch (e) {
      if (!(e instanceof SoakError)) throw e;
      continue; // counted where it failed
    }
    if (done > 0 && (p.kind === "chat" || p.kind === "session" || p.kind === "messages")) await verify(p, id, p.kind, done, transcript.length, counts);
  }
}

/** One request, resent after a 429 (waiting its Retry-After); a proxy reset throws DevProxyReset, any other failure is counted and throws SoakError. */
async function attempt<T>(counts: SoakCounts, what: string, run: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await run();
    } catch (e) {
      const answer = e instanceof TurnFailed ? e.answer : undefined;
      if (answer?.status === 429 && i < 20) {
        counts.overloaded++;
        await sleep(1000 * Math.max(0.2, Number(answer.retryAfter ?? "1")));
        continue;
      }
      const message = (e as Error).message;
      if (/503: Your worker restarted mid-request/.test(message)) throw new DevProxyReset(`${what}: ${message}`);
      throw fail(counts, `${what}: ${message.slice(0, 200)}`);
    }
  }
}

/**
 * Runs a turn, resending it after a reset of `wrangler dev`'s proxy (at most 3 times). For a
 * trajectory with an id it first reads the state: one more stored turn than the client has done
 * means the turn ran and its answer was lost; only a session (its resend replays by
 * `Idempotency-Key`) can go on then, the others end the trajectory unverified.
 */
async function resendAfterResets<T>(p: SoakClientParams, id: string, done: number, counts: SoakCounts, run: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await run();
    } catch (e) {
      if (!(e instanceof DevProxyReset)) throw e;
      counts.devProxyResets++;
      note("soak", `wrangler dev proxy reset at ${new Date().toISOString()}: ${e.message.slice(0, 80)}`);
      if (i >= 3) throw fail(counts, `${e.message} (4 times)`);
      if (p.kind === "chat" || p.kind === "session" || p.kind === "messages") {
        const state = await storedState(p, id, counts);
        if (state === undefined) throw new SoakError(`${id}: no state after a proxy reset`);
        if (state !== null && state.turns.length > done) {
          counts.devProxyResetsStored++;
          if (p.kind !== "session") throw new SoakError(`${id}: turn stored, answer lost to a proxy reset`);
        }
      }
      await sleep(200);
    }
  }
}

/** The edge's state of trajectory `id`: null when it answers otherwise than 200, undefined (an error counted) when it cannot be reached. */
async function storedState(p: SoakClientParams, id: string, counts: SoakCounts): Promise<TrajectoryView | null | undefined> {
  try {
    return await trajectoryState(p.edgeUrl, id);
  } catch (e) {
    if (!(e instanceof TypeError)) return null; // fetch's own failures are TypeErrors; an answer other than 200 is not
    fail(counts, `state of ${id}: ${(e as Error).message}`);
    return undefined;
  }
}

/** Compares the edge's state of a finished trajectory with what the client did. */
async function verify(p: SoakClientParams, id: string, kind: SoakKind, turns: number, clientMessages: number, counts: SoakCounts): Promise<void> {
  const state = await storedState(p, id, counts);
  if (state === undefined) return;
  if (state === null) {
    counts.mismatches++;
    counts.mismatchSamples.push(`${id}: no stored state`);
    return;
  }
  // The session's transcript holds no system message (the client never sent one there).
  const expectedMessages = kind === "session" ? clientMessages - 1 : clientMessages;
  const expectedKeys = kind === "session" ? Math.min(turns, p.idempotencyTurns) : 0;
  if (state.turns.length !== turns || state.message_count !== expectedMessages || state.idempotency_keys !== expectedKeys) {
    counts.mismatches++;
    if (counts.mismatchSamples.length < 10) counts.mismatchSamples.push(`${id} (${kind}): stored ${state.turns.length} turns, ${state.message_count} messages, ${state.idempotency_keys} keys; client ${turns}, ${expectedMessages}, ${expectedKeys}`);
  }
}

function fail(counts: SoakCounts, what: string): SoakError {
  counts.errors++;
  if (counts.errorSamples.length < 10) {
    counts.errorSamples.push(what);
    note("soak", `error at ${new Date().toISOString()}: ${what}`);
  }
  return new SoakError(what);
}
