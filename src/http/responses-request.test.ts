import { describe, expect, it } from "vitest";
import { ProtocolError } from "../../protocol";
import { parseResponsesBody } from "./responses-request";
import { namespacedCall, namespacedToolName, responsesTools } from "./responses-tools";

const shell = { type: "function", name: "shell", description: "Run a command", strict: false, parameters: { type: "object", properties: { command: { type: "array", items: { type: "string" } } }, required: ["command"] } };

/** A body shaped as Codex CLI 0.17x sends it (store: false, reasoning, namespace and hosted tools, no max_output_tokens). */
const codex = {
  model: "gpt-5-codex",
  instructions: "You are Codex, a coding agent.",
  input: [
    { type: "message", role: "developer", content: [{ type: "input_text", text: "<permissions instructions>sandbox</permissions instructions>" }] },
    { type: "message", role: "user", content: [{ type: "input_text", text: "<environment_context><cwd>/repo</cwd></environment_context>" }] },
    { type: "message", role: "user", content: [{ type: "input_text", text: "list the files" }] },
    { type: "reasoning", summary: [], content: null, encrypted_content: "gAAAAABo..." },
    { type: "function_call", name: "shell", arguments: '{"command":["ls"]}', call_id: "call_a" },
    { type: "function_call_output", call_id: "call_a", output: "README.md" },
    { type: "function_call", namespace: "mcp__docs__", name: "search", arguments: '{"q":"x"}', call_id: "call_b" },
    { type: "function_call_output", call_id: "call_b", output: "found" },
  ],
  tools: [
    shell,
    { type: "namespace", name: "mcp__docs__", description: "Tools in the mcp__docs__ namespace.", tools: [{ type: "function", name: "search", description: "Search docs", strict: false, defer_loading: true, parameters: { type: "object", properties: { q: { type: "string" } } } }] },
    { type: "web_search", external_web_access: false },
    { type: "custom", name: "apply_patch", description: "Apply a patch", format: { type: "grammar", syntax: "lark", definition: "start: x" } },
  ],
  tool_choice: "auto",
  parallel_tool_calls: false,
  reasoning: { effort: "medium", summary: "auto" },
  store: false,
  stream: true,
  include: ["reasoning.encrypted_content"],
  prompt_cache_key: "0199-session",
  text: { verbosity: "medium" },
  client_metadata: { "x-codex-installation-id": "abc" },
};

