import { setTimeout as sleep } from "node:timers/promises";
import type { ChatMessage, ToolDefinition } from "../../protocol/messages";
import { sseJson } from "./sse";
import { answeringReply, type WorkloadTurn } from "./workload";

/**
 * The benchmarks' one agent-turn client: a greedy (`temperature: 0`) turn through any of the
 * edge's APIs, streamed or not, parsed into the reply message, its usage and its timing.
 *
 * - `chat`: chat completions, the whole transcript; `trajectoryId` as `x-trajectory-id` (none: a
 *   stateless turn, the oracle of the restart checks);
 * - `session`: POST .../trajectories/{id}/turns with only the new messages;
 * - `messages`: Anthropic's Messages API (the first message, a system one, as `system`);
 * - `responses`: the Responses API, chained by `previousResponseId` (else the system message as
 *   `instructions`), the last message as input.
 */

export const AUTH = { authorization: "Bearer sk-local-dev", "content-type": "application/json" };
export const TENANT = "local";

export type TurnApi = "chat" | "session" | "messages" | "responses";

export interface TurnParams {
  edgeUrl: string;
  model?: string;
  /** Default `chat`. */
  via?: TurnApi;
  /** Absent (chat only): a stateless turn. */
  trajectoryId?: string;
  messages: ChatMessage[];
  tools?: ToolDefinition[];
  maxTokens: number;
  stream: boolean;
  idempotencyKey?: string;
  /** `responses`: the response this turn follows. */
  previousResponseId?: string;
  /** Streaming: called on each content chunk (e.g. to kill something mid-turn). */
  onChunk?: (n: number) => void;
  /** More request headers (a client's session headers, e.g. OpenCode's `x-session-id` and `x-parent-session-id`). */
  headers?: Record<string, string>;
}

export interface TurnReply {
  /** The assistant message: its text, and its tool calls if it made any. */
  message: ChatMessage;
  content: string;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  /** Request sent to the first chunk carrying content or a tool call (not streamed: the whole turn). */
  ttftMs: number;
  /** `x-agent-edge-replayed`: an Idempotency-Key seen before answered from storage (non-streaming only). */
  replayed: boolean;
  /** The `x-agent-edge-backend` and `x-agent-edge-route` headers (null: none). */
  backend: string | null;
  route: string | null;
  /** `responses`: this reply's id. */
  responseId?: string;
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
    /** An HTTP error's answer: its status, its JSON error's code, its Retry-After. */
    readonly answer?: { status: number; errorCode: string; retryAfter: string | null; text: string },
  ) {
    super(message);
  }
}

/**
 * One turn; throws `TurnFailed` unless a whole reply came back (for chat and session turns, with usage).
 *
 * @example const reply = await sendTurn({ edgeUrl, model, messages, maxTokens: 8, stream: false }); // stateless
 */
