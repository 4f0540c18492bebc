import Anthropic, { APIError } from "@anthropic-ai/sdk";
import type { BetaContentBlockParam, BetaMessageParam, BetaRawMessageStartEvent } from "@anthropic-ai/sdk/resources/beta/messages";
import type { ContentBlock, Message, MessageCreateParamsNonStreaming, MessageParam, Tool, ToolResultBlockParam, ToolUseBlock } from "@anthropic-ai/sdk/resources/messages";
import { Ajv } from "ajv";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AIRLINE_TOOLS } from "./support/airline-tools";
import { sharedTestStack, type SharedStack } from "./support/stack-fixture";

/**
 * The Messages API end to end: a real backend process and `wrangler dev`, driven by Anthropic's
 * official SDK (`@anthropic-ai/sdk`). The tiny random model never calls a tool by itself;
 * `tool_choice: {type: "any"}` (constrained decoding) makes every turn a valid call, which the
 * test checks with ajv against the very schemas sent, answers, and sends back.
 */
const MODEL = "tiny-llama-random";
const ajv = new Ajv({ strict: false });

/** Three of the airline tools as Anthropic tools, the last one marked for caching (tools are one prefix). */
const TOOLS: Tool[] = AIRLINE_TOOLS.filter((t) => ["search_flights", "book_seats", "set_budget"].includes(t.function.name)).map((t, i, all) => ({
  name: t.function.name,
  description: t.function.description!,
  input_schema: t.function.parameters as Tool["input_schema"],
  ...(i === all.length - 1 ? { cache_control: { type: "ephemeral" as const } } : {}),
}));
const schemaOf = (name: string) => TOOLS.find((t) => t.name === name)!.input_schema;

const system = () => [{ type: "text" as const, text: `[${crypto.randomUUID()}] You are a travel agent. Use the tools to search, budget and book flights. Always call a tool.`, cache_control: { type: "ephemeral" as const } }];

function toolUses(content: ContentBlock[]): ToolUseBlock[] {
  return content.filter((b): b is ToolUseBlock => b.type === "tool_use");
}

/** The keys of a value, recursively (arrays by their items): its shape, values aside. */
function shape(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(shape);
  if (typeof value !== "object" || value === null) return typeof value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, v]) => [k, k === "input" ? "object" : shape(v)]),
  );
}

