import { ProtocolError } from "../../protocol";
import type { CacheWrite, Usage } from "../../protocol/messages";
import { CACHE_TTL_MS } from "./messages-request";
import type { AssistantReply, TurnEvent } from "../../durable-objects/turn/turn-types";
import { anthropicErrorBody } from "./errors";
import { ReplySteps, type ReplyStep } from "./reply-steps";
import type { TurnAnswer } from "./respond";
import type { CacheDiagnosis } from "../../durable-objects/turn/cache-diagnosis";
import { anthropicDiagnostics } from "./cache-diagnostics";

/**
 * A turn answered in Anthropic's Messages API shape: the `message` JSON and its SSE stream
 * (docs/messages-api.md).
 */

/**
 * A turn's done event. `stopSequence`, the stop string that ended the reply, is the backend's
 * (`DoneFrame.stopSequence`) where the event carries it.
 */
export type MessagesDone = Extract<TurnEvent, { type: "done" }>;

export interface MessagesMeta {
  /** `msg_...`, random per answer. */
  id: string;
  model: string;
  /** The request's `stop_sequences`. */
  stopSequences: readonly string[];
  /** The request had tools: streamed text that may be a tool call is held back (`ReplySteps`). */
  hasTools: boolean;
  /** The request asked for cache diagnostics (`diagnostics`); `start`: the start event's diagnosis, for `message_start` (cache-diagnostics.ts). */
  diagnostics?: { previous: string | null; start?: CacheDiagnosis };
}

/** Prompt-cache writes by TTL, in tokens (what `usage.cache_creation` reports). */
export interface CacheCreation {
  ephemeral5m: number;
  ephemeral1h: number;
}

/**
 * The backend's cache writes (the tokens a turn computed under its cache points, per TTL asked)
 * as Anthropic's split: an hour's under `ephemeral_1h`, the rest under `ephemeral_5m`.
 *
 * @example cacheCreation([{ ttlMs: 300000, tokens: 1184 }]) // { ephemeral5m: 1184, ephemeral1h: 0 }
 */
export function cacheCreation(writes: readonly CacheWrite[] | undefined): CacheCreation {
  const out = { ephemeral5m: 0, ephemeral1h: 0 };
  for (const w of writes ?? []) {
    if (w.ttlMs >= CACHE_TTL_MS["1h"]) out.ephemeral1h += w.tokens;
    else out.ephemeral5m += w.tokens;
  }
  return out;
}

/** A fresh message id: `msg_` and 24 hex digits. */
export function messageId(): string {
  return `msg_${crypto.randomUUID().replace(/-/g, "").slice(0, 24)}`;
}

/**
 * Anthropic's usage object from a turn's usage. As Anthropic counts, the three input figures add
 * up to the prompt: `input_tokens` excludes the tokens read from the cache
 * (`cache_read_input_tokens` = cached tokens) and those written to it
 * (`cache_creation_input_tokens`, from `creation`, zeros when not given).
 *
 * @example messagesUsage({ promptTokens: 100, cachedTokens: 64, computedTokens: 36, completionTokens: 5 })
 * // { input_tokens: 36, output_tokens: 5, cache_read_input_tokens: 64, cache_creation_input_tokens: 0, cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 } }
 */
export function messagesUsage(u: Usage, creation: CacheCreation = { ephemeral5m: 0, ephemeral1h: 0 }) {
  const created = creation.ephemeral5m + creation.ephemeral1h;
  return {
    input_tokens: u.promptTokens - u.cachedTokens - created,
    output_tokens: u.completionTokens,
    cache_read_input_tokens: u.cachedTokens,
    cache_creation_input_tokens: created,
    cache_creation: { ephemeral_5m_input_tokens: creation.ephemeral5m, ephemeral_1h_input_tokens: creation.ephemeral1h },
  };
}

export type StopReason = "end_turn" | "max_tokens" | "stop_sequence" | "tool_use";

/**
 * Why the reply ended, as Anthropic says it: `tool_use` when it calls tools, `max_tokens` at the
 * budget, `stop_sequence` when a stop sequence ended it, else `end_turn`. `stop_sequence` is the
 * stop string: the backend's word for it, else the request's only one; with several and no word
 * from the backend it is null rather than a guess.
 *
 * @example messagesStop(done, ["\n\nHuman:"]) // { stop_reason: "stop_sequence", stop_sequence: "\n\nHuman:" }
 */
export function messagesStop(done: MessagesDone, stopSequences: readonly string[]): { stop_reason: StopReason; stop_sequence: string | null } {
  if ((done.message.tool_calls?.length ?? 0) > 0) return { stop_reason: "tool_use", stop_sequence: null };
  if (done.finishReason === "length") return { stop_reason: "max_tokens", stop_sequence: null };
  if (done.finishReason === "stop_sequence") return { stop_reason: "stop_sequence", stop_sequence: done.stopSequence ?? (stopSequences.length === 1 ? stopSequences[0]! : null) };
  return { stop_reason: "end_turn", stop_sequence: null };
}

/** A reply's tool calls as tool_use blocks (`input`: the arguments parsed; the backend's calls carry JSON object text). */
function toolUseBlocks(reply: AssistantReply) {
  return (reply.tool_calls ?? []).map((c) => ({ type: "tool_use" as const, id: c.id, name: c.function.name, input: JSON.parse(c.function.arguments) as unknown }));
}

