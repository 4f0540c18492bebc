import type { FinishReason, Usage } from "../../protocol/messages";
import type { ProtocolError } from "../../protocol";
import type { AssistantReply, TurnEvent } from "../../durable-objects/turn/turn-types";
import { ReplyTextSplitter } from "./reply-text";
import { outputItems, type CallShapes, type ResponseItem } from "./responses-items";
import { responseId } from "./response-id";
import type { TurnAnswer } from "./respond";
import type { CompareWith } from "../../durable-objects/turn/cache-diagnosis";
import { openaiDiagnostics } from "./cache-diagnostics";

/** What a response object is built from besides the turn's result. */
export interface ResponseMeta {
  token: string;
  /** The trajectory that holds it (a fork's, once the turn's start event named one); undefined: stateless. */
  trajectoryId: string | undefined;
  /** Whether it is stored (then its id names its trajectory and `GET` finds it). */
  stored: boolean;
  /** Unix seconds. */
  createdAt: number;
  model: string;
  /** The request's echoed fields (`ParsedResponsesRequest.echo`). */
  echo: Record<string, unknown>;
  hasTools: boolean;
  /** How the request's tool calls go back (namespaced and custom tools; absent: plain function calls). */
  shapes?: CallShapes;
  /** The request asked for prompt cache diagnostics: the comparison (undefined: an id not ours), said as `prompt_cache_diagnostics`. */
  diagnostics?: { compare: CompareWith | undefined };
}

/** A finished turn's result, as a response needs it (a live done event, or a stored response). */
export interface ResponseResult {
  message: AssistantReply;
  finishReason: FinishReason;
  usage: Usage;
  /** The live turn's done event (its cache diagnosis and record); absent for a stored response. */
  done?: Extract<TurnEvent, { type: "done" }>;
}

/** The Responses API's usage: `input_tokens` (cached included) with `input_tokens_details.cached_tokens`. */
export function responsesUsage(u: Usage) {
  return {
    input_tokens: u.promptTokens,
    input_tokens_details: { cached_tokens: u.cachedTokens },
    output_tokens: u.completionTokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: u.promptTokens + u.completionTokens,
  };
}

/** The response's id (`resp_...`): names its trajectory when stored. */
export function idOf(meta: ResponseMeta): string {
  return responseId(meta.token, meta.stored ? meta.trajectoryId : undefined);
}

/**
 * The `response` object: `status` "completed", or "incomplete" with `incomplete_details.reason`
 * "max_output_tokens" when the budget ended the reply; `in_progress` (no output, no usage) while
 * it streams.
 *
 * @example c.json(responseJson(meta, { message, finishReason, usage }))
 */
export function responseJson(meta: ResponseMeta, result: ResponseResult | null) {
  const incomplete = result?.finishReason === "length";
  return {
    id: idOf(meta),
    object: "response",
    created_at: meta.createdAt,
    status: result === null ? "in_progress" : incomplete ? "incomplete" : "completed",
    background: false,
    error: null,
    incomplete_details: incomplete ? { reason: "max_output_tokens" } : null,
    max_tool_calls: null,
    model: meta.model,
    output: result === null ? [] : outputItems(result.message, meta.token, meta.shapes),
    reasoning: { effort: null, summary: null },
    service_tier: "default",
    top_logprobs: 0,
    truncation: "disabled",
    user: null,
    ...meta.echo,
    usage: result === null ? null : responsesUsage(result.usage),
    ...(meta.diagnostics ? { prompt_cache_diagnostics: openaiDiagnostics(meta.diagnostics, result?.done) } : {}),
  };
}

/**
 * The Responses API's SSE stream (`event: <type>` / `data: {type, sequence_number, ...}`):
 * `response.created`, `response.in_progress`; the text as a message item
 * (`response.output_item.added`, `response.content_part.added`, `response.output_text.delta` as
 * tokens arrive, tool-call text held back by `ReplyTextSplitter`, then `.output_text.done`,
 * `.content_part.done`, `.output_item.done`); each call as a `function_call` item
 * (`.output_item.added`, `.function_call_arguments.delta` and `.done`, `.output_item.done`); then
 * `response.completed` (or `response.incomplete`) with the whole response. A failure: `error`.
 *
 * @example for await (const line of responsesSse(meta, events)) write(line);
 */
