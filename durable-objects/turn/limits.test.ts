import { describe, expect, it } from "vitest";
import { ProtocolError } from "../../protocol/errors";
import type { ChatMessage, ToolDefinition } from "../../protocol/messages";
import { edgeSettings, LIMIT_DEFAULTS } from "../settings";
import { checkLimits, transcriptChars } from "./limits";

const small = { maxMessages: 3, maxTools: 2, maxTotalChars: 100 };
const user = (content: string): ChatMessage => ({ role: "user", content });
const tool = (name: string): ToolDefinition => ({ type: "function", function: { name } });

function refusal(f: () => void): ProtocolError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(ProtocolError);
    return e as ProtocolError;
  }
  throw new Error("expected a refusal");
}

describe("checkLimits", () => {
  it("lets a turn at each cap through", () => {
    expect(() => checkLimits({ messages: [user("a"), user("b"), user("c")], tools: [tool("x"), tool("y")] }, small)).not.toThrow();
    const fill = 100 - 2 * JSON.stringify(tool("x")).length;
    expect(() => checkLimits({ messages: [user("a".repeat(fill))], tools: [tool("x"), tool("y")] }, small)).not.toThrow();
  });

  it("refuses one message, tool or character past a cap, naming the cap and its setting", () => {
    const m = refusal(() => checkLimits({ messages: [user("a"), user("b"), user("c"), user("d")], tools: undefined }, small));
    expect([m.code, m.httpStatus]).toEqual(["limit_exceeded", 400]);
    expect(m.message).toContain("4 messages");
    expect(m.message).toContain("limit of 3 (MAX_MESSAGES)");

    const t = refusal(() => checkLimits({ messages: [user("a")], tools: [tool("x"), tool("y"), tool("z")] }, small));
    expect([t.code, t.httpStatus]).toEqual(["limit_exceeded", 400]);
    expect(t.message).toContain("limit of 2 (MAX_TOOLS)");

    const c = refusal(() => checkLimits({ messages: [user("a".repeat(101))], tools: [] }, small));
    expect([c.code, c.httpStatus]).toEqual(["payload_too_large", 413]);
    expect(c.message).toContain("101 characters");
    expect(c.message).toContain("limit of 100 (MAX_TOTAL_CHARS)");
  });

  it("counts contents, names, tool-call ids and arguments, and tool definitions' JSON", () => {
    const messages: ChatMessage[] = [
      { role: "system", content: "12345" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_0", type: "function", function: { name: "ls", arguments: '{"d":1}' } }] },
      { role: "tool", tool_call_id: "call_0", name: "ls", content: "a.ts" },
    ];
    expect(transcriptChars(messages, [])).toBe(5 + (6 + 2 + 7) + (6 + 2 + 4));
    expect(transcriptChars([], [tool("ls")])).toBe(JSON.stringify(tool("ls")).length);
    // UTF-16 code units: an emoji counts 2.
    expect(transcriptChars([user("😀")], [])).toBe(2);
  });
});

describe("limit settings", () => {
  it("default to LIMIT_DEFAULTS and follow the one number rule", () => {
    expect(edgeSettings({}).limits).toEqual({ maxMessages: 10_000, maxTools: 512, maxTotalChars: 2_000_000 });
    expect(edgeSettings({}).maxHeaderBytes).toBe(LIMIT_DEFAULTS.maxHeaderBytes);
    const s = edgeSettings({ MAX_MESSAGES: "50", MAX_TOOLS: "0", MAX_TOTAL_CHARS: "x", MAX_HEADER_BYTES: "1024" });
    expect(s.limits).toEqual({ maxMessages: 50, maxTools: 512, maxTotalChars: 2_000_000 });
    expect(s.maxHeaderBytes).toBe(1024);
  });
});