/**
 * The non-streaming `message`: a text block when the reply has text, then one tool_use block per
 * call.
 *
 * @example c.json(messageJson(meta, done))
 */
export function messageJson(meta: MessagesMeta, done: MessagesDone) {
  const text = done.message.content ? [{ type: "text" as const, text: done.message.content }] : [];
  return {
    id: meta.id,
    type: "message",
    role: "assistant",
    model: meta.model,
    content: [...text, ...toolUseBlocks(done.message)],
    ...messagesStop(done, meta.stopSequences),
    usage: messagesUsage(done.usage, cacheCreation(done.cacheWrites)),
    ...(meta.diagnostics ? { diagnostics: anthropicDiagnostics(meta.diagnostics, done.diagnosis, done) } : {}),
  };
}

/** One SSE event in Anthropic's framing. */
function sse(name: string, data: object): string {
  return `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
}

/**
 * Anthropic's `error` SSE event (a failure after the stream began).
 *
 * @example messagesSseError(new ProtocolError("backend_unavailable", "gone")) // "event: error\ndata: {...}\n\n"
 */
export function messagesSseError(err: ProtocolError): string {
  return sse("error", anthropicErrorBody(err));
}

/**
 * Turns a turn's events into Anthropic's SSE stream: `message_start` (the message with empty
 * content; input usage zeros, since it is known only at the end), `ping`, the text block
 * (`content_block_start` / `text_delta`s as tokens arrive / `content_block_stop`), one block per
 * tool call as it is generated (`ReplySteps`: `content_block_start` with `input: {}` once its
 * name is known, an `input_json_delta` per piece of its arguments, `content_block_stop` when the
 * next call opens or the reply ends; a call that did not stream, as on a replay, has its
 * arguments in one delta), `message_delta` with the stop reason and the whole usage (the SDK's
 * `MessageStream` overwrites its snapshot's input and cache figures with it), `message_stop`.
 * With tools, text that may be a call is held back. A failure after the start is an `error`
 * event, and the stream ends.
 *
 * @example for await (const line of messagesSse(meta, events)) write(line);
 */
export async function* messagesSse(meta: MessagesMeta, events: AsyncIterable<TurnEvent>): AsyncGenerator<string> {
  const zero = messagesUsage({ promptTokens: 0, cachedTokens: 0, computedTokens: 0, completionTokens: 0 });
  yield sse("message_start", {
    type: "message_start",
    message: { id: meta.id, type: "message", role: "assistant", model: meta.model, content: [], stop_reason: null, stop_sequence: null, usage: zero, ...(meta.diagnostics ? { diagnostics: anthropicDiagnostics(meta.diagnostics, meta.diagnostics.start, undefined) } : {}) },
  });
  yield sse("ping", { type: "ping" });
  const steps = new ReplySteps(meta.hasTools);
  /** The next content block's index, and whether the text block is open. */
  let index = 0;
  let textOpen = false;
  function* render(s: ReplyStep): Generator<string> {
    if (s.type === "text") {
      if (!textOpen) {
        textOpen = true;
        yield sse("content_block_start", { type: "content_block_start", index, content_block: { type: "text", text: "" } });
      }
      yield sse("content_block_delta", { type: "content_block_delta", index, delta: { type: "text_delta", text: s.text } });
      return;
    }
    if (s.type === "open") {
      if (textOpen) {
        textOpen = false;
        yield sse("content_block_stop", { type: "content_block_stop", index: index++ });
      }
      yield sse("content_block_start", { type: "content_block_start", index, content_block: { type: "tool_use", id: s.id, name: s.name, input: {} } });
      if (s.arguments !== undefined) yield sse("content_block_delta", { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: s.arguments } });
    } else if (s.type === "arguments") {
      yield sse("content_block_delta", { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: s.delta } });
    } else {
      yield sse("content_block_stop", { type: "content_block_stop", index: index++ });
    }
  }
  for await (const event of events) {
    if (event.type === "start") continue;
    if (event.type === "token") {
      for (const s of steps.token(event)) yield* render(s);
    } else if (event.type === "done") {
      for (const s of steps.finish(event.message)) yield* render(s);
      if (textOpen) yield sse("content_block_stop", { type: "content_block_stop", index: index++ });
      yield sse("message_delta", { type: "message_delta", delta: messagesStop(event, meta.stopSequences), usage: messagesUsage(event.usage, cacheCreation(event.cacheWrites)) });
      yield sse("message_stop", { type: "message_stop" });
      return;
    } else {
      yield sse("error", anthropicErrorBody(errorOf(event)));
      return;
    }
  }
}

/**
 * How `answerTurn` answers a Messages API turn.
 *
 * @example return answerTurn(c, events, messagesAnswer(meta, parsed.stream, { "x-trajectory-id": id }));
 */
export function messagesAnswer(meta: MessagesMeta, stream: boolean, headers: Record<string, string>): TurnAnswer {
  // The start event's diagnosis is what `message_start` can say (it is sent before the backend answers).
  const onStart = (e: Extract<TurnEvent, { type: "start" }>) => {
    if (meta.diagnostics && e.diagnosis) meta.diagnostics.start = e.diagnosis;
    return {};
  };
  return { stream, headers, onStart, json: (done) => messageJson(meta, done), sse: (events) => messagesSse(meta, events), sseError: messagesSseError };
}

function errorOf(e: Extract<TurnEvent, { type: "error" }>): ProtocolError {
  return ProtocolError.fromFrame(e);
}
