import type { Context } from "hono";
import { ProtocolError, toProtocolError, type TokenLogprob } from "../../protocol";
import { formatBreakHeader } from "../../durable-objects/turn/prefix-break";
import type { TurnEvent } from "../../durable-objects/turn/turn-types";
import { errorResponse } from "./errors";
import { completionJson, sseChunks, type CompletionMeta } from "./openai-response";

/** How one API answers a turn: its JSON body and its SSE stream (errors take the route's shape: errors.ts). */
export interface TurnAnswer {
  /** The non-streaming body, from the done event (and every token's logprobs, when asked). */
  json: (done: Extract<TurnEvent, { type: "done" }>, logprobs: TokenLogprob[]) => unknown;
  /** The SSE stream's lines from every event after the first (the stream's own error event included). */
  sse: (events: AsyncIterable<TurnEvent>) => AsyncGenerator<string>;
  /** An SSE line for a failure that escaped `sse`. */
  sseError: (err: ProtocolError) => string;
  stream: boolean;
  headers: Record<string, string>;
  /** Sees each start event (which names the trajectory that runs the turn); answers headers to add. */
  onStart?: (start: Extract<TurnEvent, { type: "start" }>) => Record<string, string>;
}

/**
 * How a chat-completions turn is answered (`answerTurn`): the `chat.completion` JSON (collected)
 * or its SSE chunks.
 *
 * `logprobs`: the request asked for them (`choices[0].logprobs` then lists the token events').
 *
 * @example return answerTurn(c, events, chatAnswer({ model, stream: true, includeUsage: false, hasTools: false, logprobs: false }));
 */
export function chatAnswer(options: { model: string; stream: boolean; includeUsage: boolean; hasTools: boolean; logprobs: boolean }): TurnAnswer {
  const meta: CompletionMeta = { id: `chatcmpl-${crypto.randomUUID().replace(/-/g, "")}`, created: Math.floor(Date.now() / 1000), model: options.model };
  return {
    stream: options.stream,
    headers: {},
    json: (done, logprobs) => completionJson(meta, done, options.logprobs ? logprobs : undefined),
    sse: (all) => sseChunks(meta, all, { includeUsage: options.includeUsage, hasTools: options.hasTools, logprobs: options.logprobs }),
    sseError: (err) => `data: ${JSON.stringify({ error: { message: err.message, type: "server_error", code: err.code } })}\n\n`,
  };
}

/**
 * Answers a turn from its events in one API's shape (`TurnAnswer`). The first event decides the
 * status: an error before any token answers with the error's status and body; otherwise a 200
 * with the collected JSON, or an SSE stream relayed as events arrive. `start` events become the
 * `x-prefix-break` header; the done event adds the turn headers (`x-agent-edge-*`).
 *
 * @example return answerTurn(c, events, { stream: false, headers: {}, json: (done) => responseJson(done), sse, sseError });
 */
export async function answerTurn(c: Context, events: AsyncGenerator<TurnEvent>, answer: TurnAnswer): Promise<Response> {
  // `start` events carry what is known before the backend answers (the prefix break): headers.
  const headers: Record<string, string> = { ...answer.headers };
  let first: IteratorResult<TurnEvent>;
  try {
    for (;;) {
      first = await events.next();
      if (first.done || first.value.type !== "start") break;
      headers["x-prefix-break"] = formatBreakHeader(first.value.prefixBreak);
      Object.assign(headers, answer.onStart?.(first.value));
    }
  } catch (e) {
    return errorResponse(c, toProtocolError(e));
  }
  if (first.done) return errorResponse(c, new ProtocolError("internal_error", "the turn ended without a result"));
  if (first.value.type === "error") return errorResponse(c, errorOf(first.value));

  if (!answer.stream) {
    let event: TurnEvent = first.value;
    const logprobs: TokenLogprob[] = [];
    for (;;) {
      if (event.type === "done") return c.json(answer.json(event, logprobs) as object, 200, { ...headers, ...turnHeaders(event) });
      if (event.type === "error") return errorResponse(c, errorOf(event));
      if (event.type === "token" && event.logprobs) logprobs.push(...event.logprobs);
      const next = await events.next();
      if (next.done) return errorResponse(c, new ProtocolError("backend_unavailable", "the turn ended without a result"));
      event = next.value;
    }
  }

  async function* all(): AsyncGenerator<TurnEvent> {
    yield first.value as TurnEvent;
    yield* events;
  }
  const encoder = new TextEncoder();
  const chunks = answer.sse(all());
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const next = await chunks.next();
        if (next.done) controller.close();
        else controller.enqueue(encoder.encode(next.value));
      } catch (e) {
        controller.enqueue(encoder.encode(answer.sseError(toProtocolError(e))));
        controller.close();
      }
    },
    async cancel() {
      await events.return(undefined);
    },
  });
  return new Response(body, {
    status: 200,
    headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", connection: "keep-alive", ...headers },
  });
}

function errorOf(e: Extract<TurnEvent, { type: "error" }>): ProtocolError {
  return ProtocolError.fromFrame(e);
}

function turnHeaders(done: Extract<TurnEvent, { type: "done" }>): Record<string, string> {
  const h: Record<string, string> = {
    "x-agent-edge-turn": String(done.turn.turn),
    "x-agent-edge-mode": done.turn.mode,
    "x-agent-edge-backend": done.turn.backend,
  };
  if (done.turn.route) h["x-agent-edge-route"] = done.turn.route;
  if (done.replayed) h["x-agent-edge-replayed"] = "true";
  // A replayed turn sends no start event: its record has the break.
  if (done.turn.prefixBreak) h["x-prefix-break"] = formatBreakHeader(done.turn.prefixBreak);
  return h;
}
