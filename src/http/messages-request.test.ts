import { describe, expect, it } from "vitest";
import { ProtocolError } from "../../protocol";
import { parseMessagesBody } from "./messages-request";

const base = { model: "m", max_tokens: 16 };
const weather = { name: "get_weather", description: "Weather in a city", input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } };

/** The invalid_request message a body is refused with. */
function refusal(body: unknown, kind: "create" | "count" = "create"): string {
  try {
    parseMessagesBody(body, kind);
  } catch (e) {
    expect(e).toBeInstanceOf(ProtocolError);
    expect((e as ProtocolError).code).toBe("invalid_request");
    return (e as ProtocolError).message;
  }
  throw new Error("the body was accepted");
}

describe("parseMessagesBody: conversion to the chat transcript", () => {
  it("system first, string and block content, sampling with Anthropic's defaults", () => {
    const p = parseMessagesBody({ ...base, system: [{ type: "text", text: "Be brief." }, { type: "text", text: "Be kind." }], messages: [{ role: "user", content: [{ type: "text", text: "Hi" }, { type: "text", text: "there" }] }] }, "create");
    expect(p.messages).toEqual([
      { role: "system", content: "Be brief.\n\nBe kind." },
      { role: "user", content: "Hi\n\nthere" },
    ]);
    expect(p.sampling).toEqual({ maxTokens: 16, temperature: 1, topP: 1, topK: 0, stop: [], stopTokenIds: [] });
    expect(p.tools).toBeUndefined();
    expect(p.constraint).toBeUndefined();
    expect(p.stream).toBe(false);
    expect(p.cacheBreakpoints).toEqual([]);
    const q = parseMessagesBody({ ...base, system: "S", temperature: 0, top_p: 0.5, top_k: 40, stop_sequences: ["\n\nHuman:"], stream: true, metadata: { user_id: "u" }, messages: [{ role: "user", content: "Hi" }] }, "create");
    expect(q.messages[0]).toEqual({ role: "system", content: "S" });
    expect(q.sampling).toEqual({ maxTokens: 16, temperature: 0, topP: 0.5, topK: 40, stop: ["\n\nHuman:"], stopTokenIds: [] });
    expect(q.stream).toBe(true);
  });

  it("tool_use blocks become tool calls, tool_result blocks tool messages before the user's text", () => {
    const p = parseMessagesBody(
      {
        ...base,
        tools: [weather],
        messages: [
          { role: "user", content: "Weather in Paris and Rome?" },
          {
            role: "assistant",
            content: [
              { type: "text", text: "Checking." },
              { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } },
              { type: "tool_use", id: "toolu_2", name: "get_weather", input: { city: "Rome" } },
            ],
          },
          {
            role: "user",
            content: [
              { type: "tool_result", tool_use_id: "toolu_1", content: "sunny" },
              { type: "tool_result", tool_use_id: "toolu_2", content: [{ type: "text", text: "rain" }, { type: "text", text: "12 C" }], is_error: false },
              { type: "text", text: "Thanks" },
            ],
          },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_3", name: "get_weather", input: {} }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_3", is_error: true, content: "city is required" }] },
        ],
      },
      "create",
    );
    expect(p.messages).toEqual([
      { role: "user", content: "Weather in Paris and Rome?" },
      {
        role: "assistant",
        content: "Checking.",
        tool_calls: [
          { id: "toolu_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
          { id: "toolu_2", type: "function", function: { name: "get_weather", arguments: '{"city":"Rome"}' } },
        ],
      },
      { role: "tool", tool_call_id: "toolu_1", content: "sunny" },
      { role: "tool", tool_call_id: "toolu_2", content: "rain\n\n12 C" },
      { role: "user", content: "Thanks" },
      { role: "assistant", content: null, tool_calls: [{ id: "toolu_3", type: "function", function: { name: "get_weather", arguments: "{}" } }] },
      // is_error is not shown to the model: the text as is.
      { role: "tool", tool_call_id: "toolu_3", content: "city is required" },
    ]);
    expect(p.tools).toEqual([{ type: "function", function: { name: "get_weather", description: "Weather in a city", parameters: weather.input_schema } }]);
  });

  it("an assistant message with no blocks is an empty reply", () => {
    const p = parseMessagesBody({ ...base, messages: [{ role: "user", content: "a" }, { role: "assistant", content: [] }, { role: "user", content: "b" }] }, "create");
    expect(p.messages[1]).toEqual({ role: "assistant", content: "" });
  });

  it("tool_choice maps to the reply constraint", () => {
    const withChoice = (tool_choice: unknown, tools: unknown[] = [weather]) => parseMessagesBody({ ...base, tools, ...(tool_choice ? { tool_choice } : {}), messages: [{ role: "user", content: "x" }] }, "create").constraint;
    expect(withChoice(undefined)).toEqual({ type: "tool_calls", choice: "auto", parallel: true });
    expect(withChoice({ type: "auto", disable_parallel_tool_use: true })).toEqual({ type: "tool_calls", choice: "auto", parallel: false });
    expect(withChoice({ type: "any" })).toEqual({ type: "tool_calls", choice: "required", parallel: true });
    expect(withChoice({ type: "tool", name: "get_weather", disable_parallel_tool_use: true })).toEqual({ type: "tool_calls", choice: { name: "get_weather" }, parallel: false });
    expect(withChoice({ type: "none" })).toEqual({ type: "tool_calls", choice: "none", parallel: true });
    expect(withChoice(undefined, [])).toBeUndefined();
    expect(withChoice({ type: "none" }, [])).toBeUndefined();
    // A forced choice without tools goes to the backend, which refuses it (unknown_tool).
    expect(withChoice({ type: "any" }, [])).toEqual({ type: "tool_calls", choice: "required", parallel: true });
  });

  it("cache_control marks become breakpoints on the converted transcript", () => {
    const eph = { type: "ephemeral" };
    const p = parseMessagesBody(
      {
        ...base,
        tools: [weather, { ...weather, name: "other", cache_control: { type: "ephemeral", ttl: "1h" } }],
        system: [{ type: "text", text: "S", cache_control: eph }],
        messages: [
          { role: "user", content: "q" },
          { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "get_weather", input: { city: "P" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: "r", cache_control: eph }, { type: "text", text: "go on" }] },
        ],
      },
      "create",
    );
    // [system, user, assistant, tool, user]
    expect(p.cacheBreakpoints).toEqual([
      { at: "tools", ttl: "1h" },
      { at: 0, ttl: "5m" },
      { at: 3, ttl: "5m" },
    ]);
    const q = parseMessagesBody({ ...base, cache_control: eph, messages: [{ role: "user", content: [{ type: "text", text: "a", cache_control: { type: "ephemeral", ttl: "5m" } }] }] }, "create");
    expect(q.cacheBreakpoints).toEqual([
      { at: 0, ttl: "5m" },
      { at: 0, ttl: "5m" },
    ]);
  });

  it("count_tokens takes the body without max_tokens", () => {
    const p = parseMessagesBody({ model: "m", system: "S", tools: [weather], messages: [{ role: "user", content: "x" }] }, "count");
    expect(p.messages).toHaveLength(2);
    expect(p.tools).toHaveLength(1);
  });
});

