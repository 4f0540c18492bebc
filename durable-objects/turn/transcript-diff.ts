import { sha256Hex } from "../../protocol/hex";
import type { ChatMessage, ToolDefinition } from "../../protocol/messages";

export type TranscriptDiff =
  /** The incoming transcript extends the stored one: only `newMessages` are new. */
  | { kind: "extends"; newMessages: ChatMessage[] }
  /** The incoming transcript differs from the stored one at message `index`. */
  | { kind: "diverged"; index: number };

/**
 * Compares a client's full transcript with the stored one. Messages are compared by their
 * canonical form (see `canonicalMessage`), so key order in the client's JSON does not matter.
 *
 * @example
 * diffTranscript(stored, incoming) // { kind: "extends", newMessages: [toolResult] }
 */
export function diffTranscript(stored: readonly ChatMessage[], incoming: readonly ChatMessage[]): TranscriptDiff {
  const n = Math.min(stored.length, incoming.length);
  for (let i = 0; i < n; i++) {
    if (canonicalMessage(stored[i]!) !== canonicalMessage(incoming[i]!)) return { kind: "diverged", index: i };
  }
  if (incoming.length < stored.length) return { kind: "diverged", index: incoming.length };
  return { kind: "extends", newMessages: incoming.slice(stored.length) };
}

/** A message as the edge stores and compares it: known fields only, fixed order. */
export function normalizeMessage(m: ChatMessage): ChatMessage {
  // A reply of only tool calls has no content: null as stored, "" as the AI SDK sends it back.
  const callsOnly = m.role === "assistant" && (m.tool_calls?.length ?? 0) > 0 && m.content === "";
  const out: ChatMessage = { role: m.role, content: callsOnly ? null : (m.content ?? null) };
  if (m.tool_calls && m.tool_calls.length > 0) {
    out.tool_calls = m.tool_calls.map((c) => ({ id: c.id, type: "function", function: { name: c.function.name, arguments: c.function.arguments } }));
  }
  if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
  if (m.name !== undefined) out.name = m.name;
  return out;
}

export function canonicalMessage(m: ChatMessage): string {
  return JSON.stringify(normalizeMessage(m));
}

export function canonicalTools(tools: readonly ToolDefinition[] | undefined): string {
  return JSON.stringify(tools ?? []);
}

/**
 * Names a trajectory's shareable prefix for the pool's approximate prefix index: the tenant salt,
 * the model, the first message (usually the system prompt) and the tools, canonically. Two
 * trajectories with the same key start with the same tokens on any backend. `second`, when
 * given, is in the key too: a sessionless conversation's key (its system prompt and first user
 * message stay the same while the client resends its growing history).
 *
 * @example await prefixKey({ cacheSalt, model, first: messages[0], tools })
 */
export async function prefixKey(p: { cacheSalt: string; model: string | undefined; first: ChatMessage | undefined; second?: ChatMessage | undefined; tools: readonly ToolDefinition[] | undefined }): Promise<string> {
  const leading = [p.first ? canonicalMessage(p.first) : "", ...(p.second ? [canonicalMessage(p.second)] : [])];
  const text = JSON.stringify([p.cacheSalt, p.model ?? "", ...leading, canonicalTools(p.tools)]);
  return (await sha256Hex(text)).slice(0, 32);
}