export async function* responsesSse(meta: ResponseMeta, events: AsyncIterable<TurnEvent>): AsyncGenerator<string> {
  let seq = 0;
  const ev = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...data })}\n\n`;
  yield ev("response.created", { response: responseJson(meta, null) });
  yield ev("response.in_progress", { response: responseJson(meta, null) });
  const split = new ReplyTextSplitter(meta.hasTools);
  const messageId = `msg_${meta.token}_0`;
  let open = false;
  let streamed = "";
  function* text(delta: string): Generator<string> {
    if (!delta) return;
    if (!open) {
      // A message item opens with its first visible text (a reply of calls only has none).
      if (!(streamed + delta).trim()) {
        streamed += delta;
        return;
      }
      open = true;
      yield ev("response.output_item.added", { output_index: 0, item: { type: "message", id: messageId, status: "in_progress", role: "assistant", content: [] } });
      yield ev("response.content_part.added", { item_id: messageId, output_index: 0, content_index: 0, part: { type: "output_text", text: "", annotations: [], logprobs: [] } });
      delta = streamed + delta;
    }
    streamed = "";
    yield ev("response.output_text.delta", { item_id: messageId, output_index: 0, content_index: 0, delta, logprobs: [] });
  }
  for await (const event of events) {
    if (event.type === "start") continue;
    if (event.type === "token") {
      yield* text(split.push(event.text));
      continue;
    }
    if (event.type === "error") {
      yield ev("error", { code: event.code, message: event.message, param: null });
      return;
    }
    yield* text(split.finish((event.message.tool_calls?.length ?? 0) > 0));
    const result: ResponseResult = { message: event.message, finishReason: event.finishReason, usage: event.usage, done: event };
    const items = outputItems(event.message, meta.token, meta.shapes);
    for (const [index, item] of items.entries()) yield* itemEvents(item, index, open && index === 0, ev);
    yield ev(result.finishReason === "length" ? "response.incomplete" : "response.completed", { response: responseJson(meta, result) });
  }
}

/** The events that finish an output item (`started`: its text already streamed). */
function* itemEvents(item: ResponseItem, index: number, started: boolean, ev: (type: string, data: object) => string): Generator<string> {
  if (item.type === "message") {
    const part = item.content[0]!;
    if (!started) {
      yield ev("response.output_item.added", { output_index: index, item: { ...item, status: "in_progress", content: [] } });
      yield ev("response.content_part.added", { item_id: item.id, output_index: index, content_index: 0, part: { ...part, text: "" } });
      yield ev("response.output_text.delta", { item_id: item.id, output_index: index, content_index: 0, delta: "text" in part ? part.text : "", logprobs: [] });
    }
    yield ev("response.output_text.done", { item_id: item.id, output_index: index, content_index: 0, text: "text" in part ? part.text : "", logprobs: [] });
    yield ev("response.content_part.done", { item_id: item.id, output_index: index, content_index: 0, part });
  } else if (item.type === "function_call") {
    yield ev("response.output_item.added", { output_index: index, item: { ...item, arguments: "", status: "in_progress" } });
    yield ev("response.function_call_arguments.delta", { item_id: item.id, output_index: index, delta: item.arguments });
    yield ev("response.function_call_arguments.done", { item_id: item.id, output_index: index, name: item.name, arguments: item.arguments });
  }
  yield ev("response.output_item.done", { output_index: index, item });
}

/**
 * How a Responses API turn is answered (`answerTurn`): the response JSON, or its SSE stream. The
 * turn's start event names the trajectory that holds the response (a fork's own when it forked),
 * which the id names, so `meta.trajectoryId` follows it.
 */
export function responsesAnswer(meta: ResponseMeta, stream: boolean, headers: Record<string, string>): TurnAnswer {
  return {
    stream,
    headers,
    onStart: (e): Record<string, string> => {
      if (e.trajectoryId !== undefined && meta.trajectoryId !== undefined) meta.trajectoryId = e.trajectoryId;
      if (e.responseToken !== undefined) meta.token = e.responseToken;
      return meta.trajectoryId !== undefined ? { "x-trajectory-id": meta.trajectoryId } : {};
    },
    json: (done) => responseJson(meta, { message: done.message, finishReason: done.finishReason, usage: done.usage, done }),
    sse: (events) => responsesSse(meta, events),
    sseError: (err: ProtocolError) => `event: error\ndata: ${JSON.stringify({ type: "error", code: err.code, message: err.message, param: null })}\n\n`,
  };
}
