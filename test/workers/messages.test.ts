import { listDurableObjectIds } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { call, getState, stored, uid, type CallOptions } from "./helpers";
import { TENANTS } from "./tenants";

/**
 * Anthropic's Messages API on the real Worker, Durable Objects and backend (the tiny random
 * model): the request converted to the chat transcript, run by the same turn machinery as chat
 * completions, answered in Anthropic's shapes (docs/messages-api.md).
 */

const MODEL = "tiny-llama-random";
const TOOLS = [
  { name: "read_file", description: "Reads a file of the repository", input_schema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } },
  { name: "run_tests", description: "Runs the test suite", input_schema: { type: "object", properties: { filter: { type: "string" } } } },
];

interface Usage {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens: number;
  cache_creation_input_tokens: number;
  cache_creation: { ephemeral_5m_input_tokens: number; ephemeral_1h_input_tokens: number };
}
type Block = { type: "text"; text: string } | { type: "tool_use"; id: string; name: string; input: Record<string, unknown> };
interface Message {
  id: string;
  type: string;
  role: string;
  model: string;
  content: Block[];
  stop_reason: string;
  stop_sequence: string | null;
  usage: Usage;
}
interface AnthropicError {
  type: "error";
  error: { type: string; message: string; code: string };
}

/** A system prompt no other test uses. */
function system(): string {
  return `[${crypto.randomUUID()}] You are a careful coding agent. ${"Read the files before editing them. ".repeat(20)}`;
}

/** POST /v1/messages; tenant a's key as `x-api-key` unless told otherwise. */
function messages(body: Record<string, unknown>, options: Omit<CallOptions, "body" | "method"> = {}): Promise<Response> {
  return call("/v1/messages", { tenant: null, ...options, headers: { "x-api-key": TENANTS.a.key, "anthropic-version": "2023-06-01", ...options.headers }, method: "POST", body });
}

async function message(res: Response): Promise<Message> {
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return JSON.parse(text) as Message;
}

async function anthropicError(res: Response, status: number, type: string, code: string): Promise<AnthropicError> {
  const text = await res.text();
  expect(res.status, text).toBe(status);
  expect(res.headers.get("content-type")).toMatch(/application\/json/);
  const body = JSON.parse(text) as AnthropicError;
  expect(body.type).toBe("error");
  expect(body.error.type).toBe(type);
  expect(body.error.code).toBe(code);
  expect(body.error.message.length).toBeGreaterThan(0);
  return body;
}

/** An SSE body as [event name, data] pairs; checks the `event:` / `data:` framing. */
function events(text: string): [string, Record<string, any>][] {
  expect(text.endsWith("\n\n")).toBe(true);
  return text
    .slice(0, -2)
    .split("\n\n")
    .map((e) => {
      const m = /^event: ([a-z_]+)\ndata: (.*)$/s.exec(e);
      expect(m, e).not.toBeNull();
      return [m![1]!, JSON.parse(m![2]!) as Record<string, any>];
    });
}

/**
 * Checks the documented order (message_start, ping, then per block start / deltas / stop with
 * indexes 0, 1, ..., then message_delta, message_stop) and rebuilds the message from the events.
 */
function replay(stream: [string, Record<string, any>][]): Message {
  const names = stream.map(([n]) => n);
  expect(names.slice(0, 2)).toEqual(["message_start", "ping"]);
  expect(names.slice(-2)).toEqual(["message_delta", "message_stop"]);
  const msg = structuredClone(stream[0]![1].message) as Message;
  expect(msg.content).toEqual([]);
  let open = -1;
  const json: string[] = [];
  for (const [name, data] of stream.slice(2, -2)) {
    if (name === "content_block_start") {
      expect(open).toBe(-1);
      expect(data.index).toBe(msg.content.length);
      open = data.index as number;
      msg.content.push(structuredClone(data.content_block));
      json[open] = "";
    } else if (name === "content_block_delta") {
      expect(data.index).toBe(open);
      const block = msg.content[open]!;
      if (data.delta.type === "text_delta") (block as { text: string }).text += data.delta.text;
      else json[open] += data.delta.partial_json as string;
    } else {
      expect(name).toBe("content_block_stop");
      expect(data.index).toBe(open);
      const block = msg.content[open]!;
      if (block.type === "tool_use") block.input = JSON.parse(json[open]!) as Record<string, unknown>;
      open = -1;
    }
  }
  expect(open).toBe(-1); // every block was stopped
  const delta = stream.at(-2)![1];
  return { ...msg, stop_reason: delta.delta.stop_reason, stop_sequence: delta.delta.stop_sequence, usage: { ...msg.usage, ...delta.usage } };
}

