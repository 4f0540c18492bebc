import { ProtocolError } from "../../protocol/errors";
import type { ChatMessage } from "../../protocol/messages";

/**
 * Refuses a transcript in which a `tool` message answers no call, as OpenAI does: every tool
 * message must follow an assistant message with `tool_calls` (only other tool messages between
 * them), and its `tool_call_id` must be one of that assistant message's call ids. Throws
 * `invalid_request` naming the first offending message; returns nothing otherwise.
 *
 * Only messages from `firstNew` on are checked (the ones the client sent on an append turn; the
 * stored ones before them may be answered), and they are named by the index the client sent,
 * `messages[i - firstNew]`; a stored message they refer to is named `stored message i`.
 *
 * Check the transcript in the ids the client used (before canonicalization renumbers them):
 * renumbering keeps a valid transcript valid, but could make an answer to no call look like one.
 *
 * @example
 * checkToolAnswers([{ role: "user", content: "hi" }, { role: "tool", tool_call_id: "x", content: "1" }]);
 * // throws: messages[1]: tool message answers tool_call_id "x", which no earlier assistant message's tool_calls names
 */
export function checkToolAnswers(messages: readonly ChatMessage[], firstNew = 0): void {
  const name = (i: number) => (i >= firstNew ? `messages[${i - firstNew}]` : `stored message ${i}`);
  for (let i = Math.max(0, firstNew); i < messages.length; i++) {
    const m = messages[i]!;
    if (m.role !== "tool") continue;
    const id = m.tool_call_id;
    if (id === undefined) throw new ProtocolError("invalid_request", `${name(i)}: tool message has no tool_call_id`);
    // The message it follows, past the other tool messages.
    let j = i - 1;
    while (j >= 0 && messages[j]!.role === "tool") j--;
    const caller = j >= 0 && messages[j]!.role === "assistant" && (messages[j]!.tool_calls?.length ?? 0) > 0 ? messages[j]! : undefined;
    if (caller?.tool_calls!.some((c) => c.id === id)) continue;
    // An older assistant message may name the id: then the answer is misplaced, else it answers nothing.
    let named = -1;
    for (let k = j; k >= 0 && named < 0; k--) if (messages[k]!.role === "assistant" && messages[k]!.tool_calls?.some((c) => c.id === id)) named = k;
    const quoted = JSON.stringify(id);
    if (named < 0) throw new ProtocolError("invalid_request", `${name(i)}: tool message answers tool_call_id ${quoted}, which no earlier assistant message's tool_calls names`);
    if (caller) {
      const ids = caller.tool_calls!.map((c) => JSON.stringify(c.id)).join(", ");
      throw new ProtocolError(
        "invalid_request",
        `${name(i)}: tool message answers tool_call_id ${quoted} of ${name(named)}, but it follows ${name(j)}, whose tool_calls are ${ids}: a tool message must answer a call of the assistant message it follows`,
      );
    }
    throw new ProtocolError(
      "invalid_request",
      `${name(i)}: tool message answers tool_call_id ${quoted} of ${name(named)}, but ${name(j)} (role ${messages[j]!.role}) comes between: a tool message must follow its assistant message with only tool messages between them`,
    );
  }
}
