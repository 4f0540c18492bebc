import type { ChatMessage } from "../protocol/messages";
import { sseJson } from "./sse";

/**
 * The client side of the restart checks (test/restarts.test.ts, bench/restarts-bench.ts): plain
 * text turns through the session URL (only new messages) or chat completions (the whole
 * transcript, `x-trajectory-id`; none: a stateless turn, the oracle), the trajectory's state and
 * its stored messages as the edge reports them.
 */

export const AUTH = { authorization: "Bearer sk-local-dev", "content-type": "application/json" };
const TENANT = "local";

export interface TurnReply {
  content: string;
  promptTokens: number;
  cachedTokens: number;
  /** `x-agent-edge-replayed`: an Idempotency-Key seen before answered from storage (non-streaming only). */
  replayed: boolean;
}

export interface TurnRecordView {
  turn: number;
  mode: "delta" | "full";
  full_reason: string | null;
  prompt_tokens: number;
  cached_tokens: number;
  route: string | null;
  backend: string;
}

export interface TrajectoryView {
  message_count: number;
  backend: string | null;
  turns: TurnRecordView[];
}

/** A turn that did not complete: an HTTP error, an SSE error event, a cut stream or a refused connection. */
export class TurnFailed extends Error {
  override readonly name = "TurnFailed";
  constructor(
    message: string,
    /** The HTTP status, the SSE error's code, `cut` (the stream ended without a result) or `connection`. */
    readonly code: string,
    /** Content chunks received before it failed. */
    readonly chunks: number,
  ) {
    super(message);
  }
}

export interface TurnParams {
  edgeUrl: string;
  model: string;
  /** `session`: POST .../trajectories/{id}/turns with `messages` = the new ones; `chat`: chat completions with the whole transcript. */
  via: "session" | "chat";
  /** Absent (chat only): a stateless turn. */
  trajectoryId?: string;
  messages: ChatMessage[];
  maxTokens: number;
  stream: boolean;
  idempotencyKey?: string;
  /** Streaming: called on each content chunk (e.g. to kill something mid-turn). */
  onChunk?: (n: number) => void;
}

/**
 * One greedy (`temperature: 0`) text turn; throws `TurnFailed` unless a whole reply with usage came back.
 *
 * @example const reply = await sendTurn({ edgeUrl, model, via: "chat", messages, maxTokens: 8, stream: false }); // stateless
 */
export async function sendTurn(p: TurnParams): Promise<TurnReply> {
  if (p.via === "session" && p.trajectoryId === undefined) throw new Error("a session turn needs a trajectory id");
  const url = p.via === "session" ? `${p.edgeUrl}/v1/tenants/${TENANT}/trajectories/${encodeURIComponent(p.trajectoryId!)}/turns` : `${p.edgeUrl}/v1/chat/completions`;
  const headers: Record<string, string> = { ...AUTH };
  if (p.via === "chat" && p.trajectoryId !== undefined) headers["x-trajectory-id"] = p.trajectoryId;
  if (p.idempotencyKey !== undefined) headers["idempotency-key"] = p.idempotencyKey;
  const body = { model: p.model, messages: p.messages, max_tokens: p.maxTokens, temperature: 0, stream: p.stream, ...(p.stream ? { stream_options: { include_usage: true } } : {}) };
  let chunks = 0;
  try {
    const res = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
    if (!res.ok || !res.body) throw new TurnFailed(`${res.status}: ${(await res.text()).slice(0, 300)}`, String(res.status), 0);
    if (!p.stream) {
      const json = (await res.json()) as { choices: { message: { content: string | null } }[]; usage: Usage };
      return { content: json.choices[0]!.message.content ?? "", ...usageOf(json.usage), replayed: res.headers.get("x-agent-edge-replayed") === "true" };
    }
    let content = "";
    let usage: Usage | undefined;
    for await (const raw of sseJson(res.body)) {
      const chunk = raw as { error?: { code: string; message: string }; choices?: { delta?: { content?: string } }[]; usage?: Usage };
      if (chunk.error) throw new TurnFailed(`SSE error ${chunk.error.code}: ${chunk.error.message}`, chunk.error.code, chunks);
      const text = chunk.choices?.[0]?.delta?.content;
      if (text) {
        content += text;
        chunks++;
        p.onChunk?.(chunks);
      }
      if (chunk.usage) usage = chunk.usage;
    }
    if (!usage) throw new TurnFailed("the stream ended without a result", "cut", chunks);
    return { content, ...usageOf(usage), replayed: false };
  } catch (e) {
    if (e instanceof TurnFailed) throw e;
    // fetch's "fetch failed" (refused, reset) or a body read that broke off ("terminated").
    throw new TurnFailed(`${(e as Error).message}${(e as Error).cause ? ` (${String((e as Error).cause)})` : ""}`, chunks > 0 ? "cut" : "connection", chunks);
  }
}

