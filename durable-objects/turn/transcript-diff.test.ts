import { describe, expect, it } from "vitest";
import type { ChatMessage } from "../../protocol/messages";
import { canonicalMessage, normalizeMessage } from "./transcript-diff";

describe("normalizeMessage", () => {
  const call = { id: "call_0", type: "function" as const, function: { name: "read", arguments: "{}" } };
  it("reads a tool-call-only reply sent back with content \"\" (the AI SDK, OpenCode) as the stored one with null", () => {
    const stored: ChatMessage = { role: "assistant", content: null, tool_calls: [call] };
    const resent: ChatMessage = { role: "assistant", content: "", tool_calls: [call] };
    expect(canonicalMessage(resent)).toBe(canonicalMessage(stored));
    expect(normalizeMessage(resent).content).toBeNull();
  });
  it("keeps an empty reply without calls, and empty user text, as they are", () => {
    expect(normalizeMessage({ role: "assistant", content: "" }).content).toBe("");
    expect(normalizeMessage({ role: "user", content: "" }).content).toBe("");
  });
});