describe("Anthropic Messages API end to end (wrangler dev + backend + @anthropic-ai/sdk)", () => {
  let fixture: SharedStack | undefined;
  let stack: SharedStack;
  let client: Anthropic;

  beforeAll(async () => {
    fixture = await sharedTestStack();
    stack = fixture;
    client = new Anthropic({ apiKey: "sk-local-dev", baseURL: stack.edgeUrl, maxRetries: 0 });
  });

  afterAll(() => fixture?.stop());

  it("a 10-turn tool_use / tool_result loop with create and stream: valid calls, growing cache reads", async () => {
    const trajectory = `anthropic-loop-${crypto.randomUUID().slice(0, 8)}`;
    const headers = { "x-trajectory-id": trajectory };
    const sys = system();
    const messages: MessageParam[] = [{ role: "user", content: "Find me a flight from Paris to Lisbon next Friday for two adults, then book it within 800 EUR." }];
    const reads: number[] = [];
    const creations: number[] = [];
    for (let turn = 0; turn < 10; turn++) {
      const params = { model: MODEL, max_tokens: 120, system: sys, tools: TOOLS, tool_choice: { type: "any" as const }, messages };
      const reply: Message = turn % 2 === 0 ? await client.messages.create(params, { headers }) : await client.messages.stream(params, { headers }).finalMessage();
      const context = `turn ${turn}: ${JSON.stringify(reply.content)}`;
      expect(reply.stop_reason, context).toBe("tool_use");
      const uses = toolUses(reply.content);
      expect(uses.length, context).toBeGreaterThan(0);
      for (const u of uses) expect(ajv.validate(schemaOf(u.name), u.input), `${context}: ${ajv.errorsText()}`).toBe(true);
      expect(reply.usage.output_tokens).toBeLessThanOrEqual(120);
      expect(reply.usage.input_tokens).toBeGreaterThan(0);
      reads.push(reply.usage.cache_read_input_tokens ?? -1);
      // The SDK's stream snapshot keeps message_start's cache_creation (it merges only reads from message_delta).
      if (turn % 2 === 0) creations.push(reply.usage.cache_creation_input_tokens ?? -1);
      const results: ToolResultBlockParam[] = uses.map((u) => ({ type: "tool_result", tool_use_id: u.id, content: `${u.name}: done (${turn})` }));
      messages.push({ role: "assistant", content: reply.content }, { role: "user", content: results });
    }
    // The first turn computes everything, and writes the marked prefix (tools and system) to the
    // cache as a lease; later turns read it and write nothing under those marks again.
    expect(creations[0], `cache writes ${creations.join(", ")}`).toBeGreaterThan(0);
    expect(creations.slice(1)).toEqual(creations.slice(1).map(() => 0));
    expect(reads[0]).toBe(0);
    for (let i = 1; i < reads.length; i++) expect(reads[i], `cache reads ${reads.join(", ")}`).toBeGreaterThan(reads[i - 1]!);

    const state = (await (await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories/${trajectory}`, { headers: { authorization: "Bearer sk-local-dev" } })).json()) as { turns: { mode: string }[] };
    expect(state.turns.map((t) => t.mode)).toEqual(["full", ...Array<string>(9).fill("delta")]);
  }, 300_000);

  it("stream's finalMessage() equals the non-streamed reply, usage included", async () => {
    const params = { model: MODEL, max_tokens: 100, temperature: 0, system: system(), tools: TOOLS, tool_choice: { type: "any" }, messages: [{ role: "user", content: "Search flights Paris to Lisbon." }] } as MessageCreateParamsNonStreaming;
    const created = await client.messages.create(params);
    const stream = client.messages.stream(params);
    const seen: string[] = [];
    stream.on("streamEvent", (event) => seen.push(event.type));
    // The stream helper adds `parsed_output` (its structured-output parse, null here) itself.
    const { parsed_output: parsed, ...final } = await stream.finalMessage();
    expect(parsed).toBeNull();
    expect(shape(final)).toEqual(shape(created));
    // Greedy: the same calls (stateless turns draw fresh call ids), the same stop.
    const withoutIds = (m: Pick<Message, "content">) => m.content.map((b) => (b.type === "tool_use" ? { ...b, id: "" } : b));
    expect(withoutIds(final)).toEqual(withoutIds(created));
    expect(final.stop_reason).toBe(created.stop_reason);
    // The stream's true input figures arrive in message_delta; the SDK's snapshot takes them.
    // The three input figures add up to the prompt (the first request wrote the marked prefix, the second read it).
    const promptOf = (u: Message["usage"]) => u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);
    expect(promptOf(final.usage)).toBe(promptOf(created.usage));
    expect(created.usage.cache_creation_input_tokens).toBeGreaterThan(0);
    expect(final.usage.cache_read_input_tokens).toBeGreaterThan(0); // the same prompt, cached by the first request
    expect(final.usage.output_tokens).toBe(created.usage.output_tokens);
    expect(seen[0]).toBe("message_start");
    expect(seen.slice(-2)).toEqual(["message_delta", "message_stop"]);

    // Plain text, streamed as tokens arrive.
    const textParams = { model: MODEL, max_tokens: 16, temperature: 0, messages: [{ role: "user", content: "Hello" }] } as MessageCreateParamsNonStreaming;
    const texts: string[] = [];
    const textStream = client.messages.stream(textParams).on("text", (delta) => texts.push(delta));
    const { parsed_output: _parsed, ...finalText } = await textStream.finalMessage();
    expect(texts.length, JSON.stringify(texts)).toBeGreaterThan(1);
    expect(finalText.content).toEqual([{ type: "text", text: texts.join("") }]);
    expect(shape(finalText)).toEqual(shape(await client.messages.create(textParams)));
  }, 120_000);

  it("messages.stream streams a forced tool_use's input piece by piece; finalMessage() equals the non-streamed call", async () => {
    // Two fresh trajectories, one request each: the same greedy call, canonically `call_0` in both.
    const params = { model: MODEL, max_tokens: 100, temperature: 0, system: system(), tools: TOOLS, tool_choice: { type: "any" }, messages: [{ role: "user", content: "Book two seats to Lisbon." }] } as MessageCreateParamsNonStreaming;
    const created = await client.messages.create(params, { headers: { "x-trajectory-id": `e2e-msg-a-${crypto.randomUUID()}` } });
    const stream = client.messages.stream(params, { headers: { "x-trajectory-id": `e2e-msg-b-${crypto.randomUUID()}` } });
    const seen: string[] = [];
    stream.on("streamEvent", (e) => seen.push(e.type === "content_block_delta" ? e.delta.type : e.type === "content_block_start" ? `start:${e.content_block.type}` : e.type));
    const final = await stream.finalMessage();
    expect(toolUses(created.content).length).toBeGreaterThan(0);
    expect(toolUses(final.content)).toEqual(toolUses(created.content));
    const start = seen.indexOf("start:tool_use");
    const stop = seen.indexOf("content_block_stop", start);
    expect(seen.slice(start + 1, stop).filter((t) => t === "input_json_delta").length).toBeGreaterThan(1);
  }, 120_000);

  it("countTokens equals the prompt tokens of a turn with the same messages and tools", async () => {
    const sys = system();
    const messages: MessageParam[] = [
      { role: "user", content: "Search flights Paris to Lisbon." },
      { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "set_budget", input: { amount: 800, currency: "EUR" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "budget set" }, { type: "text", text: "Now search." }] },
    ];
    const counted = await client.messages.countTokens({ model: MODEL, system: sys, tools: TOOLS, messages });
    const turn = await client.messages.create({ model: MODEL, max_tokens: 1, system: sys, tools: TOOLS, messages });
    expect(counted.input_tokens).toBe(turn.usage.input_tokens + (turn.usage.cache_read_input_tokens ?? 0) + (turn.usage.cache_creation_input_tokens ?? 0));
    const fewer = await client.messages.countTokens({ model: MODEL, messages: messages.slice(0, 1) });
    expect(fewer.input_tokens).toBeLessThan(counted.input_tokens);
  }, 60_000);

  it("errors reach the SDK as its typed errors with Anthropic's types", async () => {
    const bad = new Anthropic({ apiKey: "sk-wrong", baseURL: stack.edgeUrl, maxRetries: 0 });
    const err = await bad.messages.create({ model: MODEL, max_tokens: 1, messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.AuthenticationError);
    expect((err as APIError).type).toBe("authentication_error");
    const image = await client.messages
      .create({ model: MODEL, max_tokens: 1, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }] }] })
      .catch((e: unknown) => e);
    expect(image).toBeInstanceOf(Anthropic.BadRequestError);
    expect((image as APIError).type).toBe("invalid_request_error");
    expect((image as APIError).message).toMatch(/content block type "image" is not supported/);
    // One model served and a tenant that is not strict: any name serves it (workers tests cover a strict tenant's 404).
    const anyName = await client.messages.create({ model: "claude-no-such-model", max_tokens: 1, messages: [{ role: "user", content: "hi" }] });
    expect(anyName.model).toBe("claude-no-such-model");
  }, 60_000);

  it("cache diagnostics through the beta API: null when unchanged, system_changed with missed tokens, not found, and in a stream's message_start", async () => {
    const headers = { "x-trajectory-id": `anthropic-diag-${crypto.randomUUID().slice(0, 8)}` };
    const betas = ["cache-diagnosis-2026-04-07" as const];
    const base = { model: MODEL, max_tokens: 40, tools: TOOLS, tool_choice: { type: "any" as const } };
    const messages: BetaMessageParam[] = [{ role: "user", content: "Find me a flight from Paris to Lisbon." }];
    const turn = async (sys: ReturnType<typeof system>, previous: string | null) => {
      const reply = await client.beta.messages.create({ ...base, system: sys, messages, betas, diagnostics: { previous_message_id: previous } }, { headers });
      const uses = reply.content.filter((b) => b.type === "tool_use");
      expect(uses.length, JSON.stringify(reply.content)).toBeGreaterThan(0);
      messages.push({ role: "assistant", content: reply.content as BetaContentBlockParam[] }, { role: "user", content: uses.map((u) => ({ type: "tool_result" as const, tool_use_id: u.id, content: "done" })) });
      return reply;
    };
    const sys = system();
    const first = await turn(sys, null);
    expect(first.diagnostics).toBeNull();
    // The transcript only grew: nothing diverged.
    const second = await turn(sys, first.id);
    expect(second.diagnostics).toBeNull();
    // Another system prompt (its leading id differs): every token the previous turn left is missed.
    const third = await turn(system(), second.id);
    const reason = third.diagnostics?.cache_miss_reason;
    expect(reason?.type, JSON.stringify(third.diagnostics)).toBe("system_changed");
    expect(reason && "cache_missed_input_tokens" in reason ? reason.cache_missed_input_tokens : 0).toBeGreaterThan(0);
    expect(reason && "cache_missed_input_tokens" in reason ? reason.cache_missed_input_tokens : 0).toBeLessThanOrEqual(third.usage.input_tokens + (third.usage.cache_creation_input_tokens ?? 0));
    // A stream: message_start, sent before the backend answers, already carries the reason (its token count an estimate).
    const events = await client.beta.messages.create({ ...base, system: system(), messages, betas, diagnostics: { previous_message_id: third.id }, stream: true }, { headers });
    let start: BetaRawMessageStartEvent | undefined;
    for await (const event of events) if (event.type === "message_start") start = event;
    expect(start?.message.diagnostics?.cache_miss_reason?.type, JSON.stringify(start)).toBe("system_changed");
    // An id this trajectory never stored.
    const unknown = await client.beta.messages.create({ ...base, system: system(), messages: messages.slice(0, 1), betas, diagnostics: { previous_message_id: "msg_0123456789abcdef01234567" } }, { headers });
    expect(unknown.diagnostics).toEqual({ cache_miss_reason: { type: "previous_message_not_found" } });
    // A request that does not ask gets no new field.
    const plain = await client.messages.create({ ...base, system: sys, messages: [{ role: "user", content: "Find me a flight from Paris to Lisbon." }] }, { headers });
    expect("diagnostics" in plain).toBe(false);
  }, 120_000);
});