describe("parseMessagesBody: refusals name the field", () => {
  const user = { role: "user", content: "x" };
  it.each([
    ["model: ", { max_tokens: 1, messages: [user] }],
    ["max_tokens: ", { model: "m", messages: [user] }],
    ["max_tokens: ", { ...base, max_tokens: 0, messages: [user] }],
    ["messages: ", { ...base, messages: [] }],
    ['messages[0].role: must be "user", "assistant" or "system"', { ...base, messages: [{ role: "tool", content: "x" }] }],
    ["messages[0].content: must be a string or an array of content blocks", { ...base, messages: [{ role: "user", content: 5 }] }],
    ['messages[0].content[1].type: content block type "image" is not supported here (supported: text, tool_use, tool_result, thinking, redacted_thinking)', { ...base, messages: [{ role: "user", content: [{ type: "text", text: "a" }, { type: "image", source: {} }] }] }],
    ['messages[0].content[0].type: content block type "document" is not supported', { ...base, messages: [{ role: "user", content: [{ type: "document" }] }] }],
    ["messages[0].content[0]: a thinking block belongs in an assistant message", { ...base, messages: [{ role: "user", content: [{ type: "thinking", thinking: "hm" }] }] }],
    ["messages[1].content[0].thinking: ", { ...base, messages: [user, { role: "assistant", content: [{ type: "thinking" }] }, user] }],
    ['messages[1].content[0].type: a system prompt holds only text blocks, not "tool_use"', { ...base, messages: [user, { role: "system", content: [{ type: "tool_use", id: "a", name: "b", input: {} }] }, user] }],
    ["messages[0].content[0].text: ", { ...base, messages: [{ role: "user", content: [{ type: "text", text: 3 }] }] }],
    ["messages[1].content[0].input: ", { ...base, messages: [user, { role: "assistant", content: [{ type: "tool_use", id: "a", name: "b" }] }, user] }],
    ['messages[2].content[0].content[0].type: content block type "image" is not supported inside a tool_result (supported: text, tool_reference)', {
      ...base,
      messages: [user, { role: "assistant", content: [{ type: "tool_use", id: "a", name: "b", input: {} }] }, { role: "user", content: [{ type: "tool_result", tool_use_id: "a", content: [{ type: "image" }] }] }],
    }],
    ['messages[2].content[0].tool_use_id: "zzz" answers no tool_use block of the previous message (messages[1])', {
      ...base,
      messages: [user, { role: "assistant", content: [{ type: "tool_use", id: "a", name: "b", input: {} }] }, { role: "user", content: [{ type: "tool_result", tool_use_id: "zzz", content: "r" }] }],
    }],
    ["messages[0].content[0].tool_use_id: \"a\" answers no tool_use block", { ...base, messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "a", content: "r" }] }] }],
    ["messages[2].content[1]: tool_result blocks must come before any text", {
      ...base,
      messages: [user, { role: "assistant", content: [{ type: "tool_use", id: "a", name: "b", input: {} }] }, { role: "user", content: [{ type: "text", text: "t" }, { type: "tool_result", tool_use_id: "a", content: "r" }] }],
    }],
    ["messages[0].content[0]: a tool_use block belongs in an assistant message", { ...base, messages: [{ role: "user", content: [{ type: "tool_use", id: "a", name: "b", input: {} }] }] }],
    ["messages[1]: a final assistant message (prefill", { ...base, messages: [user, { role: "assistant", content: "The answer is" }] }],
    ["messages[0].content: a user message needs at least one", { ...base, messages: [{ role: "user", content: [] }] }],
    ['tools[0].type: tool type "web_fetch" is not supported', { ...base, tools: [{ type: "web_fetch", name: "web_fetch" }], messages: [user] }],
    ['tools[0].type: tool type "bash_20250124" is not supported', { ...base, tools: [{ type: "bash_20250124", name: "bash" }], messages: [user] }],
    ["tools[0].input_schema: ", { ...base, tools: [{ name: "x" }], messages: [user] }],
    ["tool_choice.type: must be {type: \"auto\"}", { ...base, tool_choice: { type: "function" }, messages: [user] }],
    ['thinking.type: must be {type: "enabled", budget_tokens?}, {type: "adaptive"} or {type: "disabled"}', { ...base, thinking: { type: "auto" }, messages: [user] }],
    ["thinking.budget_tokens: ", { ...base, thinking: { type: "enabled", budget_tokens: "lots" }, messages: [user] }],
    ["metadata.user_id: ", { ...base, metadata: { user_id: 7 }, messages: [user] }],
    ['output_config.format.type: only {type: "json_schema", schema} is supported', { ...base, output_config: { format: { type: "json_object" } }, messages: [user] }],
    ["output_config.format.schema: ", { ...base, output_config: { format: { type: "json_schema" } }, messages: [user] }],
    ["temperature: ", { ...base, temperature: 1.5, messages: [user] }],
    ["stop_sequences[0]: ", { ...base, stop_sequences: [""], messages: [user] }],
    ['system[0].cache_control.type: cache_control type "persistent" is not supported', { ...base, system: [{ type: "text", text: "s", cache_control: { type: "persistent" } }], messages: [user] }],
    ['tools[0].cache_control.ttl: cache_control ttl "24h" is not supported', { ...base, tools: [{ ...weather, cache_control: { type: "ephemeral", ttl: "24h" } }], messages: [user] }],
    ["messages[0].content[0].citations: citations are not supported", { ...base, messages: [{ role: "user", content: [{ type: "text", text: "a", citations: [{ type: "char_location" }] }] }] }],
    ["cache_control: at most 4 blocks", { ...base, system: [1, 2, 3, 4, 5].map((i) => ({ type: "text", text: `s${i}`, cache_control: { type: "ephemeral" } })), messages: [user] }],
  ])("%s", (message, body) => {
    expect(refusal(body)).toContain(message);
  });

  it("server tools are dropped with a warning, refused for a strict tenant", () => {
    const body = { ...base, tools: [weather, { type: "web_search_20250305", name: "web_search", max_uses: 5 }], messages: [user] };
    const p = parseMessagesBody(body, "create");
    expect(p.tools!.map((t) => t.function.name)).toEqual(["get_weather"]);
    expect(p.warnings).toEqual(['tools[1]: "web_search_20250305" is a server tool, which this server does not run; dropped']);
    expect(parseMessagesBody({ ...base, tools: [weather], messages: [user] }, "create").warnings).toEqual([]);
    try {
      parseMessagesBody(body, "create", { strict: true });
      throw new Error("accepted");
    } catch (e) {
      expect((e as ProtocolError).message).toBe('tools[1].type: "web_search_20250305" is a server tool, which this server does not run; refused for this tenant (STRICT_TENANTS)');
    }
  });

  it("output_config.format is structured output: the whole reply, or the answer of an auto tool choice", () => {
    const schema = { type: "object", properties: { title: { type: "string" } }, required: ["title"] };
    const answer = { type: "json_schema", schema, strict: true };
    expect(parseMessagesBody({ ...base, output_config: { format: { type: "json_schema", schema } }, messages: [user] }, "create").constraint).toEqual(answer);
    expect(parseMessagesBody({ ...base, tools: [weather], output_config: { format: { type: "json_schema", schema } }, messages: [user] }, "create").constraint).toEqual({ type: "tool_calls", choice: "auto", parallel: true, answer });
    expect(parseMessagesBody({ ...base, tools: [weather], tool_choice: { type: "any" }, output_config: { format: { type: "json_schema", schema } }, messages: [user] }, "create").constraint).toEqual({ type: "tool_calls", choice: "required", parallel: true });
    expect(parseMessagesBody({ ...base, tools: [weather], tool_choice: { type: "none" }, output_config: { format: { type: "json_schema", schema } }, messages: [user] }, "create").constraint).toEqual(answer);
  });

  it("thinking disabled and output_config without a format are accepted", () => {
    expect(() => parseMessagesBody({ ...base, thinking: { type: "disabled" }, output_config: { effort: "low" }, messages: [user] }, "create")).not.toThrow();
  });
});

