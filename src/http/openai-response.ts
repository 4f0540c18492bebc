import type { FinishReason, TokenLogprob, TopLogprob, Usage } from "../../protocol/messages";
import type { AssistantReply, TurnEvent } from "../../durable-objects/turn/turn-types";
import { ReplyTextSplitter } from "./reply-text";

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
 * chunk, content deltas as tokens arrive, tool-call deltas once the reply is parsed, a finish
 * chunk, an optional usage chunk, then `data: [DONE]`. With tools in the request, text that is a
 * tool call is held back (`ReplyTextSplitter`: it becomes `tool_calls`, not content).
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
  const split = new ReplyTextSplitter(options.hasTools);
  for await (const event of events) {
    if (event.type === "start") continue;
    if (event.type === "token") {
      if (event.logprobs) pending.push(...event.logprobs);
      const out = split.push(event.text);
      // Without tools every token event is a chunk (with its logprobs), even an empty one.
      if (out || !options.hasTools) yield chunk({ content: out }, null, take(true));
    } else if (event.type === "done") {
      const rest = split.finish((event.message.tool_calls?.length ?? 0) > 0);
      if (rest) yield chunk({ content: rest }, null, take(true));
      const calls = event.message.tool_calls ?? [];
      for (const [index, call] of calls.entries()) {
        yield chunk({ tool_calls: [{ index, id: call.id, type: "function", function: { name: call.function.name, arguments: call.function.arguments } }] }, null, take(false));
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