interface Usage {
  prompt_tokens: number;
  prompt_tokens_details?: { cached_tokens?: number };
}

function usageOf(u: Usage): { promptTokens: number; cachedTokens: number } {
  return { promptTokens: u.prompt_tokens, cachedTokens: u.prompt_tokens_details?.cached_tokens ?? 0 };
}

/** POST /v1/tenants/local/trajectories `{ id }` (201, or 200 when it exists). */
export async function createTrajectory(edgeUrl: string, id: string): Promise<void> {
  const res = await fetch(`${edgeUrl}/v1/tenants/${TENANT}/trajectories`, { method: "POST", headers: AUTH, body: JSON.stringify({ id }) });
  if (res.status !== 201 && res.status !== 200) throw new Error(`creating ${id} answered ${res.status}: ${await res.text()}`);
}

/** GET /v1/tenants/local/trajectories/{id}. */
export async function trajectoryState(edgeUrl: string, id: string): Promise<TrajectoryView> {
  const res = await fetch(`${edgeUrl}/v1/tenants/${TENANT}/trajectories/${encodeURIComponent(id)}`, { headers: AUTH });
  if (!res.ok) throw new Error(`state of ${id} answered ${res.status}: ${await res.text()}`);
  return (await res.json()) as TrajectoryView;
}

/** A stored message as the inspector reports it: role, the first 2,000 characters of its text, and its length. */
export interface StoredMessage {
  role: string;
  text: string;
  truncated: boolean;
  chars: number;
}

/** The stored transcript as the inspector reports it (up to 200 messages). */
export async function storedMessages(edgeUrl: string, id: string): Promise<StoredMessage[]> {
  const res = await fetch(`${edgeUrl}/v1/tenants/${TENANT}/trajectories/${encodeURIComponent(id)}/inspect.json`, { headers: AUTH });
  if (!res.ok) throw new Error(`inspect.json of ${id} answered ${res.status}: ${await res.text()}`);
  const view = (await res.json()) as { messages: StoredMessage[]; messagesOmitted: number };
  if (view.messagesOmitted > 0) throw new Error(`inspect.json of ${id} left ${view.messagesOmitted} messages out: compare shorter trajectories`);
  return view.messages;
}

/**
 * Where the stored transcript differs from the client's (undefined: the same messages in the same
 * order, so nothing was lost or duplicated). A long message is compared by its first 2,000
 * characters and its length.
 *
 * @example transcriptDifference(await storedMessages(edgeUrl, id), transcript) // undefined
 */
export function transcriptDifference(stored: StoredMessage[], expected: ChatMessage[]): string | undefined {
  for (let i = 0; i < Math.max(stored.length, expected.length); i++) {
    const s = stored[i];
    const e = expected[i];
    if (!s || !e) return `stored ${stored.length} messages, the client holds ${expected.length}`;
    const text = e.content ?? "";
    const same = s.truncated ? text.startsWith(s.text) && s.chars === text.length : s.text === text;
    if (s.role !== e.role || !same) return `message ${i}: stored ${s.role} ${JSON.stringify(s.text.slice(0, 80))} (${s.chars} characters), the client holds ${e.role} ${JSON.stringify(text.slice(0, 80))} (${text.length})`;
  }
  return undefined;
}

/** The first model the edge lists (GET /v1/models). */
export async function servedModel(edgeUrl: string): Promise<string> {
  const res = await fetch(`${edgeUrl}/v1/models`, { headers: AUTH });
  if (!res.ok) throw new Error(`GET /v1/models answered ${res.status}: ${await res.text()}`);
  return ((await res.json()) as { data: { id: string }[] }).data[0]!.id;
}