describe("parseMessagesBody: what Claude Code 2.1 sends", () => {
  const billing = "x-anthropic-billing-header: cc_version=2.1.3.a1b; cc_entrypoint=cli";
  const claudeCode = {
    model: "claude-sonnet-4-5-20250929",
    max_tokens: 32000,
    stream: true,
    temperature: 1,
    thinking: { type: "adaptive" },
    context_management: { edits: [{ type: "clear_thinking_20251015", keep: "all" }] },
    output_config: { effort: "high" },
    metadata: { user_id: "user_abc_account_123_session_456" },
    system: [
      { type: "text", text: billing },
      { type: "text", text: "You are Claude Code, Anthropic's official CLI for Claude.", cache_control: { type: "ephemeral" } },
    ],
    tools: [{ ...weather, defer_loading: true, cache_control: { type: "ephemeral" } }],
    messages: [
      { role: "user", content: [{ type: "text", text: "<system-reminder>ctx</system-reminder>" }, { type: "text", text: "Weather?", cache_control: { type: "ephemeral" } }] },
      {
        role: "assistant",
        content: [
          { type: "thinking", thinking: "The user wants weather.", signature: "sig" },
          { type: "redacted_thinking", data: "opaque" },
          { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } },
        ],
      },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "sunny" }] },
      { role: "system", content: "The user switched to plan mode." },
      { role: "user", content: "And tomorrow?" },
    ],
  };

  it("accepts the whole body: billing line removed, thinking blocks dropped, system message kept in place", () => {
    const p = parseMessagesBody(claudeCode, "create");
    expect(p.messages).toEqual([
      { role: "system", content: "You are Claude Code, Anthropic's official CLI for Claude." },
      { role: "user", content: "<system-reminder>ctx</system-reminder>\n\nWeather?" },
      { role: "assistant", content: null, tool_calls: [{ id: "toolu_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
      { role: "tool", tool_call_id: "toolu_1", content: "sunny" },
      { role: "system", content: "The user switched to plan mode." },
      { role: "user", content: "And tomorrow?" },
    ]);
    expect(p.repairs).toEqual(["billing-header"]);
    expect(p.thinking).toBe(true);
    expect(p.metadataUserId).toBe("user_abc_account_123_session_456");
    expect(p.sampling.maxTokens).toBe(32000);
    expect(p.tools).toHaveLength(1);
    // The billing block had no mark; the prompt block's mark is on message 0.
    expect(p.cacheBreakpoints).toEqual([
      { at: "tools", ttl: "5m" },
      { at: 0, ttl: "5m" },
      { at: 1, ttl: "5m" },
    ]);
  });

  it("two sessions that differ only in the billing line convert to the same transcript", () => {
    const other = { ...claudeCode, system: [{ type: "text", text: "x-anthropic-billing-header: cc_version=2.1.4.ffe; cc_entrypoint=sdk-ts" }, claudeCode.system[1]] };
    expect(parseMessagesBody(other, "create").messages).toEqual(parseMessagesBody(claudeCode, "create").messages);
  });

  it("the billing line as the first line of a string system prompt or of a system message", () => {
    const p = parseMessagesBody({ ...base, system: `${billing}\nYou are helpful.`, messages: [{ role: "system", content: [{ type: "text", text: billing }] }, { role: "user", content: "hi" }] }, "create");
    expect(p.messages).toEqual([
      { role: "system", content: "You are helpful." },
      { role: "user", content: "hi" },
    ]);
    expect(p.repairs).toEqual(["billing-header"]);
    const plain = parseMessagesBody({ ...base, system: "You mention x-anthropic-billing-header: later.", messages: [{ role: "user", content: "hi" }] }, "create");
    expect(plain.repairs).toEqual([]);
    expect(plain.messages[0]!.content).toBe("You mention x-anthropic-billing-header: later.");
  });

  it("thinking: enabled and adaptive are true, disabled false, absent undefined", () => {
    const user = { role: "user", content: "x" };
    expect(parseMessagesBody({ ...base, thinking: { type: "enabled", budget_tokens: 1024 }, messages: [user] }, "create").thinking).toBe(true);
    expect(parseMessagesBody({ ...base, thinking: { type: "enabled" }, messages: [user] }, "create").thinking).toBe(true);
    expect(parseMessagesBody({ ...base, thinking: { type: "adaptive" }, messages: [user] }, "create").thinking).toBe(true);
    expect(parseMessagesBody({ ...base, thinking: { type: "disabled" }, messages: [user] }, "create").thinking).toBe(false);
    expect(parseMessagesBody({ ...base, messages: [user] }, "create").thinking).toBeUndefined();
    expect(parseMessagesBody({ ...base, metadata: {}, messages: [user] }, "create").metadataUserId).toBeUndefined();
  });

  it("a system message between a tool_use and its tool_result waits until the results are in", () => {
    const eph = { type: "ephemeral" };
    const p = parseMessagesBody(
      {
        ...base,
        messages: [
          { role: "user", content: "go" },
          { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "Read", input: {} }] },
          { role: "system", content: [{ type: "text", text: "Reminder.", cache_control: eph }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: "r", cache_control: eph }, { type: "text", text: "next", cache_control: eph }] },
          { role: "system", content: "Later." },
        ],
      },
      "create",
    );
    expect(p.messages).toEqual([
      { role: "user", content: "go" },
      { role: "assistant", content: null, tool_calls: [{ id: "t1", type: "function", function: { name: "Read", arguments: "{}" } }] },
      { role: "tool", tool_call_id: "t1", content: "r" },
      { role: "system", content: "Reminder." },
      { role: "user", content: "next" },
      { role: "system", content: "Later." },
    ]);
    expect(p.cacheBreakpoints.map((b) => b.at).sort()).toEqual([2, 3, 4]);
  });

  it("a tool search's tool_reference blocks inside a tool_result are shown as lines", () => {
    const p = parseMessagesBody(
      {
        ...base,
        messages: [
          { role: "user", content: "find a tool" },
          { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "ToolSearch", input: { query: "notebook" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: [{ type: "tool_reference", tool_name: "NotebookEdit" }, { type: "text", text: "1 tool" }] }] },
        ],
      },
      "create",
    );
    expect(p.messages.at(-1)).toEqual({ role: "tool", tool_call_id: "t1", content: "[tool_reference: NotebookEdit]\n\n1 tool" });
  });

  it("count_tokens has no output budget; a system message after the last assistant reply is no prefill", () => {
    const p = parseMessagesBody({ model: "m", messages: [{ role: "user", content: "x" }] }, "count");
    expect(p.sampling.maxTokens).toBeUndefined();
    expect(refusal({ ...base, messages: [{ role: "user", content: "x" }, { role: "assistant", content: "y" }, { role: "system", content: "z" }] })).toContain("a final assistant message");
  });
});
