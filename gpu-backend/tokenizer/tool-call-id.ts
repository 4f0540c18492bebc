import { randomBytes } from "node:crypto";

/**
 * A fresh OpenAI-style tool-call id: `call_` and 24 random hex characters.
 *
 * @example
 * newToolCallId(); // "call_3f9a0c1b2d4e5f60718293a4"
 */
export function newToolCallId(): string {
  return `call_${randomBytes(12).toString("hex")}`;
}

/**
 * Ids for a reply's calls in order: `ids` first (the ids its calls streamed with,
 * tool-call-stream.ts), fresh ones past them.
 *
 * @example
 * const next = toolCallIds(["call_a"]);
 * next(); // "call_a"
 * next(); // a fresh id
 */
export function toolCallIds(ids: readonly string[] = []): () => string {
  let i = 0;
  return () => ids[i++] ?? newToolCallId();
}