export async function sendTurn(p: TurnParams): Promise<TurnReply> {
  const via = p.via ?? "chat";
  if (via === "session" && p.trajectoryId === undefined) throw new Error("a session turn needs a trajectory id");
  const headers: Record<string, string> = { ...AUTH, ...p.headers };
  if (via !== "session" && p.trajectoryId !== undefined) headers["x-trajectory-id"] = p.trajectoryId;
  if (p.idempotencyKey !== undefined) headers["idempotency-key"] = p.idempotencyKey;
  if (via === "messages") headers["anthropic-version"] = "2023-06-01";
  const t0 = performance.now();
  let chunks = 0;
  try {
    const res = await fetch(`${p.edgeUrl}${PATHS[via](p)}`, { method: "POST", headers, body: JSON.stringify(requestBody(via, p)) });
    if (!res.ok || !res.body) {
      const text = await res.text();
      const errorCode = /"code"\s*:\s*"([^"]*)"/.exec(text)?.[1] ?? "";
      throw new TurnFailed(`${res.status}: ${text.slice(0, 300)}`, String(res.status), 0, { status: res.status, errorCode, retryAfter: res.headers.get("retry-after"), text });
    }
    const meta = { replayed: res.headers.get("x-agent-edge-replayed") === "true", backend: res.headers.get("x-agent-edge-backend"), route: res.headers.get("x-agent-edge-route") };
    if (!p.stream) return { ...replyOfJson(await res.json()), ttftMs: performance.now() - t0, ...meta };
    const reply = { text: "", calls: [] as ToolCall[], usage: undefined as Usage | undefined, responseId: undefined as string | undefined, ttftMs: undefined as number | undefined };
    for await (const raw of sseJson(res.body)) {
      const c = raw as StreamChunk;
      if (c.error || c.type === "error" || c.type === "response.failed") throw new TurnFailed(`SSE error ${c.error?.code ?? c.type}: ${c.error?.message ?? JSON.stringify(c).slice(0, 200)}`, c.error?.code ?? String(c.type), chunks);
      const delta = c.choices?.[0]?.delta;
      const text = (delta?.content ?? "") + (c.type === "content_block_delta" && typeof c.delta === "object" ? (c.delta.text ?? "") : "") + (c.type === "response.output_text.delta" && typeof c.delta === "string" ? c.delta : "");
      if (text || delta?.tool_calls?.length) reply.ttftMs ??= performance.now() - t0;
      if (text) {
        reply.text += text;
        p.onChunk?.(++chunks);
      }
      for (const call of delta?.tool_calls ?? []) reply.calls[call.index] = { id: call.id, type: "function", function: { name: call.function.name, arguments: call.function.arguments } };
      reply.usage = c.usage ?? c.response?.usage ?? reply.usage;
      reply.responseId = c.response?.id ?? reply.responseId;
    }
    if (!reply.usage && (via === "chat" || via === "session")) throw new TurnFailed("the stream ended without a result", "cut", chunks);
    return {
      message: assistant(reply.text, reply.calls),
      content: reply.text,
      ...usageOf(reply.usage),
      ttftMs: reply.ttftMs ?? performance.now() - t0,
      ...meta,
      ...(reply.responseId ? { responseId: reply.responseId } : {}),
    };
  } catch (e) {
    if (e instanceof TurnFailed) throw e;
    // fetch's "fetch failed" (refused, reset) or a body read that broke off ("terminated").
    throw new TurnFailed(`${(e as Error).message}${(e as Error).cause ? ` (${String((e as Error).cause)})` : ""}`, chunks > 0 ? "cut" : "connection", chunks);
  }
}

/**
 * One agent turn as the workload clients send it: after the turn's tool pause, appends its new
 * messages (`answeringReply`) to `transcript`, sends the whole transcript as a chat completion
 * (up to 3 tries: a failed turn stores nothing, so a client may resend it; `onResend` hears each),
 * and appends the reply. `sentAt`: when the try that succeeded was sent (performance.now()).
 */
export async function sendAgentTurn(
  p: { edgeUrl: string; trajectoryId?: string; modelId: string; tools: ToolDefinition[]; turn: WorkloadTurn; transcript: ChatMessage[]; stream?: boolean; headers?: Record<string, string> },
  onResend: (e: Error) => void,
): Promise<{ reply: TurnReply; sentAt: number }> {
  await sleep(p.turn.pauseMs);
  p.transcript.push(...answeringReply(p.turn.newMessages, p.transcript.at(-1)));
  for (let attempt = 1; ; attempt++) {
    const sentAt = performance.now();
    try {
      const reply = await sendTurn({ edgeUrl: p.edgeUrl, model: p.modelId, ...(p.trajectoryId ? { trajectoryId: p.trajectoryId } : {}), ...(p.headers ? { headers: p.headers } : {}), messages: p.transcript, tools: p.tools, maxTokens: p.turn.maxTokens, stream: p.stream ?? true });
      p.transcript.push(reply.message);
      return { reply, sentAt };
    } catch (e) {
      if (attempt >= 3) throw new Error(`${p.trajectoryId ?? "a stateless turn"}: the turn failed 3 times: ${(e as Error).message}`);
      onResend(e as Error);
      await sleep(500);
    }
  }
}

