import { describe, expect, it } from "vitest";
import type { ChatMessage, ToolDefinition } from "../../protocol/chat-content";
import { withGenericTools } from "./generic-tools";

const tools: ToolDefinition[] = [{ type: "function", function: { name: "read_file", parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } } }];
const call = (id: string, path: string) => ({ id, type: "function" as const, function: { name: "read_file", arguments: JSON.stringify({ path }) } });

describe("withGenericTools (tools for a template that renders none)", () => {
  it("appends the tools to the system message, or adds one", () => {
    const [withSystem] = withGenericTools([{ role: "system", content: "Be brief." }, { role: "user", content: "hi" }], tools);
    expect(withSystem!.content).toMatch(/^Be brief\.\n\n# Tools\n/);
    expect(withSystem!.content).toContain(`<tools>\n${JSON.stringify(tools[0])}\n</tools>`);
    const out = withGenericTools([{ role: "user", content: "hi" }], tools);
    expect(out.map((m) => m.role)).toEqual(["system", "user"]);
    expect(out[0]!.content).toMatch(/^# Tools\n/);
  });

  it("writes calls as <tool_call> blocks after the assistant's text, and one round's results as one user turn", () => {
    const messages: ChatMessage[] = [
      { role: "user", content: "Read a and b." },
      { role: "assistant", content: "Reading both.", tool_calls: [call("c1", "a"), call("c2", "b")] },
      { role: "tool", tool_call_id: "c1", content: "A" },
      { role: "tool", tool_call_id: "c2", content: "B" },
      { role: "assistant", content: "Done." },
    ];
    const out = withGenericTools(messages, tools);
    expect(out.slice(1)).toEqual([
      { role: "user", content: "Read a and b." },
      { role: "assistant", content: 'Reading both.\n<tool_call>\n{"name":"read_file","arguments":{"path":"a"}}\n</tool_call>\n<tool_call>\n{"name":"read_file","arguments":{"path":"b"}}\n</tool_call>' },
      { role: "user", content: "<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response>" },
      { role: "assistant", content: "Done." },
    ]);
    expect(out.some((m) => m.tool_calls || m.role === "tool")).toBe(false);
    expect(messages[1]!.tool_calls).toHaveLength(2); // the input is not changed
  });

  it("rewrites a grown conversation to the same messages for its old part (the rendered prefix stays)", () => {
    const turn1: ChatMessage[] = [{ role: "user", content: "Read a." }, { role: "assistant", content: null, tool_calls: [call("c1", "a")] }];
    const turn2: ChatMessage[] = [...turn1, { role: "tool", tool_call_id: "c1", content: "A" }, { role: "assistant", content: "It says A." }];
    const a = withGenericTools(turn1, tools);
    expect(withGenericTools(turn2, tools).slice(0, a.length)).toEqual(a);
  });
});
