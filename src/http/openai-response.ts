import type { FinishReason, TokenLogprob, TopLogprob, Usage } from "../../protocol/messages";
import type { AssistantReply, TurnEvent } from "../../durable-objects/turn/turn-types";
import { ReplySteps, type ReplyStep } from "./reply-steps";

type DoneEvent = Extract<TurnEvent, { type: "done" }>;

export interface CompletionMeta {
  id: string;
  created: number;
  model: string;
}

/** OpenAI's usage object, with `prompt_tokens_details.cached_tokens`. */
export function openAiUsage(u: Usage) {
  return {
    prompt_tokens: u.promptTokens,
    completion_tokens: u.completionTokens,
    total_tokens: u.promptTokens + u.completionTokens,
    prompt_tokens_details: { cached_tokens: u.cachedTokens },
  };
}

export function openAiFinishReason(reason: FinishReason, reply: AssistantReply): string {
  if (reply.tool_calls && reply.tool_calls.length > 0) return "tool_calls";
  return reason === "length" ? "length" : "stop";
}

/** OpenAI's `ChatCompletionTokenLogprob`: `{ token, logprob, bytes, top_logprobs: [{ token, logprob, bytes }] }`. */
function openAiTokenLogprob(t: TokenLogprob) {
  return { ...openAiTopLogprob(t), top_logprobs: t.topLogprobs.map(openAiTopLogprob) };
}

function openAiTopLogprob(t: TopLogprob) {
  return { token: t.token, logprob: t.logprob, bytes: t.bytes };
}

/**
 * A choice's `logprobs`: `null` when the request did not ask, else `{ content, refusal: null }`
 * with one entry per generated token (none for a replayed answer: logprobs are never stored).
 *
 * @example openAiLogprobs(undefined) // null
 */
export function openAiLogprobs(logprobs: readonly TokenLogprob[] | undefined) {
  return logprobs ? { content: logprobs.map(openAiTokenLogprob), refusal: null } : null;
}

/**
 * The non-streaming `chat.completion` object; `logprobs`: every token event's, when asked.
 *
 * @example c.json(completionJson(meta, done, asked ? collected : undefined))
 */
export function completionJson(meta: CompletionMeta, done: DoneEvent, logprobs?: readonly TokenLogprob[]) {
  return {
    id: meta.id,
    object: "chat.completion",
    created: meta.created,
    model: meta.model,
    choices: [
      {
        index: 0,
        message: { role: "assistant", content: done.message.content, ...(done.message.tool_calls ? { tool_calls: done.message.tool_calls } : {}), refusal: null },
        logprobs: openAiLogprobs(logprobs),
        finish_reason: openAiFinishReason(done.finishReason, done.message),
      },
    ],
    usage: openAiUsage(done.usage),
    system_fingerprint: null,
  };
}

/**
 * Turns the Durable Object's events into OpenAI's SSE `chat.completion.chunk` stream: a role
 * chunk, content deltas as tokens arrive, tool calls as they are generated (`ReplySteps`: a
 * call's first chunk `{index, id, type: "function", function: {name, arguments: ""}}`, then
 * `{index, function: {arguments: piece}}` per piece), a finish chunk, an optional usage chunk,
 * then `data: [DONE]`. A call the backend did not stream (a replay) goes out whole at the end,
 * its arguments in one piece; with tools, text that may be a call is held back until then.
 *
 * With `logprobs`, each content chunk carries `logprobs: { content, refusal: null }` for the
 * tokens whose text it carries (one chunk per token event, so a token still inside a multi-byte
 * character comes with empty content); tokens of held-back text go with the next chunk that
 * goes out (the first tool call's, else the finish chunk). Concatenated, the chunks' lists equal
 * the non-streaming answer's.
 *
 * @example for await (const line of sseChunks(meta, events, { includeUsage: true, hasTools: false, logprobs: false })) write(line);
 */
export async function* sseChunks(
  meta: CompletionMeta,
  events: AsyncIterable<TurnEvent>,
  options: { includeUsage: boolean; hasTools: boolean; logprobs: boolean },
): AsyncGenerator<string> {
  let pending: TokenLogprob[] = [];
  /** A chunk's `logprobs`: every token not yet sent (null when not asked, or for a chunk without content and no token left). */
  const take = (carriesContent: boolean) => {
    if (!options.logprobs || (!carriesContent && pending.length === 0)) return null;
    const out = openAiLogprobs(pending);
    pending = [];
    return out;
  };
  const chunk = (delta: object, finishReason: string | null, logprobs: object | null = null) =>
    `data: ${JSON.stringify({ id: meta.id, object: "chat.completion.chunk", created: meta.created, model: meta.model, choices: [{ index: 0, delta, logprobs, finish_reason: finishReason }] })}\n\n`;
  yield chunk({ role: "assistant", content: "" }, null);
  const steps = new ReplySteps(options.hasTools);
  /** A step as a chunk (none for a call's close: the next call or the finish chunk says it). */
  const render = (s: ReplyStep): string | undefined => {
    if (s.type === "text") return chunk({ content: s.text }, null, take(true));
    if (s.type === "open") return chunk({ tool_calls: [{ index: s.index, id: s.id, type: "function", function: { name: s.name, arguments: s.arguments ?? "" } }] }, null, take(false));
    if (s.type === "arguments") return chunk({ tool_calls: [{ index: s.index, function: { arguments: s.delta } }] }, null, take(false));
    return undefined;
  };
  for await (const event of events) {
    if (event.type === "start") continue;
    if (event.type === "token") {
      if (event.logprobs) pending.push(...event.logprobs);
      const out = steps.token(event);
      // Without tools every token event is a chunk (with its logprobs), even an empty one.
      if (out.length === 0 && !options.hasTools) yield chunk({ content: "" }, null, take(true));
      for (const s of out) {
        const line = render(s);
        if (line) yield line;
      }
    } else if (event.type === "done") {
      for (const s of steps.finish(event.message)) {
        const line = render(s);
        if (line) yield line;
      }
      yield chunk({}, openAiFinishReason(event.finishReason, event.message), take(false));
      if (options.includeUsage) {
        yield `data: ${JSON.stringify({ id: meta.id, object: "chat.completion.chunk", created: meta.created, model: meta.model, choices: [], usage: openAiUsage(event.usage) })}\n\n`;
      }
    } else {
      // Mid-stream failure: OpenAI-style error object, then end the stream.
      yield `data: ${JSON.stringify({ error: { message: event.message, type: "server_error", code: event.code } })}\n\n`;
      return;
    }
  }
  yield "data: [DONE]\n\n";
}