const PATHS: Record<TurnApi, (p: TurnParams) => string> = {
  chat: () => "/v1/chat/completions",
  session: (p) => `/v1/tenants/${TENANT}/trajectories/${encodeURIComponent(p.trajectoryId!)}/turns`,
  messages: () => "/v1/messages",
  responses: () => "/v1/responses",
};

function requestBody(via: TurnApi, p: TurnParams): object {
  const common = { temperature: 0, stream: p.stream };
  const system = p.messages[0]?.role === "system" ? (p.messages[0].content ?? "") : undefined;
  switch (via) {
    case "chat":
    case "session":
      return { ...(p.model ? { model: p.model } : {}), messages: p.messages, ...(p.tools ? { tools: p.tools } : {}), max_tokens: p.maxTokens, ...common, ...(p.stream ? { stream_options: { include_usage: true } } : {}) };
    case "messages":
      return { model: p.model, ...(system !== undefined ? { system } : {}), messages: system !== undefined ? p.messages.slice(1) : p.messages, max_tokens: p.maxTokens, ...common };
    case "responses":
      return { model: p.model, input: [{ role: "user", content: p.messages.at(-1)?.content ?? "" }], max_output_tokens: p.maxTokens, ...common, ...(p.previousResponseId ? { previous_response_id: p.previousResponseId } : { instructions: system }) };
  }
}

type ToolCall = { id: string; type: "function"; function: { name: string; arguments: string } };

interface Usage {
  prompt_tokens?: number;
  completion_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number };
  /** Messages and Responses name them so. */
  input_tokens?: number;
  output_tokens?: number;
}

interface StreamChunk {
  error?: { code: string; message: string };
  type?: string;
  choices?: { delta?: { content?: string; tool_calls?: { index: number; id: string; function: { name: string; arguments: string } }[] } }[];
  delta?: { text?: string; type?: string } | string;
  response?: { id?: string; usage?: Usage };
  usage?: Usage;
}

function usageOf(u: Usage | undefined): { promptTokens: number; cachedTokens: number; completionTokens: number } {
  return { promptTokens: u?.prompt_tokens ?? u?.input_tokens ?? 0, cachedTokens: u?.prompt_tokens_details?.cached_tokens ?? 0, completionTokens: u?.completion_tokens ?? u?.output_tokens ?? 0 };
}

function assistant(text: string, calls: ToolCall[]): ChatMessage {
  return calls.length > 0 ? { role: "assistant", content: text || null, tool_calls: calls } : { role: "assistant", content: text };
}

/** A non-streamed answer of any of the APIs. */
function replyOfJson(json: unknown): Omit<TurnReply, "ttftMs" | "replayed" | "backend" | "route"> {
  const j = json as {
    object?: string;
    id?: string;
    choices?: { message: { content: string | null; tool_calls?: ToolCall[] } }[];
    content?: { type: string; text?: string }[];
    output?: { type: string; content?: { type: string; text: string }[] }[];
    usage?: Usage;
  };
  const usage = usageOf(j.usage);
  if (j.choices) {
    const m = j.choices[0]?.message;
    const content = m?.content ?? "";
    return { message: assistant(content, m?.tool_calls ?? []), content, ...usage };
  }
  const content = j.object === "response" ? (j.output ?? []).flatMap((o) => o.content ?? []).map((c) => c.text).join("") : (j.content ?? []).filter((c) => c.type === "text").map((c) => c.text ?? "").join("");
  return { message: assistant(content, []), content, ...usage, ...(j.object === "response" && j.id ? { responseId: j.id } : {}) };
}
