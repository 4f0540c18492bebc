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
    expect(() => inputMessages([{ type: "item_reference", id: "x" }])).toThrow(/input\[0\]\.type: "item_reference"/);
    expect(() => inputMessages([{ type: "reasoning", summary: "no" }])).toThrow(/input\[0\]\.summary/);
    expect(() => inputMessages([{ role: "user", content: [{ type: "input_image" }] }])).toThrow(/input\[0\]\.content\[0\]\.type: "input_image"/);
    expect(() => inputMessages([{ type: "function_call", name: "x", arguments: "{}" }])).toThrow(/input\[0\]\.call_id/);
  });
});

describe("what Codex sends back", () => {
  it("reasoning items are accepted and left out of the transcript, the same way every time", () => {
    const reply = { role: "assistant" as const, content: null, tool_calls: [{ id: "call_0", type: "function" as const, function: { name: "shell", arguments: "{}" } }] };
    const withReasoning = inputMessages([
      { role: "user", content: "go" },
      { type: "reasoning", id: "rs_1", summary: [{ type: "summary_text", text: "thinking" }], content: null, encrypted_content: "gAAAAB..." },
      { type: "function_call", call_id: "call_0", name: "shell", arguments: "{}" },
      { type: "function_call_output", call_id: "call_0", output: "ok" },
    ]);
    expect(withReasoning).toEqual([{ role: "user", content: "go" }, reply, { role: "tool", tool_call_id: "call_0", content: "ok" }]);
    expect(inputMessages([{ role: "user", content: "go" }, ...outputItems(reply, "t"), { type: "function_call_output", call_id: "call_0", output: "ok" }])).toEqual(withReasoning);
  });

  it("a namespaced function call is the call of its flat name", () => {
    expect(inputMessages([{ type: "function_call", call_id: "c", namespace: "github", name: "create_issue", arguments: "{}" }])).toEqual([
      { role: "assistant", content: null, tool_calls: [{ id: "c", type: "function", function: { name: "github__create_issue", arguments: "{}" } }] },
    ]);
    expect(inputMessages([{ type: "function_call", call_id: "c", namespace: "mcp__fs__", name: "read", arguments: "{}" }])[0]!.tool_calls![0]!.function.name).toBe("mcp__fs__read");
  });
});

describe("custom and namespaced tool calls go back as Codex expects them", () => {
  const shapes = { namespacedTools: { mcp__docs__search: { namespace: "mcp__docs__", name: "search" } }, customTools: ["apply_patch"] };
  const reply = {
    role: "assistant" as const,
    content: null,
    tool_calls: [
      { id: "call_0", type: "function" as const, function: { name: "mcp__docs__search", arguments: '{"q":"x"}' } },
      { id: "call_1", type: "function" as const, function: { name: "apply_patch", arguments: '{"input":"*** Begin Patch\\n*** End Patch"}' } },
      { id: "call_2", type: "function" as const, function: { name: "shell", arguments: "{}" } },
    ],
  };

  it("output items: function_call with namespace, custom_tool_call with its input, plain function_call", () => {
    expect(outputItems(reply, "t", shapes)).toEqual([
      { type: "function_call", id: "fc_t_0_0", call_id: "call_0", namespace: "mcp__docs__", name: "search", arguments: '{"q":"x"}', status: "completed" },
      { type: "custom_tool_call", id: "ctc_t_0_1", call_id: "call_1", name: "apply_patch", input: "*** Begin Patch\n*** End Patch", status: "completed" },
      { type: "function_call", id: "fc_t_0_2", call_id: "call_2", name: "shell", arguments: "{}", status: "completed" },
    ]);
    // Without shapes: every call a plain function_call under its flat name.
    expect(outputItems(reply, "t").map((i) => i.type)).toEqual(["function_call", "function_call", "function_call"]);
  });

  it("sent back as input, they are the stored reply; custom outputs are tool messages", () => {
    expect(inputMessages(outputItems(reply, "t", shapes))).toEqual([reply]);
    expect(inputMessages([{ type: "custom_tool_call", call_id: "c", name: "apply_patch", input: "p" }, { type: "custom_tool_call_output", call_id: "c", output: "Done" }])).toEqual([
      { role: "assistant", content: null, tool_calls: [{ id: "c", type: "function", function: { name: "apply_patch", arguments: '{"input":"p"}' } }] },
      { role: "tool", tool_call_id: "c", content: "Done" },
    ]);
    expect(() => inputMessages([{ type: "custom_tool_call", call_id: "c", name: "apply_patch" }])).toThrow(/input\[0\]\.input/);
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
