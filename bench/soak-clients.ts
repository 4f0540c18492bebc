import { mulberry32 } from "../protocol/random";
import { note } from "./progress";
import { sleep } from "./routing-policy-run";
import { sseJson } from "./sse";

/**
 * The soak's agent clients: each runs trajectories one after another through one of the edge's
 * APIs, with tool pauses between turns, a short reply per turn, and half of its turns streamed.
 *
 * - `chat`: chat completions with `x-trajectory-id`, the whole transcript resent each turn;
 * - `session`: a session URL (created first), only the new message each turn, each turn with an
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
  apiKey: string;
  tenant: string;
  model: string;
  kind: SoakKind;
  /** This client's number (its seed and its trajectories' ids). */
  index: number;
  turnsPerTrajectory: number;
  /** Tool pause between turns, ms [lo, hi). */
  pauseMs: [number, number];
  maxTokens: number;
  /** The session URL's idempotency window (IDEMPOTENCY_TURNS as the edge was started with). */
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

type Msg = { role: "system" | "user" | "assistant"; content: string };

class TurnFailed extends Error {}
class DevProxyReset extends Error {}

/** Runs the client's trajectories until the deadline (a trajectory under way finishes its turn, not its remaining turns). */
export async function runSoakClient(p: SoakClientParams, counts: SoakCounts): Promise<void> {
  const rand = mulberry32(1000 + p.index);
  const words = ["list", "files", "read", "config", "patch", "test", "build", "error", "line", "module", "grep", "diff", "commit", "value", "cache", "token"];
  const text = (n: number) => Array.from({ length: n }, () => words[Math.floor(rand() * words.length)]).join(" ");
  const auth = { authorization: `Bearer ${p.apiKey}`, "content-type": "application/json" };
  const system = `You are agent ${p.index % 8} of the soak. Tools: read_file, write_file, run_tests. ${text(120)}`;
  for (let t = 0; performance.now() < p.deadline; t++) {
    const id = `soak-${p.index}-${t}-${Date.now().toString(36)}`;
    const transcript: Msg[] = [{ role: "system", content: system }];
    let previousResponse: string | undefined;
    let done = 0;
    counts.trajectories++;
    try {
      if (p.kind === "session") await resendAfterResets(p, id, 0, auth, counts, () => send(p, `/v1/tenants/${p.tenant}/trajectories`, auth, { id }, false, counts));
      for (let turn = 0; turn < p.turnsPerTrajectory && performance.now() < p.deadline; turn++) {
        if (turn > 0) await sleep(p.pauseMs[0] + rand() * (p.pauseMs[1] - p.pauseMs[0]));
        const user: Msg = { role: "user", content: turn === 0 ? `Task ${id}: ${text(30)}` : `Observation: ${text(20 + Math.floor(rand() * 80))}` };
        const stream = rand() < 0.5;
        const reply = await resendAfterResets(p, id, done, auth, counts, () => runTurn(p, { id, kind: p.kind, user, transcript, previousResponse, stream, auth, turn }, counts));
        previousResponse = reply.responseId ?? previousResponse;
        transcript.push(user, { role: "assistant", content: reply.text });
        done++;
        counts.turns++;
        counts.byKind[p.kind]++;
        if (stream) counts.streamed++;
        // An empty reply cannot be resent to the Messages API (empty text blocks are refused): start over.
        if (p.kind === "messages" && reply.text === "") break;
      }
    } catch (e) {
      if (!(e instanceof TurnFailed)) throw e;
      continue; // counted where it failed
    }
    if (done > 0 && (p.kind === "chat" || p.kind === "session" || p.kind === "messages")) await verify(p, id, p.kind, done, transcript.length, counts, auth);
  }
}

async function runTurn(
  p: SoakClientParams,
  t: { id: string; kind: SoakKind; user: Msg; transcript: Msg[]; previousResponse: string | undefined; stream: boolean; auth: Record<string, string>; turn: number },
  counts: SoakCounts,
): Promise<{ text: string; responseId?: string }> {
  const sampling = { temperature: 0 };
  const withUser = [...t.transcript, t.user];
  switch (t.kind) {
    case "chat":
      return send(p, "/v1/chat/completions", { ...t.auth, "x-trajectory-id": t.id }, { model: p.model, messages: withUser, max_tokens: p.maxTokens, ...sampling, stream: t.stream }, t.stream, counts);
    case "stateless":
      return send(p, "/v1/chat/completions", t.auth, { model: p.model, messages: withUser, max_tokens: p.maxTokens, ...sampling, stream: t.stream }, t.stream, counts);
    case "session":
      return send(p, `/v1/tenants/${p.tenant}/trajectories/${t.id}/turns`, { ...t.auth, "idempotency-key": `${t.id}-${t.turn}` }, { messages: [t.user], max_tokens: p.maxTokens, ...sampling, stream: t.stream }, t.stream, counts);
    case "messages":
      return send(p, "/v1/messages", { ...t.auth, "x-trajectory-id": t.id, "anthropic-version": "2023-06-01" }, { model: p.model, system: t.transcript[0]!.content, messages: withUser.slice(1), max_tokens: p.maxTokens, ...sampling, stream: t.stream }, t.stream, counts);
    case "responses":
      return send(
        p,
        "/v1/responses",
        t.auth,
        { model: p.model, input: [{ role: "user", content: t.user.content }], max_output_tokens: p.maxTokens, ...sampling, stream: t.stream, ...(t.previousResponse ? { previous_response_id: t.previousResponse } : { instructions: t.transcript[0]!.content }) },
        t.stream,
        counts,
      );
  }
}

