import type { Context } from "hono";
import { ProtocolError, toProtocolError, type TokenLogprob } from "../../protocol";
import { formatBreakHeader } from "../../durable-objects/turn/prefix-break";
import type { TurnEvent } from "../../durable-objects/turn/turn-types";
import { errorResponse } from "./errors";
import { completionJson, sseChunks, type CompletionMeta } from "./openai-response";

/**
 * Answers a turn the OpenAI way from its events. The first event decides the status: an error
 * before any token answers with the error's status and JSON; otherwise a 200 with either the
 * `chat.completion` JSON (collected) or an SSE stream relayed as events arrive.
 *
 * `logprobs`: the request asked for them (`choices[0].logprobs` then lists the token events').
 *
 * @example return respondWithTurn(c, events, { model, stream: true, includeUsage: false, hasTools: false, logprobs: false, headers: {} });
 */
export async function respondWithTurn(
  c: Context,
  events: AsyncGenerator<TurnEvent>,
  options: { model: string; stream: boolean; includeUsage: boolean; hasTools: boolean; logprobs: boolean; headers: Record<string, string> },
): Promise<Response> {
  const meta: CompletionMeta = { id: `chatcmpl-${crypto.randomUUID().replace(/-/g, "")}`, created: Math.floor(Date.now() / 1000), model: options.model };
  // `start` events carry what is known before the backend answers (the prefix break): headers.
  const headers: Record<string, string> = { ...options.headers };
  let first: IteratorResult<TurnEvent>;
  try {
    for (;;) {
      first = await events.next();
      if (first.done || first.value.type !== "start") break;
      headers["x-prefix-break"] = formatBreakHeader(first.value.prefixBreak);
    }
  } catch (e) {
    return errorResponse(c, toProtocolError(e));
  }
  if (first.done) return errorResponse(c, new ProtocolError("internal_error", "the turn ended without a result"));
  if (first.value.type === "error") return errorResponse(c, errorOf(first.value));

  if (!options.stream) {
    let event: TurnEvent = first.value;
    const logprobs: TokenLogprob[] = [];
    for (;;) {
      if (event.type === "done") {
        return c.json(completionJson(meta, event, options.logprobs ? logprobs : undefined), 200, { ...headers, ...turnHeaders(event) });
      }
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
  const chunks = sseChunks(meta, all(), { includeUsage: options.includeUsage, hasTools: options.hasTools, logprobs: options.logprobs });
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const next = await chunks.next();
        if (next.done) controller.close();
        else controller.enqueue(encoder.encode(next.value));
      } catch (e) {
        const err = toProtocolError(e);
        controller.enqueue(encoder.encode(`data: ${JSON.stringify({ error: { message: err.message, type: "server_error", code: err.code } })}\n\n`));
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
  return new ProtocolError(e.code, e.message, { retryable: e.retryable });
}

function turnHeaders(done: Extract<TurnEvent, { type: "done" }>): Record<string, string> {
  const h: Record<string, string> = {
    "x-agent-edge-turn": String(done.turn.turn),
    "x-agent-edge-mode": done.turn.mode,
    "x-agent-edge-backend": done.turn.backend,
  };
  if (done.replayed) h["x-agent-edge-replayed"] = "true";
  // A replayed turn sends no start event: its record has the break.
  if (done.turn.prefixBreak) h["x-prefix-break"] = formatBreakHeader(done.turn.prefixBreak);
  return h;
}
