import type { ChatMessage, DoneFrame, ReplyDelta, ToolCallDelta } from "../../protocol/messages";
import { canonicalJsonText } from "./canonicalize";
import { JsonCompactor, compactJsonText } from "./compact-json";
import { normalizeMessage } from "./transcript-diff";
import type { AssistantReply } from "./turn-types";

/**
 * A turn's reply in its two forms. Canonical trajectories name their tool calls `call_k`,
 * continuing the transcript's numbering, in both. Arguments differ:
 *
 *   - `client`: what the client gets, streamed and not (and an idempotent replay): the model's
 *     arguments compacted (`compactJsonText`: whitespace outside strings dropped, the model's key
 *     order), which streamed pieces can produce as they arrive (`ClientDeltas`).
 *   - `stored`: what the transcript keeps: canonical JSON (`canonicalJsonText`: sorted keys), so
 *     prefix comparison is unchanged; a client sending `client` back canonicalizes to it.
 *
 * Without canonicalization (`canonicalBefore` undefined: a stateless turn, or canonicalization
 * off) both are the backend's reply as it came.
 *
 * @example const { client, stored } = replyForms(done, plan.canonical ? plan.fullTranscript : undefined);
 */
export function replyForms(done: DoneFrame, canonicalBefore: readonly ChatMessage[] | undefined): { client: AssistantReply; stored: AssistantReply } {
  const reply = normalizeMessage(done.message) as AssistantReply;
  if (!canonicalBefore || !reply.tool_calls) return { client: reply, stored: reply };
  const first = callsIn(canonicalBefore);
  const withArgs = (rewrite: (args: string) => string): AssistantReply => ({
    ...reply,
    tool_calls: reply.tool_calls!.map((c, i) => ({ ...c, id: callId(first + i), function: { ...c.function, arguments: rewrite(c.function.arguments) } })),
  });
  // Stored: the client's arguments canonicalized, which is what a client sending them back stores
  // (also where canonical JSON would rewrite a value and so leaves the text as it is).
  return { client: withArgs(compactJsonText), stored: withArgs((a) => canonicalJsonText(compactJsonText(a))) };
}

/**
 * The streamed pieces of a canonical trajectory's reply as the client gets them: each call's id
 * `call_k` (the same as `replyForms`' `client`) and its argument pieces compacted as they come,
 * so the pieces of a call add up to the client reply's arguments.
 *
 * @example
 * const deltas = new ClientDeltas(callsIn(plan.fullTranscript));
 * emit({ type: "token", text, reply: deltas.map(frame.reply) });
 */
export class ClientDeltas {
  private readonly compactors = new Map<number, JsonCompactor>();

  /** `first`: how many tool calls the transcript before this reply holds. */
  constructor(private readonly first: number) {}

  /** One frame's delta, renamed and compacted (argument pieces that compact to nothing are left out). */
  map(delta: ReplyDelta): ReplyDelta {
    if (!delta.toolCalls) return delta;
    const toolCalls: ToolCallDelta[] = [];
    for (const d of delta.toolCalls) {
      let compactor = this.compactors.get(d.index);
      if (!compactor) this.compactors.set(d.index, (compactor = new JsonCompactor()));
      const args = d.arguments === undefined ? "" : compactor.push(d.arguments);
      const out: ToolCallDelta = { index: d.index };
      if (d.id !== undefined) out.id = callId(this.first + d.index);
      if (d.name !== undefined) out.name = d.name;
      if (args) out.arguments = args;
      if (out.id !== undefined || out.name !== undefined || out.arguments !== undefined) toolCalls.push(out);
    }
    const { toolCalls: _calls, ...rest } = delta;
    return toolCalls.length > 0 ? { ...rest, toolCalls } : rest;
  }
}

/**
 * How many tool calls a transcript holds (the next call is `call_<that>`).
 *
 * @example callsIn([{ role: "assistant", content: null, tool_calls: [call] }]) // 1
 */
export function callsIn(messages: readonly ChatMessage[]): number {
  return messages.reduce((n, m) => n + (m.tool_calls?.length ?? 0), 0);
}

function callId(k: number): string {
  return `call_${k}`;
}