describe("parseResponsesBody: what Codex CLI sends", () => {
  it("accepts the body: namespace tools flattened, custom tools as functions, hosted tools dropped with warnings, reasoning items left out", () => {
    const p = parseResponsesBody(codex);
    expect(p.tools.map((t) => t.function.name)).toEqual(["shell", "mcp__docs__search", "apply_patch"]);
    expect(p.namespacedTools).toEqual({ mcp__docs__search: { namespace: "mcp__docs__", name: "search" } });
    expect(p.customTools).toEqual(["apply_patch"]);
    expect(p.tools[2]!.function).toEqual({
      name: "apply_patch",
      description: "Apply a patch",
      parameters: { type: "object", properties: { input: { type: "string", description: "The tool's input, as free text. It must follow this lark grammar:\nstart: x" } }, required: ["input"], additionalProperties: false },
      strict: true,
    });
    expect(p.warnings).toEqual(['tools[2]: "web_search" tools are not run by this server (it answers function calls only); dropped']);
    expect(p.messages.map((m) => m.role)).toEqual(["system", "user", "user", "assistant", "tool", "assistant", "tool"]);
    expect(p.messages[5]!.tool_calls![0]!.function.name).toBe("mcp__docs__search");
    expect(p.sampling.maxTokens).toBeUndefined();
    expect(p.store).toBe(false);
    expect(p.thinking).toBe(true);
    expect(p.promptCacheKey).toBe("0199-session");
    expect(p.constraint).toEqual({ type: "tool_calls", choice: "auto", parallel: false });
  });

  it("a strict tenant gets a 400 naming the first tool it would drop", () => {
    try {
      parseResponsesBody(codex, { strict: true });
      throw new Error("accepted");
    } catch (e) {
      expect(e).toBeInstanceOf(ProtocolError);
      expect((e as ProtocolError).code).toBe("invalid_request");
      expect((e as ProtocolError).message).toBe('tools[2].type: "web_search" tools are not run by this server (it answers function calls only); refused for this tenant (STRICT_TENANTS)');
    }
    expect(parseResponsesBody({ ...codex, tools: [...codex.tools.slice(0, 2), codex.tools[3]] }, { strict: true }).warnings).toEqual([]);
  });

  it("Codex 0.171's additional_tools input items: served with the tools, left out of the transcript", () => {
    const p = parseResponsesBody({
      input: [
        { type: "additional_tools", tools: [{ type: "namespace", name: "agents", tools: [{ type: "function", name: "list_agents", parameters: { type: "object", properties: {} } }] }, { type: "image_generation" }] },
        { role: "user", content: "go" },
      ],
      tools: [shell],
    });
    expect(p.tools.map((t) => t.function.name)).toEqual(["shell", "agents__list_agents"]);
    expect(p.namespacedTools).toEqual({ agents__list_agents: { namespace: "agents", name: "list_agents" } });
    expect(p.warnings).toEqual(['input[0].tools[1]: "image_generation" tools are not run by this server (it answers function calls only); dropped']);
    expect(p.messages).toEqual([{ role: "user", content: "go" }]);
    expect(() => parseResponsesBody({ input: [{ type: "additional_tools", tools: [shell] }, { role: "user", content: "go" }], tools: [shell] })).toThrow(/two tools are named "shell"/);
    expect(() => parseResponsesBody({ input: [{ type: "additional_tools" }] })).toThrow(/input\[0\]\.tools/);
  });

  it("max_output_tokens is passed as given; reasoning effort none is thinking off", () => {
    expect(parseResponsesBody({ input: "hi", max_output_tokens: 100000 }).sampling.maxTokens).toBe(100000);
    expect(parseResponsesBody({ input: "hi", reasoning: { effort: "none" } }).thinking).toBe(false);
    expect(parseResponsesBody({ input: "hi" }).thinking).toBeUndefined();
  });
});

describe("responsesTools", () => {
  it("names, maps back, and refuses wrong shapes", () => {
    expect(namespacedToolName("github", "create_issue")).toBe("github__create_issue");
    expect(namespacedToolName("mcp__fs__", "read")).toBe("mcp__fs__read");
    const t = responsesTools([{ type: "namespace", name: "gh", tools: [{ type: "function", name: "pr" }] }, { type: "local_shell" }, { type: "image_generation" }], false);
    expect(() => responsesTools([{ type: "custom" }], false)).toThrow(/tools\[0\]\.name/);
    expect(t.functions).toEqual([{ type: "function", name: "gh__pr" }]);
    expect(t.warnings).toHaveLength(2);
    expect(namespacedCall("gh__pr", t.namespaced)).toEqual({ namespace: "gh", name: "pr" });
    expect(namespacedCall("shell", t.namespaced)).toEqual({ name: "shell" });
    expect(namespacedCall("toString", t.namespaced)).toEqual({ name: "toString" });
    expect(() => responsesTools([{ type: "namespace", name: "gh", tools: [{ type: "web_search" }] }], false)).toThrow(/tools\[0\]\.tools\[0\]\.type: a namespace holds function and custom tools/);
    expect(() => responsesTools([{ type: "namespace", tools: [] }], false)).toThrow(/tools\[0\]\.name/);
    expect(() => responsesTools([{ type: "function" }], false)).toThrow(/tools\[0\]\.name/);
    expect(() => responsesTools([{ type: "function", name: "gh__pr" }, { type: "namespace", name: "gh", tools: [{ type: "function", name: "pr" }] }], false)).toThrow(/two tools are named "gh__pr"/);
  });
});