/** One request, resent after a 429 (waiting its Retry-After); its reply text and response id. Other failures throw TurnFailed after counting. */
async function send(p: SoakClientParams, path: string, headers: Record<string, string>, body: object, stream: boolean, counts: SoakCounts): Promise<{ text: string; responseId?: string }> {
  for (let attempt = 0; ; attempt++) {
    let res: Response;
    try {
      res = await fetch(`${p.edgeUrl}${path}`, { method: "POST", headers, body: JSON.stringify(body) });
    } catch (e) {
      throw fail(counts, `${path}: ${(e as Error).message}`);
    }
    if (res.status === 429 && attempt < 20) {
      counts.overloaded++;
      await res.body?.cancel();
      await sleep(1000 * Math.max(0.2, Number(res.headers.get("retry-after") ?? "1")));
      continue;
    }
    if (!res.ok || !res.body) {
      const text = await res.text();
      if (res.status === 503 && text.startsWith("Your worker restarted mid-request")) throw new DevProxyReset(`${path}: ${text}`);
      throw fail(counts, `${path}: ${res.status} ${text.slice(0, 200)}`);
    }
    if (!stream) return replyOfJson(await res.json());
    let text = "";
    let responseId: string | undefined;
    for await (const raw of sseJson(res.body)) {
      const c = raw as {
        error?: { code: string; message: string };
        type?: string;
        choices?: { delta?: { content?: string } }[];
        delta?: { text?: string; type?: string } | string;
        response?: { id?: string };
      };
      if (c.error || c.type === "error" || c.type === "response.failed") throw fail(counts, `${path}: mid-stream ${JSON.stringify(c).slice(0, 200)}`);
      text += c.choices?.[0]?.delta?.content ?? "";
      if (c.type === "content_block_delta" && typeof c.delta === "object") text += c.delta.text ?? "";
      if (c.type === "response.output_text.delta" && typeof c.delta === "string") text += c.delta;
      responseId = c.response?.id ?? responseId;
    }
    return { text, ...(responseId ? { responseId } : {}) };
  }
}

function replyOfJson(json: unknown): { text: string; responseId?: string } {
  const j = json as { object?: string; id?: string; choices?: { message: { content: string | null } }[]; content?: { type: string; text?: string }[]; output?: { type: string; content?: { type: string; text: string }[] }[] };
  if (j.choices) return { text: j.choices[0]?.message.content ?? "" };
  if (j.object === "response") return { text: (j.output ?? []).flatMap((o) => o.content ?? []).map((c) => c.text).join(""), ...(j.id ? { responseId: j.id } : {}) };
  if (j.content) return { text: j.content.filter((c) => c.type === "text").map((c) => c.text ?? "").join("") };
  return { text: "" };
}

/**
 * Runs a turn, resending it after a reset of `wrangler dev`'s proxy (at most 3 times). For a
 * trajectory with an id it first reads the state: one more stored turn than the client has done
 * means the turn ran and its answer was lost; only a session (its resend replays by
 * `Idempotency-Key`) can go on then, the others end the trajectory unverified.
 */
async function resendAfterResets<T>(p: SoakClientParams, id: string, done: number, auth: Record<string, string>, counts: SoakCounts, run: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await run();
    } catch (e) {
      if (!(e instanceof DevProxyReset)) throw e;
      counts.devProxyResets++;
      note("soak", `wrangler dev proxy reset at ${new Date().toISOString()}: ${e.message.slice(0, 80)}`);
      if (attempt >= 3) throw fail(counts, `${e.message} (4 times)`);
      if (p.kind === "chat" || p.kind === "session" || p.kind === "messages") {
        const state = await trajectoryState(p, id, auth, counts);
        if (state === undefined) throw new TurnFailed(`${id}: no state after a proxy reset`);
        if (state !== null && state.turns.length > done) {
          counts.devProxyResetsStored++;
          if (p.kind !== "session") throw new TurnFailed(`${id}: turn stored, answer lost to a proxy reset`);
        }
      }
      await sleep(200);
    }
  }
}

interface StoredState {
  message_count: number;
  turns: unknown[];
  idempotency_keys: number;
}

/** The edge's state of trajectory `id`: null when it answers otherwise than 200, undefined (an error counted) when it cannot be reached. */
async function trajectoryState(p: SoakClientParams, id: string, auth: Record<string, string>, counts: SoakCounts): Promise<StoredState | null | undefined> {
  try {
    const res = await fetch(`${p.edgeUrl}/v1/tenants/${p.tenant}/trajectories/${id}`, { headers: auth });
    if (!res.ok) {
      await res.body?.cancel();
      return null;
    }
    return (await res.json()) as StoredState;
  } catch (e) {
    fail(counts, `state of ${id}: ${(e as Error).message}`);
    return undefined;
  }
}

/** Compares the edge's state of a finished trajectory with what the client did. */
async function verify(p: SoakClientParams, id: string, kind: SoakKind, turns: number, clientMessages: number, counts: SoakCounts, auth: Record<string, string>): Promise<void> {
  const state = await trajectoryState(p, id, auth, counts);
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

function fail(counts: SoakCounts, what: string): TurnFailed {
  counts.errors++;
  if (counts.errorSamples.length < 10) {
    counts.errorSamples.push(what);
    note("soak", `error at ${new Date().toISOString()}: ${what}`);
  }
  return new TurnFailed(what);
}
