import { describe, expect, it } from "vitest";
import { ProtocolError } from "../../protocol";
import { inputMessages, messageItems, outputItems } from "./responses-items";
import { parseResponseId, responseId, responseToken } from "./response-id";

describe("Responses items <-> chat messages", () => {
  it("joins an assistant message and the calls after it into one assistant turn; outputs become tool messages", () => {
    const messages = inputMessages([
      { role: "developer", content: "Be brief." },
      { role: "user", content: [{ type: "input_text", text: "Read " }, { type: "input_text", text: "it." }] },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "Reading." }] },
      { type: "function_call", call_id: "c1", name: "read", arguments: "{}" },
      { type: "function_call", call_id: "c2", name: "read", arguments: '{"a":1}' },
      { type: "function_call_output", call_id: "c1", output: "one" },
      { type: "function_call_output", call_id: "c2", output: [{ type: "input_text", text: "two" }] },
      { type: "function_call", call_id: "c3", name: "read", arguments: "{}" },
    ]);
    expect(messages).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "Read it." },
      { role: "assistant", content: "Reading.", tool_calls: [{ id: "c1", type: "function", function: { name: "read", arguments: "{}" } }, { id: "c2", type: "function", function: { name: "read", arguments: '{"a":1}' } }] },
      { role: "tool", tool_call_id: "c1", content: "one" },
      { role: "tool", tool_call_id: "c2", content: "two" },
      { role: "assistant", content: null, tool_calls: [{ id: "c3", type: "function", function: { name: "read", arguments: "{}" } }] },
    ]);
  });

  it("round-trips a reply: its output items, sent back as input, are the stored reply", () => {
    const reply = { role: "assistant" as const, content: "Let me look.", tool_calls: [{ id: "call_0", type: "function" as const, function: { name: "read", arguments: '{"path":"a"}' } }] };
    expect(inputMessages(outputItems(reply, "t"))).toEqual([reply]);
    expect(messageItems({ role: "tool", tool_call_id: "call_0", content: "x" }, "k")).toEqual([{ type: "function_call_output", id: "fco_k", call_id: "call_0", output: "x", status: "completed" }]);
  });

  it("refuses unsupported items and parts, naming where", () => {
    expect(() => inputMessages([{ type: "reasoning" }])).toThrow(/input\[0\]\.type: "reasoning"/);
    expect(() => inputMessages([{ role: "user", content: [{ type: "input_image" }] }])).toThrow(/input\[0\]\.content\[0\]\.type: "input_image"/);
    expect(() => inputMessages([{ type: "function_call", name: "x", arguments: "{}" }])).toThrow(/input\[0\]\.call_id/);
  });
});

describe("response ids", () => {
  it("name their trajectory and token; anything else is a 404", () => {
    const token = responseToken();
    expect(token).toMatch(/^[0-9a-f]{32}$/);
    const id = responseId(token, "fork_ab.c:d-e");
    expect(parseResponseId(id)).toEqual({ token, trajectoryId: "fork_ab.c:d-e" });
    for (const bad of ["resp_", `resp_${token}`, `resp_${token}!!`, "msg_123", `resp_${token}${btoa("has space")}`]) {
      expect(() => parseResponseId(bad), bad).toThrow(ProtocolError);
    }
  });
});
