import type { FinishReason, Usage } from "../../protocol/messages";
import type { ProtocolError } from "../../protocol";
import type { AssistantReply, TurnEvent } from "../../durable-objects/turn/turn-types";
import { ReplySteps, type ReplyStep } from "./reply-steps";
import { callItem, outputItems, type CallShapes, type ResponseItem } from "./responses-items";
import { namespacedCall } from "./responses-tools";
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
 * tokens arrive, then `.output_text.done`, `.content_part.done`, `.output_item.done`); each call
 * as a `function_call` item as it is generated (`ReplySteps`: `.output_item.added` with empty
 * `arguments` once its name is known, `.function_call_arguments.delta` per piece, then
 * `.function_call_arguments.done` and `.output_item.done` when the next call opens or the reply
 * ends); then `response.completed` (or `response.incomplete`) with the whole response. Items go
 * out one after another: the message item closes when the first call opens. A call the backend
 * did not stream (a replay) and a custom tool's call go out whole at their close. With tools,
 * text that may be a call is held back. A failure: `error`.
 *
 * @example for await (const line of responsesSse(meta, events)) write(line);
 */
export async function* responsesSse(meta: ResponseMeta, events: AsyncIterable<TurnEvent>): AsyncGenerator<string> {
  let seq = 0;
  const ev = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...data })}\n\n`;
  yield ev("response.created", { response: responseJson(meta, null) });
  yield ev("response.in_progress", { response: responseJson(meta, null) });
  const steps = new ReplySteps(meta.hasTools);
  const messageId = `msg_${meta.token}_0`;
  /** The message item: not yet, open (at `messageAt`), or done. */
  let message: "none" | "open" | "done" = "none";
  let messageAt = 0;
  let nextOutput = 0;
  /** Text that went out, and leading whitespace waiting for visible text (it opens no item). */
  let streamed = "";
  let held = "";
  /** Output index of each call that went out (by reply index), and whether it streams as a function_call. */
  const calls = new Map<number, { at: number; streams: boolean }>();
  /** The finished reply's items (known once the done event came). */
  let final: ResponseItem[] | undefined;
  const custom = new Set(meta.shapes?.customTools ?? []);

  function* closeMessage(): Generator<string> {
    if (message !== "open") return;
    message = "done";
    const last = final?.find((i) => i.type === "message");
    const item: ResponseItem = last ?? { type: "message", id: messageId, status: "completed", role: "assistant", content: [{ type: "output_text", text: streamed, annotations: [], logprobs: [] }] };
    yield* itemEvents(item, messageAt, true, ev);
  }
  function* render(s: ReplyStep): Generator<string> {
    if (s.type === "text") {
      // A message item opens with its first visible text (a reply of calls only has none); text
      // after the message item closed is the completed response's to say.
      if (message === "done") return;
      let delta = s.text;
      if (message === "none") {
        if (!(held + delta).trim()) {
          held += delta;
          return;
        }
        message = "open";
        messageAt = nextOutput++;
        yield ev("response.output_item.added", { output_index: messageAt, item: { type: "message", id: messageId, status: "in_progress", role: "assistant", content: [] } });
        yield ev("response.content_part.added", { item_id: messageId, output_index: messageAt, content_index: 0, part: { type: "output_text", text: "", annotations: [], logprobs: [] } });
        delta = held + delta;
        held = "";
      }
      streamed += delta;
      yield ev("response.output_text.delta", { item_id: messageId, output_index: messageAt, content_index: 0, delta, logprobs: [] });
      return;
    }
    if (s.type === "open") {
      yield* closeMessage();
      const at = nextOutput++;
      const streams = !custom.has(s.name);
      calls.set(s.index, { at, streams });
      if (!streams) return;
      const id = `fc_${meta.token}_0_${s.index}`;
      yield ev("response.output_item.added", { output_index: at, item: { type: "function_call", id, call_id: s.id, ...namespacedCall(s.name, meta.shapes?.namespacedTools ?? {}), arguments: "", status: "in_progress" } });
      if (s.arguments !== undefined) yield ev("response.function_call_arguments.delta", { item_id: id, output_index: at, delta: s.arguments });
      return;
    }
    const call = calls.get(s.index);
    if (!call) return;
    if (s.type === "arguments") {
      if (call.streams) yield ev("response.function_call_arguments.delta", { item_id: `fc_${meta.token}_0_${s.index}`, output_index: call.at, delta: s.delta });
      return;
    }
    const item = callItem(s.call, `${meta.token}_0_${s.index}`, meta.shapes ?? {});
    yield* itemEvents(item, call.at, call.streams, ev);
  }

  for await (const event of events) {
    if (event.type === "start") continue;
    if (event.type === "token") {
      for (const s of steps.token(event)) yield* render(s);
      continue;
    }
    if (event.type === "error") {
      yield ev("error", { code: event.code, message: event.message, param: null });
      return;
    }
    final = outputItems(event.message, meta.token, meta.shapes);
    for (const s of steps.finish(event.message)) yield* render(s);
    // A message the reply holds that never streamed (content of whitespace only), then the open one.
    const last = final.find((i) => i.type === "message");
    if (message === "none" && last) {
      message = "done";
      yield* itemEvents(last, nextOutput++, false, ev);
    }
    yield* closeMessage();
    const result: ResponseResult = { message: event.message, finishReason: event.finishReason, usage: event.usage, done: event };
    yield ev(result.finishReason === "length" ? "response.incomplete" : "response.completed", { response: responseJson(meta, result) });
  }
}

/** The events that finish an output item (`started`: its `added` event, and its text or arguments, already went out). */
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
    if (!started) {
      yield ev("response.output_item.added", { output_index: index, item: { ...item, arguments: "", status: "in_progress" } });
      yield ev("response.function_call_arguments.delta", { item_id: item.id, output_index: index, delta: item.arguments });
    }
    yield ev("response.function_call_arguments.done", { item_id: item.id, output_index: index, name: item.name, arguments: item.arguments });
  } else if (item.type === "custom_tool_call") {
    if (!started) yield ev("response.output_item.added", { output_index: index, item: { ...item, input: "", status: "in_progress" } });
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