describe("POST /v1/messages", () => {
  it("a plain turn: Anthropic's message with usage; stateless without a session header", async () => {
    const before = (await listDurableObjectIds(env.TRAJECTORY)).map((x) => x.toString());
    const res = await messages({ model: MODEL, max_tokens: 3, temperature: 0, system: system(), messages: [{ role: "user", content: "List the files." }] });
    expect(res.headers.get("x-trajectory-id")).toBeNull();
    const m = await message(res);
    expect(m.id).toMatch(/^msg_/);
    expect([m.type, m.role, m.model]).toEqual(["message", "assistant", MODEL]);
    expect(m.content.every((b) => b.type === "text")).toBe(true);
    expect(["end_turn", "max_tokens"]).toContain(m.stop_reason);
    expect(m.stop_sequence).toBeNull();
    expect(m.usage.input_tokens).toBeGreaterThan(20);
    expect(m.usage.output_tokens).toBeGreaterThanOrEqual(1);
    expect(m.usage.output_tokens).toBeLessThanOrEqual(3);
    expect(m.usage.cache_read_input_tokens).toBe(0);
    expect(m.usage.cache_creation_input_tokens).toBe(0);
    expect(m.usage.cache_creation).toEqual({ ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 });
    expect((await listDurableObjectIds(env.TRAJECTORY)).map((x) => x.toString()).sort()).toEqual(before.sort());
  });

  it("x-api-key and bearer keys both authenticate; a bad or missing key is an Anthropic-shaped 401", async () => {
    const body = { model: MODEL, max_tokens: 1, messages: [{ role: "user", content: "hi" }] };
    await message(await messages(body));
    await message(await call("/v1/messages", { tenant: "b", body }));
    await anthropicError(await messages(body, { headers: { "x-api-key": "sk-wrong" } }), 401, "authentication_error", "unauthorized");
    await anthropicError(await call("/v1/messages", { tenant: null, body }), 401, "authentication_error", "unauthorized");
    await anthropicError(await call("/v1/messages/count_tokens", { tenant: null, body }), 401, "authentication_error", "unauthorized");
    // x-api-key works on the other routes too, whose errors keep OpenAI's shape.
    const chat = await call("/v1/chat/completions", { tenant: null, headers: { "x-api-key": TENANTS.a.key }, body: { messages: [{ role: "user", content: "hi" }], max_tokens: 1 } });
    expect(chat.status, await chat.clone().text()).toBe(200);
    const refused = await call("/v1/chat/completions", { tenant: null, headers: { "x-api-key": "sk-wrong" }, body: { messages: [{ role: "user", content: "hi" }] } });
    expect(refused.status).toBe(401);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("unauthorized");
  });

  it("tool_choice any forces a tool_use; its tool_result continues the trajectory as a delta turn", async () => {
    const id = uid("msg-tools");
    const headers = { "x-trajectory-id": id };
    const transcript: Record<string, unknown>[] = [{ role: "user", content: "Read the README, then run the tests." }];
    const base = { model: MODEL, max_tokens: 64, temperature: 0, system: system(), tools: TOOLS, tool_choice: { type: "any" } };
    const r1 = await messages({ ...base, messages: transcript }, { headers });
    expect(r1.headers.get("x-trajectory-id")).toBe(id);
    expect(r1.headers.get("x-agent-edge-mode")).toBe("full");
    const m1 = await message(r1);
    expect(m1.stop_reason).toBe("tool_use");
    const uses = m1.content.filter((b) => b.type === "tool_use");
    expect(uses.length).toBeGreaterThan(0);
    for (const u of uses) {
      expect(TOOLS.map((t) => t.name)).toContain(u.name);
      expect(typeof u.input).toBe("object");
    }
    // Stored as the chat transcript: system, user, the reply with canonical call ids.
    const s1 = await stored("a", id);
    expect(s1.messages.map((m) => m.role)).toEqual(["system", "user", "assistant"]);
    expect(s1.messages[2]!.tool_calls!.map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)])).toEqual(uses.map((u) => [u.id, u.name, u.input]));

    transcript.push({ role: "assistant", content: m1.content }, { role: "user", content: uses.map((u) => ({ type: "tool_result", tool_use_id: u.id, content: `output of ${u.name}` })) });
    const r2 = await messages({ ...base, tool_choice: { type: "auto" }, max_tokens: 4, messages: transcript }, { headers });
    expect(r2.headers.get("x-agent-edge-mode")).toBe("delta");
    const m2 = await message(r2);
    expect(m2.usage.cache_read_input_tokens).toBeGreaterThan(m1.usage.input_tokens - 16);
    expect(m2.usage.input_tokens).toBe((await getState("a", id)).turns[1]!.prompt_tokens - m2.usage.cache_read_input_tokens);
    const s2 = await stored("a", id);
    expect(s2.messages.slice(3, 3 + uses.length)).toEqual(uses.map((u) => ({ role: "tool", tool_call_id: u.id, content: `output of ${u.name}` })));
  });

  it("a tool_result naming no tool_use of the message before is a 400, nothing stored", async () => {
    const id = uid("msg-bad-result");
    const headers = { "x-trajectory-id": id };
    const base = { model: MODEL, max_tokens: 64, temperature: 0, system: system(), tools: TOOLS, tool_choice: { type: "any" } };
    const first = [{ role: "user", content: "Read the README." }];
    const m1 = await message(await messages({ ...base, messages: first }, { headers }));
    const before = await stored("a", id);
    const bad = await anthropicError(
      await messages({ ...base, messages: [...first, { role: "assistant", content: m1.content }, { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_unknown", content: "x" }] }] }, { headers }),
      400,
      "invalid_request_error",
      "invalid_request",
    );
    expect(bad.error.message).toMatch(/^messages\[2\]\.content\[0\]\.tool_use_id: "toolu_unknown" answers no tool_use block/);
    expect(await stored("a", id)).toEqual(before);
  });

  it("streaming: the documented event order, every block stopped, the same message as the JSON answer", async () => {
    for (const extra of [{}, { tools: TOOLS, tool_choice: { type: "any" } }]) {
      const body = { model: MODEL, max_tokens: 40, temperature: 0, system: system(), messages: [{ role: "user", content: "Read the README." }], ...extra };
      const json = await message(await messages(body));
      const res = await messages({ ...body, stream: true });
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
      const streamedMsg = replay(events(await res.text()));
      // Stateless turns name their calls with fresh random ids; all else is the same.
      const withoutIds = (content: Block[]) => content.map((b) => (b.type === "tool_use" ? { ...b, id: "" } : b));
      expect(withoutIds(streamedMsg.content)).toEqual(withoutIds(json.content));
      expect(streamedMsg.content.every((b) => b.type !== "tool_use" || b.id.length > 0)).toBe(true);
      expect(streamedMsg.stop_reason).toBe(json.stop_reason);
      expect(streamedMsg.id).toMatch(/^msg_/);
      // Same prompt: the stream's turn reads the JSON turn's blocks from the cache.
      expect(streamedMsg.usage.input_tokens + streamedMsg.usage.cache_read_input_tokens).toBe(json.usage.input_tokens + json.usage.cache_read_input_tokens);
      expect(streamedMsg.usage.output_tokens).toBe(json.usage.output_tokens);
    }
  });

  it("count_tokens equals the prompt tokens of a turn with the same messages and tools", async () => {
    const body = { model: MODEL, system: system(), tools: TOOLS, messages: [{ role: "user", content: "Read the README." }, { role: "assistant", content: [{ type: "text", text: "Sure." }, { type: "tool_use", id: "t1", name: "read_file", input: { path: "README.md" } }] }, { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: "# Agent Edge" }, { type: "text", text: "Go on." }] }] };
    const res = await call("/v1/messages/count_tokens", { tenant: null, headers: { "x-api-key": TENANTS.a.key }, body });
    const text = await res.text();
    expect(res.status, text).toBe(200);
    const counted = JSON.parse(text) as { input_tokens: number };
    expect(Object.keys(counted)).toEqual(["input_tokens"]);
    const m = await message(await messages({ ...body, max_tokens: 1 }));
    expect(counted.input_tokens).toBe(m.usage.input_tokens + m.usage.cache_read_input_tokens + m.usage.cache_creation_input_tokens);
    // Without tools the prompt is shorter.
    const { tools: _tools, ...plain } = body;
    const noTools = (await (await call("/v1/messages/count_tokens", { body: { ...plain, messages: body.messages.slice(0, 1) } })).json()) as { input_tokens: number };
    expect(noTools.input_tokens).toBeLessThan(counted.input_tokens);
    await anthropicError(await call("/v1/messages/count_tokens", { body: { ...body, model: "no-such-model" } }), 404, "not_found_error", "unknown_model");
  });

  it("a session: x-trajectory-id (or x-session-affinity) turns, the second a delta with cached tokens; Idempotency-Key replays", async () => {
    const id = uid("msg-session");
    const sys = system();
    const turn1 = [{ role: "user", content: "List the files." }];
    const r1 = await messages({ model: MODEL, max_tokens: 3, temperature: 0, system: sys, messages: turn1 }, { headers: { "x-trajectory-id": id } });
    expect(r1.headers.get("x-agent-edge-mode")).toBe("full");
    const m1 = await message(r1);
    const turn2 = [...turn1, { role: "assistant", content: m1.content }, { role: "user", content: "Now the tests." }];
    const r2 = await messages({ model: MODEL, max_tokens: 3, temperature: 0, system: sys, messages: turn2 }, { headers: { "x-session-affinity": id, "idempotency-key": "k-1" } });
    expect(r2.headers.get("x-trajectory-id")).toBe(id);
    expect(r2.headers.get("x-agent-edge-turn")).toBe("2");
    expect(r2.headers.get("x-agent-edge-mode")).toBe("delta");
    const m2 = await message(r2);
    expect(m2.usage.cache_read_input_tokens).toBeGreaterThan(m1.usage.input_tokens - 16);
    const replayed = await messages({ model: MODEL, max_tokens: 3, temperature: 0, system: sys, messages: turn2 }, { headers: { "x-trajectory-id": id, "idempotency-key": "k-1" } });
    expect(replayed.headers.get("x-agent-edge-replayed")).toBe("true");
    expect((await message(replayed)).content).toEqual(m2.content);
    const state = await getState("a", id);
    expect(state.turns.map((t) => t.mode)).toEqual(["full", "delta"]);
    expect(state.turns[1]!.cached_tokens).toBe(m2.usage.cache_read_input_tokens);
  });

  it("stop_sequences: a stop sequence that ends the reply is stop_reason stop_sequence, named", async () => {
    const body = { model: MODEL, max_tokens: 12, temperature: 0, system: system(), messages: [{ role: "user", content: "Say something." }] };
    const free = await message(await messages(body));
    const text = free.content.map((b) => (b.type === "text" ? b.text : "")).join("");
    const stop = text.slice(3, 6);
    expect(stop.length).toBe(3);
    const stopped = await message(await messages({ ...body, stop_sequences: [stop] }));
    expect([stopped.stop_reason, stopped.stop_sequence]).toEqual(["stop_sequence", stop]);
    expect(stopped.content.map((b) => (b.type === "text" ? b.text : "")).join("")).toBe(text.slice(0, text.indexOf(stop)));
  });

  it("errors are Anthropic-shaped on every Messages route", async () => {
    const user = { role: "user", content: "hi" };
    const badJson = await call("/v1/messages", { body: "{not json", headers: { "content-type": "application/json" } });
    await anthropicError(badJson, 400, "invalid_request_error", "invalid_request");
    const noMax = await anthropicError(await messages({ model: MODEL, messages: [user] }), 400, "invalid_request_error", "invalid_request");
    expect(noMax.error.message).toMatch(/^max_tokens: /);
    const image = await anthropicError(await messages({ model: MODEL, max_tokens: 1, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "" } }] }] }), 400, "invalid_request_error", "invalid_request");
    expect(image.error.message).toMatch(/^messages\[0\]\.content\[0\]\.type: content block type "image" is not supported/);
    // An Anthropic-defined client tool is refused for every tenant (a server tool is dropped, or refused for a strict tenant once the route passes `strict`).
    const server = await anthropicError(await messages({ model: MODEL, max_tokens: 1, tools: [{ type: "bash_20250124", name: "bash" }], messages: [user] }), 400, "invalid_request_error", "invalid_request");
    expect(server.error.message).toMatch(/^tools\[0\]\.type: tool type "bash_20250124" is not supported/);
    await anthropicError(await messages({ model: "no-such-model", max_tokens: 1, messages: [user] }), 404, "not_found_error", "unknown_model");
    // A tenant that is not strict (STRICT_TENANTS names only tenant a): any name serves the one model, a server tool is dropped.
    expect((await message(await call("/v1/messages", { tenant: "b", body: { model: "claude-sonnet-4-5", max_tokens: 1, tools: [{ type: "web_search_20250305", name: "web_search" }], messages: [user] } }))).type).toBe("message");
    await anthropicError(await messages({ model: MODEL, max_tokens: 1, messages: [user] }, { headers: { "x-trajectory-id": "bad id!" } }), 400, "invalid_request_error", "invalid_request");
    await anthropicError(await messages({ model: MODEL, max_tokens: 8, tools: TOOLS, tool_choice: { type: "tool", name: "nope" }, messages: [user] }), 400, "invalid_request_error", "unknown_tool");
    await anthropicError(await call("/v1/messages/batches", { body: {} }), 404, "not_found_error", "not_found");
    await anthropicError(await call("/v1/messages", { method: "GET" }), 404, "not_found_error", "not_found");
  });

  it("cache_control: the marked prefix is written once (5m / 1h split), then read; the three input figures add up to the prompt", async () => {
    const sys = system();
    const body = {
      model: MODEL,
      max_tokens: 2,
      temperature: 0,
      system: [{ type: "text", text: sys, cache_control: { type: "ephemeral" } }],
      messages: [{ role: "user", content: [{ type: "text", text: `Task ${"step ".repeat(60)}`, cache_control: { type: "ephemeral", ttl: "1h" } }] }],
    };
    const first = await message(await messages(body));
    const u = first.usage;
    expect(u.cache_read_input_tokens).toBe(0);
    expect(u.cache_creation.ephemeral_5m_input_tokens).toBeGreaterThan(100); // the system prompt's full blocks
    expect(u.cache_creation.ephemeral_1h_input_tokens).toBeGreaterThan(0); // the rest of the user message's
    expect(u.cache_creation_input_tokens).toBe(u.cache_creation.ephemeral_5m_input_tokens + u.cache_creation.ephemeral_1h_input_tokens);
    expect(u.input_tokens).toBeGreaterThan(0);
    expect(u.input_tokens).toBeLessThan(32); // what follows the last breakpoint, and its partial block
    const prompt = u.input_tokens + u.cache_creation_input_tokens;

    const again = (await message(await messages(body))).usage;
    expect(again.cache_creation_input_tokens).toBe(0);
    expect(again.cache_read_input_tokens).toBeGreaterThanOrEqual(u.cache_creation_input_tokens);
    expect(again.input_tokens + again.cache_read_input_tokens).toBe(prompt);

    // Without cache_control nothing is reported written, though the prefix cache still reads.
    const { system: _s, ...plain } = body;
    const unmarked = (await message(await messages({ ...plain, system: sys, messages: [{ role: "user", content: "Another task." }] }))).usage;
    expect(unmarked.cache_creation_input_tokens).toBe(0);
    expect(unmarked.cache_read_input_tokens).toBeGreaterThan(0);
  });

  it("cache diagnostics against earlier turns: grown is null, an edited older message is messages_changed, a rewritten turn unavailable; a replay answers the same", async () => {
    const id = uid("msg-diag");
    const sys = system();
    const headers = { "x-trajectory-id": id };
    const ask = async (msgs: unknown[], previous: string | null, extra: Record<string, string> = {}) => {
      const m = (await message(await messages({ model: MODEL, max_tokens: 3, temperature: 0, system: sys, messages: msgs, diagnostics: { previous_message_id: previous } }, { headers: { ...headers, ...extra } }))) as Message & { diagnostics: unknown };
      return m;
    };
    const t1 = [{ role: "user", content: "List the files." }];
    const a1 = await ask(t1, null);
    expect(a1.diagnostics).toBeNull();
    const t2 = [...t1, { role: "assistant", content: a1.content }, { role: "user", content: "Now the tests." }];
    const a2 = await ask(t2, a1.id);
    const t3 = [...t2, { role: "assistant", content: a2.content }, { role: "user", content: "And the docs." }];
    // Turn 1 is not the latest: compared against its stored transcript, which turn 3 only extends.
    const a3 = await ask(t3, a1.id);
    expect(a3.diagnostics).toBeNull();
    // The first user message edited: turn 2's transcript departs at message 1 (after the system prompt).
    const t4 = [{ role: "user", content: "List all the files." }, ...t3.slice(1)];
    const a4 = await ask(t4, a2.id);
    const reason = (a4.diagnostics as { cache_miss_reason: { type: string; cache_missed_input_tokens: number } }).cache_miss_reason;
    expect(reason.type, JSON.stringify(a4.diagnostics)).toBe("messages_changed");
    expect(reason.cache_missed_input_tokens).toBeGreaterThan(0);
    expect(reason.cache_missed_input_tokens).toBeLessThanOrEqual(a4.usage.input_tokens + a4.usage.cache_creation_input_tokens);
    // Turn 4 rewrote the transcript turn 3 was built on: its request is gone.
    const t5 = [...t4, { role: "assistant", content: a4.content }, { role: "user", content: "Thanks." }];
    const a5 = await ask(t5, a3.id, { "idempotency-key": "diag-1" });
    expect(a5.diagnostics).toEqual({ cache_miss_reason: { type: "unavailable" } });
    expect((await ask(t5, a3.id, { "idempotency-key": "diag-1" })).diagnostics).toEqual(a5.diagnostics);
    expect((await getState("a", id)).turns).toHaveLength(5);
  });
});
