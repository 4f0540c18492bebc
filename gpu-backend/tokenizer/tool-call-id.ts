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
