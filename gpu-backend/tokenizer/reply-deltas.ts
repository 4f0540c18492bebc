import type { AssistantMessage, ReplyDelta } from "../../protocol/messages";

/** A reply rebuilt from its deltas: its content, and per call its id, name, arguments and the deltas (by position) that opened and last added to it. */
export interface SummedReply {
  content: string;
  calls: { id: string | undefined; name: string | undefined; arguments: string; opened: number; last: number }[];
}

/**
 * Adds up a reply's deltas (protocol/messages.ts `ReplyDelta`) the way a client does: content
 * concatenated, each call's arguments concatenated under its index. For tests and clients'
 * checks of the contract: the sums must match the done frame's message.
 *
 * @example
 * sumReplyDeltas([{ toolCalls: [{ index: 0, id: "call_1", name: "f", arguments: '{"a"' }] }, { toolCalls: [{ index: 0, arguments: ": 1}" }] }]);
 * // { content: "", calls: [{ id: "call_1", name: "f", arguments: '{"a": 1}', opened: 0, last: 1 }] }
 */
export function sumReplyDeltas(deltas: readonly (ReplyDelta | undefined)[]): SummedReply {
  const sum: SummedReply = { content: "", calls: [] };
  deltas.forEach((delta, at) => {
    sum.content += delta?.content ?? "";
    for (const piece of delta?.toolCalls ?? []) {
      const call = (sum.calls[piece.index] ??= { id: piece.id, name: piece.name, arguments: "", opened: at, last: at });
      call.arguments += piece.arguments ?? "";
      call.last = at;
    }
  });
  return sum;
}

/**
 * Where a reply's deltas break the contract with its final message (protocol/messages.ts
 * `ReplyDelta`), or undefined when they keep it: per call the same id and name and arguments
 * adding up byte for byte; content adding up to the message's (trimmed at its ends when there
 * are calls).
 *
 * @example
 * expect(replyDeltasMismatch(frames.map((f) => f.reply), done.message)).toBeUndefined();
 */
export function replyDeltasMismatch(deltas: readonly (ReplyDelta | undefined)[], message: AssistantMessage): string | undefined {
  const sum = sumReplyDeltas(deltas);
  const calls = message.tool_calls ?? [];
  const streamed = JSON.stringify(sum.calls.map((c) => [c.id, c.name, c.arguments]));
  const final = JSON.stringify(calls.map((c) => [c.id, c.function.name, c.function.arguments]));
  if (streamed !== final) return `streamed calls ${streamed}, message's ${final}`;
  const content = calls.length > 0 ? sum.content.trim() : sum.content;
  if (content !== (message.content ?? "")) return `streamed content ${JSON.stringify(content)}, message's ${JSON.stringify(message.content)}`;
  return undefined;
}
