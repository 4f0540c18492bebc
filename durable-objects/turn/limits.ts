import { ProtocolError } from "../../protocol/errors";
import type { ChatMessage, ToolDefinition } from "../../protocol/messages";
import type { Limits } from "../settings";

/**
 * The one check of a turn against the configured caps (`EdgeSettings.limits`), on the transcript
 * the model would see: a stateless turn's messages, or a trajectory's stored transcript with the
 * new messages (the trajectory object checks it before anything is stored or any backend asked),
 * and the tools that apply. Refuses with
 * - 400 `limit_exceeded` past MAX_MESSAGES or MAX_TOOLS (the message names the cap and its setting),
 * - 413 `payload_too_large` past MAX_TOTAL_CHARS (`transcriptChars`).
 *
 * `stored`: the trajectory's stored transcript the new `messages` follow (none: `messages` is all).
 *
 * @example checkLimits({ messages, tools }, edgeSettings(env).limits); // throws past a cap
 */
export function checkLimits(turn: { stored?: readonly ChatMessage[]; messages: readonly ChatMessage[]; tools: readonly ToolDefinition[] | undefined }, limits: Limits): void {
  const tools = turn.tools ?? [];
  const stored = turn.stored ?? [];
  const count = stored.length + turn.messages.length;
  if (count > limits.maxMessages) {
    throw new ProtocolError("limit_exceeded", `messages: the transcript holds ${count} messages, over the limit of ${limits.maxMessages} (MAX_MESSAGES)`);
  }
  if (tools.length > limits.maxTools) {
    throw new ProtocolError("limit_exceeded", `tools: ${tools.length} tools, over the limit of ${limits.maxTools} (MAX_TOOLS)`);
  }
  const chars = transcriptChars(stored, []) + transcriptChars(turn.messages, tools);
  if (chars > limits.maxTotalChars) {
    throw new ProtocolError("payload_too_large", `messages: the transcript and tools hold ${chars} characters, over the limit of ${limits.maxTotalChars} (MAX_TOTAL_CHARS)`);
  }
}

/**
 * The characters MAX_TOTAL_CHARS counts: every message's content, name and tool-call id, and its
 * tool calls' names and arguments, plus each tool definition's JSON text. Characters are UTF-16
 * code units (JavaScript string length: an emoji counts 2).
 *
 * @example transcriptChars([{ role: "user", content: "hello" }], []) // 5
 */
export function transcriptChars(messages: readonly ChatMessage[], tools: readonly ToolDefinition[]): number {
  let n = 0;
  for (const m of messages) {
    n += (m.content?.length ?? 0) + (m.name?.length ?? 0) + (m.tool_call_id?.length ?? 0);
    for (const c of m.tool_calls ?? []) n += c.id.length + c.function.name.length + c.function.arguments.length;
  }
  for (const t of tools) n += JSON.stringify(t).length;
  return n;
}
