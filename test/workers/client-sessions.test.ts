import { describe, expect, it } from "vitest";
import type { ChatMessage } from "../../protocol/messages";
import { call, chat, completion, getState, replyOf, SMALL, stored, trajectoryPath, uid, uniqueSystem } from "./helpers";

/**
 * Sessions the way agent CLIs name them (src/http/session-key.ts): their session headers name the
 * trajectory; a side request under a session (no tools: a title, a summary) runs beside it without
 * locking or rewriting it; a subagent is its own trajectory linked to its parent.
 */
const TOOLS = [{ type: "function", function: { name: "read_file", description: "Read a file", parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } } }];
const ANTHROPIC_TOOLS = [{ name: "read_file", description: "Read a file", input_schema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } }];

function messages(body: Record<string, unknown>, headers: Record<string, string>): Promise<Response> {
  return call("/v1/messages", { body, headers: { "anthropic-version": "2023-06-01", ...headers } });
}

describe("client sessions", () => {
  it("Claude Code's session header names the trajectory: turn 2 is a delta on turn 1", async () => {
    const session = crypto.randomUUID();
    const system = uniqueSystem().content!;
    const first = [{ role: "user", content: "List the files." }];
    const r1 = await messages({ model: "claude-sonnet-4-5", max_tokens: 2, temperature: 0, system, tools: ANTHROPIC_TOOLS, messages: first }, { "x-claude-code-session-id": session });
    expect(r1.status, await r1.clone().text()).toBe(200);
    expect(r1.headers.get("x-trajectory-id")).toBe(session);
    const m1 = (await r1.json()) as { content: { type: string; text?: string }[]; model: string };
    expect(m1.model).toBe("claude-sonnet-4-5");
    const second = [...first, { role: "assistant", content: m1.content }, { role: "user", content: "Go on." }];
    const r2 = await messages({ model: "claude-sonnet-4-5", max_tokens: 2, temperature: 0, system, tools: ANTHROPIC_TOOLS, messages: second }, { "x-claude-code-session-id": session });
    expect(r2.status).toBe(200);
    const state = await getState("a", session);
    expect(state.turns.map((t) => t.mode)).toEqual(["full", "delta"]);
    expect(state.turns[1]!.cached_tokens).toBeGreaterThan(0);
  });

  it("a side request under a session (no tools) runs beside a running turn: no 409, nothing stored", async () => {
    const session = `ses_${crypto.randomUUID().slice(0, 8)}`;
    const main: ChatMessage[] = [uniqueSystem(), { role: "user", content: "Write a long story about a robot." }];
    const first = await completion(await chat({ messages: main, tools: TOOLS, ...SMALL }, { headers: { "x-session-id": session } }));
    const before = await stored("a", session);
    expect(before.messages).toHaveLength(3);
    // A long main turn and, while it runs, a title request under the same session.
    const next = [...main, { role: "assistant", content: first.choices[0]!.message.content }, { role: "user", content: "Go on." }];
    const running = chat({ messages: next, tools: TOOLS, max_tokens: 48, temperature: 0, stream: true }, { headers: { "x-session-id": session } });
    const title = await chat({ messages: [{ role: "system", content: "Generate a title for this conversation." }, { role: "user", content: "Write a long story about a robot." }], ...SMALL }, { headers: { "x-session-id": session } });
    expect(title.status, await title.clone().text()).toBe(200);
    expect(title.headers.get("x-agent-edge-side")).toBe("true");
    expect(title.headers.get("x-trajectory-id")).toBeNull();
    const long = await running;
    expect(long.status).toBe(200);
    await long.text();
    const after = await stored("a", session);
    expect(after.messages).toHaveLength(5);
    expect(after.messages.slice(0, 3)).toEqual(before.messages);
    expect((await getState("a", session)).turns.map((t) => t.mode)).toEqual(["full", "delta"]);
  });

  it("an explicit trajectory id keeps every request a turn, tools or not", async () => {
    const id = uid("explicit-notools");
    await completion(await chat({ messages: [uniqueSystem(), { role: "user", content: "hi" }], ...SMALL }, { headers: { "x-trajectory-id": id, "x-session-id": "ignored" } }));
    expect((await getState("a", id)).turns).toHaveLength(1);
  });

  it("Codex's session-id header names a Responses trajectory, stored or not", async () => {
    const session = crypto.randomUUID();
    const input = [{ role: "user", content: [{ type: "input_text", text: "Run the tests." }] }];
    const body = { model: "gpt-5-codex", instructions: uniqueSystem().content, input, tools: [{ type: "function", name: "shell", parameters: { type: "object", properties: { command: { type: "string" } } } }], store: false, max_output_tokens: 2, temperature: 0, prompt_cache_key: session };
    const r1 = await call("/v1/responses", { body, headers: { "session-id": session } });
    expect(r1.status, await r1.clone().text()).toBe(200);
    expect(r1.headers.get("x-trajectory-id")).toBe(session);
    expect((await getState("a", session)).turns).toHaveLength(1);
  });

  it("subagents: Claude Code's agent id and OpenCode's parent session make their own trajectory, linked to the parent", async () => {
    const session = crypto.randomUUID();
    const body = { model: "claude-haiku-4-5", max_tokens: 2, temperature: 0, system: uniqueSystem().content, tools: ANTHROPIC_TOOLS, messages: [{ role: "user", content: "Search the code." }] };
    const r = await messages(body, { "x-claude-code-session-id": session, "x-claude-code-agent-id": "agent-7" });
    expect(r.status, await r.clone().text()).toBe(200);
    expect(r.headers.get("x-trajectory-id")).toBe(`${session}.agent-7`);
    expect((await getState("a", `${session}.agent-7`)).parent).toEqual({ id: session, turn: null, relation: "subagent" });

    const child = `ses_child_${crypto.randomUUID().slice(0, 8)}`;
    await completion(await chat({ messages: [uniqueSystem(), { role: "user", content: "Explore." }], tools: TOOLS, ...SMALL }, { headers: { "x-session-id": child, "x-parent-session-id": "ses_parent" } }));
    expect((await getState("a", child)).parent).toEqual({ id: "ses_parent", turn: null, relation: "subagent" });
  });

  it("a subagent's first turn is placed with its parent (route parent) and reuses its system prompt and tools; both link each other", async () => {
    const parent = `ses_parent_${crypto.randomUUID().slice(0, 8)}`;
    const system = uniqueSystem(40);
    const p1 = await chat({ messages: [system, { role: "user", content: "Plan the change." }], tools: TOOLS, ...SMALL }, { headers: { "x-session-id": parent } });
    expect(p1.status, await p1.clone().text()).toBe(200);
    await completion(p1);
    const child = `ses_child_${crypto.randomUUID().slice(0, 8)}`;
    // The subagent: its parent's system prompt and tools, its own task.
    const c1 = await chat({ messages: [system, { role: "user", content: "Find every caller of parse()." }], tools: TOOLS, ...SMALL }, { headers: { "x-session-id": child, "x-parent-session-id": parent } });
    expect(c1.status, await c1.clone().text()).toBe(200);
    expect(c1.headers.get("x-agent-edge-route")).toBe("parent");
    const usage = (await completion(c1)).usage;
    expect(usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
    const childState = await getState("a", child);
    expect(childState.turns[0]).toMatchObject({ route: "parent", backend: (await getState("a", parent)).turns[0]!.backend });
    expect(childState.turns[0]!.cached_tokens).toBe(usage.prompt_tokens_details.cached_tokens);
    expect(childState.parent).toEqual({ id: parent, turn: null, relation: "subagent" });
    // The parent lists it, with its first turn's reuse once the child has reported it (after its answer).
    await expect
      .poll(async () => (await getState("a", parent)).children, { timeout: 10_000, interval: 100 })
      .toEqual([{ id: child, created_at: expect.any(String), first_turn: { prompt_tokens: usage.prompt_tokens, cached_tokens: usage.prompt_tokens_details.cached_tokens, backend: childState.turns[0]!.backend, route: "parent" } }]);
    const parentPage = await (await call(`${trajectoryPath("a", parent)}/inspect`)).text();
    expect(parentPage).toContain(`<a href="${trajectoryPath("a", child)}/inspect">${child}</a>`);
    expect(parentPage).toContain(`first turn ${usage.prompt_tokens_details.cached_tokens.toLocaleString("en-US")} of ${usage.prompt_tokens.toLocaleString("en-US")} prompt tokens cached`);
    const childPage = await (await call(`${trajectoryPath("a", child)}/inspect`)).text();
    expect(childPage).toMatch(new RegExp(`<span id="parent">subagent of <a href="${trajectoryPath("a", parent)}/inspect">${parent}</a>`));
  });

  it("Claude Code's billing block is repaired away: a second session reuses the first one's prompt, and the repair is counted", async () => {
    const system = (version: string) => [
      { type: "text", text: `x-anthropic-billing-header: cc_version=2.1.332.${version}; cc_entrypoint=sdk-cli;` },
      { type: "text", text: uniqueSystemText, cache_control: { type: "ephemeral" } },
    ];
    const uniqueSystemText = uniqueSystem(120).content!;
    const body = (version: string) => ({ model: "claude-opus-5-5", max_tokens: 2, temperature: 0, system: system(version), tools: ANTHROPIC_TOOLS, messages: [{ role: "user", content: "List the files." }] });
    const first = crypto.randomUUID();
    const r1 = await messages(body("4a6"), { "x-claude-code-session-id": first });
    expect(r1.status, await r1.clone().text()).toBe(200);
    const second = crypto.randomUUID();
    const r2 = await messages(body("76f"), { "x-claude-code-session-id": second });
    const usage = ((await r2.json()) as { usage: { input_tokens: number; cache_read_input_tokens: number } }).usage;
    const prompt = usage.input_tokens + usage.cache_read_input_tokens;
    expect(usage.cache_read_input_tokens / prompt).toBeGreaterThanOrEqual(0.9);
    const turn = (await getState("a", second)).turns[0]!;
    expect(turn.repaired).toMatchObject({ quirks: ["billing-header"] });
    const metrics = await (await call("/v1/tenants/tenant-a/metrics")).text();
    expect(metrics).toMatch(/agent_edge_quirk_repairs_total\{tenant="tenant-a",quirk="billing-header"\} [1-9]/);
  });

  it("DERIVED_SESSIONS: an agent that names no session (Qwen Code) gets a trajectory named by its start, delta turns, and a stateless turn while it is busy", async () => {
    const base: ChatMessage[] = [uniqueSystem(), { role: "user", content: "Read the README." }];
    const r1 = await chat({ messages: base, tools: TOOLS, tool_choice: "required", max_tokens: 48, temperature: 0 }, { tenant: "derived" });
    expect(r1.status, await r1.clone().text()).toBe(200);
    const id = r1.headers.get("x-trajectory-id")!;
    expect(id).toMatch(/^conv_[0-9a-f]{32}$/);
    const c1 = await completion(r1);
    const reply = replyOf(c1);
    const second: ChatMessage[] = [...base, reply, { role: "tool", tool_call_id: reply.tool_calls![0]!.id, content: "# Agent Edge" }];
    const r2 = await chat({ messages: second, tools: TOOLS, ...SMALL }, { tenant: "derived" });
    expect(r2.headers.get("x-trajectory-id")).toBe(id);
    await completion(r2);
    const state = await getState("derived", id);
    expect(state.turns.map((t) => t.mode)).toEqual(["full", "delta"]);
    expect(state.turns[1]!.cached_tokens / state.turns[1]!.prompt_tokens).toBeGreaterThan(0.9);
    // While a turn runs there, a request with the same start runs statelessly beside it.
    const running = chat({ messages: base, tools: TOOLS, max_tokens: 48, temperature: 0, stream: true }, { tenant: "derived" });
    const beside = await chat({ messages: base, tools: TOOLS, ...SMALL }, { tenant: "derived" });
    expect(beside.status).toBe(200);
    await beside.text();
    await (await running).text();
    // Without tools, or for a tenant without the setting: stateless.
    expect((await chat({ messages: base, ...SMALL }, { tenant: "derived" })).headers.get("x-trajectory-id")).toBeNull();
    expect((await chat({ messages: base, tools: TOOLS, ...SMALL }, { tenant: "b" })).headers.get("x-trajectory-id")).toBeNull();
  });

  it("Codex's WebSocket upgrade (its headers) is accepted (101, a Responses socket: responses-socket.test.ts); without a key 401", async () => {
    const upgrade = { upgrade: "websocket", connection: "Upgrade", "openai-beta": "responses_websockets=2026-02-06", "session-id": uid("codex-ws") };
    const res = await call("/v1/responses", { method: "GET", headers: upgrade });
    expect(res.status).toBe(101);
    res.webSocket!.accept();
    res.webSocket!.close();
    expect((await call("/v1/responses", { method: "GET", headers: upgrade, tenant: null })).status).toBe(401);
  });
});
