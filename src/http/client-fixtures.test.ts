import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseChatBody } from "./chat-request";
import { parseMessagesBody } from "./messages-request";
import { parseResponsesBody } from "./responses-request";
import { inputMessages, outputItems } from "./responses-items";

/**
 * What real agent CLIs send (captured: src/http/client-fixtures/README.md), through the request
 * parsers: each first turn is accepted, and each tool-result turn converts to a transcript that
 * extends the first one (so a trajectory takes it as a delta turn).
 */

type Json = Record<string, unknown>;
interface Fixture {
  first_turn: { path: string; body: Json };
  tool_result_turn: { appended: unknown[] } | null;
}

const fixture = (name: string): Fixture => JSON.parse(readFileSync(join(__dirname, "client-fixtures", name), "utf8")) as Fixture;

/** The tool-result turn's body: the first turn's transcript up to its last entry, then what was appended (from that entry on). */
function secondTurn(f: Fixture, key: "messages" | "input"): Json {
  const first = f.first_turn.body[key] as unknown[];
  return { ...f.first_turn.body, [key]: [...first.slice(0, -1), ...f.tool_result_turn!.appended] };
}

describe("Claude Code 2.1.332 (Messages API)", () => {
  const f = fixture("claude-code-2.1.332.json");
  const first = parseMessagesBody(f.first_turn.body, "create");
  const second = parseMessagesBody(secondTurn(f, "messages"), "create");

  it("its first turn: billing line removed, adaptive thinking, the system message kept where it stands, budget as given", () => {
    expect(f.first_turn.path).toBe("/v1/messages");
    expect(first.repairs).toEqual(["billing-header"]);
    expect(first.messages.map((m) => m.role)).toEqual(["system", "user", "system"]);
    expect(first.messages[0]!.content).toMatch(/^You are a Claude agent/);
    expect(first.messages[0]!.content).not.toContain("x-anthropic-billing-header");
    expect(first.messages[2]!.content).toMatch(/^# Environment/);
    expect(first.thinking).toBe(true);
    expect(first.sampling.maxTokens).toBe(128000);
    expect(first.metadataUserId).toContain('"session_id":"8718cbca');
    expect(first.tools).toHaveLength(12);
    expect(first.warnings).toEqual([]);
    expect(first.cacheBreakpoints.length).toBeLessThanOrEqual(4);
  });

  it("its tool-result turn extends the first (the system message resent as a string is the same message)", () => {
    expect(second.messages.slice(0, first.messages.length)).toEqual(first.messages);
    expect(second.messages.slice(first.messages.length).map((m) => m.role)).toEqual(["assistant", "tool"]);
    expect(second.messages.at(-1)).toMatchObject({ role: "tool", tool_call_id: "toolu_capture_1" });
  });
});

describe("Codex 0.171.0 (Responses API, responses lite)", () => {
  const f = fixture("codex-0.171.0.json");
  const first = parseResponsesBody(f.first_turn.body);
  const second = parseResponsesBody(secondTurn(f, "input"));

  it("its first turn: tools from additional_tools, namespaces flattened (custom exec included), no budget, thinking", () => {
    expect(f.first_turn.path).toBe("/v1/responses");
    expect(first.tools.map((t) => t.function.name)).toEqual([
      "functions__exec",
      "functions__wait",
      "functions__request_user_input",
      "functions__request_user_input_async",
      "functions__send_message_to_user_async",
      "clock__sleep",
      "collaboration__followup_task",
      "collaboration__interrupt_agent",
      "collaboration__list_agents",
      "collaboration__send_message",
      "collaboration__spawn_agent",
      "collaboration__wait_agent",
    ]);
    expect(first.customTools).toEqual(["functions__exec"]);
    expect(first.namespacedTools.collaboration__list_agents).toEqual({ namespace: "collaboration", name: "list_agents" });
    expect(first.warnings).toEqual([]);
    expect(first.messages.map((m) => m.role)).toEqual(["system", "system", "system", "system", "user", "user"]);
    expect(first.messages[4]!.content).toContain("<environment_context>");
    expect(first.sampling.maxTokens).toBeUndefined();
    expect(first.store).toBe(false);
    expect(first.thinking).toBe(true);
    expect(first.promptCacheKey).toBe("01a24d55-e411-7230-9962-136fd3f11e9a");
  });

  it("its tool-result turn extends the first; the reply's call goes out as Codex sent it back", () => {
    expect(second.messages.slice(0, first.messages.length)).toEqual(first.messages);
    const added = second.messages.slice(first.messages.length);
    expect(added).toEqual([
      { role: "assistant", content: null, tool_calls: [{ id: "call_capture_1", type: "function", function: { name: "collaboration__list_agents", arguments: "{}" } }] },
      { role: "tool", tool_call_id: "call_capture_1", content: '{"agents":[{"agent_name":"/root","agent_status":"running"}]}' },
    ]);
    const [call] = outputItems({ role: "assistant", content: null, tool_calls: added[0]!.tool_calls! }, "t", first);
    expect(call).toMatchObject({ type: "function_call", namespace: "collaboration", name: "list_agents", call_id: "call_capture_1", arguments: "{}" });
    expect(inputMessages(outputItems({ role: "assistant", content: null, tool_calls: added[0]!.tool_calls! }, "t", first))).toEqual([added[0]]);
  });

  it("a call of its custom exec tool goes out as a custom_tool_call in its namespace", () => {
    const reply = { role: "assistant" as const, content: null, tool_calls: [{ id: "call_0", type: "function" as const, function: { name: "functions__exec", arguments: '{"input":"await tools.list_agents()"}' } }] };
    expect(outputItems(reply, "t", first)).toEqual([{ type: "custom_tool_call", id: "ctc_t_0_0", call_id: "call_0", namespace: "functions", name: "exec", input: "await tools.list_agents()", status: "completed" }]);
    expect(inputMessages(outputItems(reply, "t", first))).toEqual([reply]);
  });
});

describe.each([
  ["opencode-1.18.33.json", 32000, 2],
  ["qwen-code-0.24.4.json", 64000, 2],
])("%s (Chat Completions)", (name, maxTokens, firstCount) => {
  const f = fixture(name);
  const first = parseChatBody(f.first_turn.body, "chat");
  const second = parseChatBody(secondTurn(f, "messages"), "chat");

  it("its first turn is accepted, with its budget as given", () => {
    expect(f.first_turn.path).toBe("/v1/chat/completions");
    expect(first.messages).toHaveLength(firstCount);
    expect(first.sampling.maxTokens).toBe(maxTokens);
    expect(first.tools).toHaveLength(10);
    expect(first.stream).toBe(true);
    expect(first.includeUsage).toBe(true);
  });

  it("its tool-result turn extends the first", () => {
    expect(second.messages.slice(0, first.messages.length)).toEqual(first.messages);
    expect(second.messages.slice(first.messages.length).map((m) => m.role)).toEqual(["assistant", "tool"]);
    expect(typeof second.messages.at(-1)!.content).toBe("string");
  });
});
