import OpenAI from "openai";
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { route } from "../durable-objects/routing/routing-policy";
import { isPortFree, type Stack } from "../scripts/stack";
import { generate, greedy } from "./support/backend-client";
import { chatTurn, trajectoryRecord } from "./support/edge-turns";
import { sharedTestStack, startTestStack, type SharedStack, type TestStack } from "./support/stack-fixture";

/**
 * End to end: a real backend process and `wrangler dev` (workerd, real Durable Objects with
 * SQLite), driven by the official `openai` client, streaming and not.
 */
const MODEL = "tiny-llama-random";

describe("edge end to end (wrangler dev + backend + openai client)", () => {
  let fixture: SharedStack | undefined;
  let stack: SharedStack;
  let client: OpenAI;
  let inspectorPort: number;

  beforeAll(async () => {
    fixture = await sharedTestStack();
    stack = fixture;
    ({ inspectorPort } = fixture);
    client = new OpenAI({ apiKey: "sk-local-dev", baseURL: `${stack.edgeUrl}/v1`, maxRetries: 0 });
  });

  afterAll(() => fixture?.stop());

  const tools: ChatCompletionTool[] = [
    {
      type: "function",
      function: {
        name: "read_file",
        description: "Read a file of the repository",
        parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
      },
    },
    {
      type: "function",
      function: { name: "run_tests", description: "Run the test suite", parameters: { type: "object", properties: {} } },
    },
  ];

  it("keeps wrangler dev's devtools inspector by default (npm start): it listens on the inspector port", async () => {
    expect(await isPortFree(inspectorPort, "127.0.0.1")).toBe(false);
  });

  it("runs a 10-turn tool-calling trajectory whose cached tokens grow every turn", async () => {
    const trajectoryId = "e2e-agent-1";
    const messages: ChatCompletionMessageParam[] = [
      { role: "system", content: `You are a coding agent working in a repository. ${"Follow the rules. ".repeat(20)}` },
      { role: "user", content: "The tests fail. Find out why and fix it." },
    ];
    const cached: number[] = [];
    const prompts: number[] = [];
    for (let turn = 1; turn <= 10; turn++) {
      const stream = turn % 2 === 0;
      let content = "";
      let toolCalls: { id: string; type: "function"; function: { name: string; arguments: string } }[] = [];
      let usage: OpenAI.CompletionUsage | undefined;
      if (stream) {
        const s = await client.chat.completions.create(
          { model: MODEL, messages, tools, max_tokens: 6, temperature: 0, stream: true, stream_options: { include_usage: true } },
          { headers: { "x-trajectory-id": trajectoryId } },
        );
        let sawFinish = false;
        for await (const chunk of s) {
          content += chunk.choices[0]?.delta?.content ?? "";
          if (chunk.choices[0]?.finish_reason) sawFinish = true;
          if (chunk.usage) usage = chunk.usage;
        }
        expect(sawFinish).toBe(true);
      } else {
        const r = await client.chat.completions.create(
          { model: MODEL, messages, tools, max_tokens: 6, temperature: 0 },
          { headers: { "x-trajectory-id": trajectoryId } },
        );
        expect(r.object).toBe("chat.completion");
        content = r.choices[0]!.message.content ?? "";
        toolCalls = (r.choices[0]!.message.tool_calls ?? []) as typeof toolCalls;
        usage = r.usage;
      }
      expect(usage).toBeDefined();
      expect(usage!.completion_tokens).toBe(6);
      prompts.push(usage!.prompt_tokens);
      cached.push(usage!.prompt_tokens_details?.cached_tokens ?? -1);
      // The agent keeps the reply as the server gave it, then answers with a tool result. A tool
      // message must answer a call of the reply (400 otherwise): a reply without one (the untrained
      // model's usual) gets the output as a user message.
      messages.push(toolCalls.length > 0 ? { role: "assistant", content: content || null, tool_calls: toolCalls } : { role: "assistant", content });
      const output = `output of step ${turn}: ${"line of output ".repeat(8)}`;
      messages.push(toolCalls.length > 0 ? { role: "tool", tool_call_id: toolCalls[0]!.id, content: output } : { role: "user", content: output });
    }
    expect(cached[0]).toBe(0);
    for (let i = 1; i < cached.length; i++) {
      expect(cached[i]!, `turn ${i + 1}`).toBeGreaterThan(cached[i - 1]!);
      // Everything up to the previous reply is reused, bar the partial last block.
      expect(cached[i]!, `turn ${i + 1}`).toBeGreaterThanOrEqual(prompts[i - 1]! + 6 - 16);
    }

    // The trajectory URL of the same tenant and id shows every turn.
    const state = (await (await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories/${trajectoryId}`, { headers: { authorization: "Bearer sk-local-dev" } })).json()) as {
      turns: { turn: number; mode: string; prompt_tokens: number; cached_tokens: number; computed_tokens: number; completion_tokens: number; ttft_ms: number; backend: string; finish_reason: string }[];
      message_count: number;
    };
    expect(state.turns.map((t) => t.turn)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(state.turns.map((t) => t.cached_tokens)).toEqual(cached);
    expect(state.turns.slice(1).every((t) => t.mode === "delta")).toBe(true);
    for (const t of state.turns) {
      expect(t.cached_tokens + t.computed_tokens).toBe(t.prompt_tokens);
      expect(t.completion_tokens).toBe(6);
      expect(t.ttft_ms).toBeGreaterThan(0);
      expect(t.backend).toMatch(/^backend-/);
      expect(t.finish_reason).toBe("length");
    }
    expect(state.message_count).toBe(2 + 10 * 1 + 9); // system, user, 10 replies, 9 tool results (or user messages) before the last turn

    // A delta turn through the trajectory URL gets the same reuse.
    const res = await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories/${trajectoryId}/turns`, {
      method: "POST",
      headers: { authorization: "Bearer sk-local-dev", "content-type": "application/json" },
      body: JSON.stringify({ messages: [messages.at(-1)], max_tokens: 6, temperature: 0 }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as OpenAI.ChatCompletion;
    expect(body.object).toBe("chat.completion");
    expect(body.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(prompts.at(-1)! + 6 - 16);
    expect(res.headers.get("x-agent-edge-mode")).toBe("delta");
  });

  it("streams a forced call's name, then its arguments piece by piece; finalChatCompletion() equals the non-streamed call and its Idempotency-Key replay", async () => {
    // Two arguments, so the call streams in several pieces; a replay answers the same text. (The
    // backend gets tool definitions with sorted keys, so the grammar writes them sorted here: the
    // model's own key order is kept by durable-objects/turn/reply-forms.test.ts.)
    const readRange: ChatCompletionTool = {
      type: "function",
      function: { name: "read_range", description: "Read lines of a file", parameters: { type: "object", properties: { path: { type: "string" }, first_line: { type: "integer" } }, required: ["path", "first_line"] } },
    };
    const params = { model: MODEL, messages: [{ role: "user" as const, content: "Read the README." }], tools: [readRange], tool_choice: { type: "function" as const, function: { name: "read_range" } }, parallel_tool_calls: false, temperature: 0, max_tokens: 64 };
    // Two fresh trajectories, one request each: the same greedy call, canonically `call_0` in both.
    const a = { "x-trajectory-id": `e2e-stream-a-${crypto.randomUUID()}`, "idempotency-key": crypto.randomUUID() };
    const created = await client.chat.completions.create(params, { headers: a });
    const stream = client.chat.completions.stream(params, { headers: { "x-trajectory-id": `e2e-stream-b-${crypto.randomUUID()}` } });
    const events: string[] = [];
    stream.on("tool_calls.function.arguments.delta", (e) => {
      if (e.index === 0 && e.arguments_delta) events.push("delta");
    });
    stream.on("tool_calls.function.arguments.done", (e) => events.push(`done:${e.index}`));
    const final = await stream.finalChatCompletion();
    const calls = created.choices[0]!.message.tool_calls!;
    expect(calls.length).toBeGreaterThan(0);
    expect(final.choices[0]!.message.tool_calls).toEqual(calls);
    expect(final.choices[0]!.finish_reason).toBe(created.choices[0]!.finish_reason);
    // More than one argument piece arrived before the first call ended.
    expect(events.indexOf("done:0"), JSON.stringify([events, calls])).toBeGreaterThan(1);
    expect(events.slice(0, events.indexOf("done:0")).every((e) => e === "delta")).toBe(true);
    // The first request again, streamed: a replay (its stored text, the call whole) answering the same call.
    const replay = await client.chat.completions.stream(params, { headers: a }).finalChatCompletion();
    expect(replay.choices[0]!.message.tool_calls).toEqual(calls);
  }, 120_000);

  it("has the backend registered in the pool by its heartbeats", async () => {
    let backends: { id: string; source: string; up: boolean; url: string }[] = [];
    for (let i = 0; i < 50 && !backends.some((b) => b.source === "registered"); i++) {
      const res = await fetch(`${stack.edgeUrl}/v1/pool`, { headers: { "x-agent-edge-secret": stack.secret } });
      backends = ((await res.json()) as { backends: typeof backends }).backends;
      if (!backends.some((b) => b.source === "registered")) await new Promise((r) => setTimeout(r, 200));
    }
    expect(backends).toEqual([expect.objectContaining({ source: "registered", up: true, url: stack.backendUrls[0] })]);
  });

  it("lists the backends' models", async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([MODEL]);
  });

  it("serves a request without a trajectory id statelessly", async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 3 });
    expect(r.choices[0]!.message.role).toBe("assistant");
    expect(r.usage!.completion_tokens).toBeLessThanOrEqual(3);
  });

  it("answers OpenAI-style errors the client understands", async () => {
    const bad = new OpenAI({ apiKey: "sk-wrong", baseURL: `${stack.edgeUrl}/v1`, maxRetries: 0 });
    await expect(bad.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }] })).rejects.toMatchObject({
      status: 401,
      code: "unauthorized",
    });
    // One model served and a tenant that is not strict (STRICT_TENANTS): any name serves it, echoed.
    const anyName = await client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    expect(anyName.model).toBe("no-such-model");
  });
});

/**
 * Placement by the pool's block index: two real backends heartbeat their KV events into the
 * edge. A new trajectory goes where its system prompt's blocks are cached; once those blocks are
 * evicted there (removed events), that backend no longer attracts new trajectories.
 */
describe("placement by KV events (wrangler dev + two backends)", () => {
  let fixture: TestStack | undefined;
  let stack: Stack;

  beforeAll(async () => {
    fixture = await startTestStack({
      name: "kv-events",
      backends: 2,
      // 64 blocks of 16 tokens (tiny model: 512 bytes of K and V per token): easy to evict.
      kvMemory: "512KiB",
      threads: 1,
    });
    ({ stack } = fixture);
  });

  afterAll(() => fixture?.stop());

  const chat = async (trajectoryId: string, messages: unknown[]) => {
    const res = await chatTurn(stack, trajectoryId, { model: MODEL, messages, max_tokens: 2, temperature: 0 });
    expect(res.status).toBe(200);
    await res.json();
    const state = await trajectoryRecord(stack, trajectoryId);
    return { backend: state.backend, cached: state.turns[0]!.cached_tokens };
  };
  /** A trajectory id that the least-loaded rule (equal loads: rendezvous hash) sends to `url`. */
  const idTiedTo = (url: string, prefix: string) => {
    for (let i = 0; ; i++) {
      const id = `${prefix}-${i}`;
      const d = route("least-loaded", { trajectoryId: id }, stack.backendUrls.map((u) => ({ id: u, up: true, load: 0 })));
      if (d?.backendId === url) return id;
    }
  };
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  it("sends new trajectories to the backend caching their system prompt, and stops once its blocks were evicted", async () => {
    // Both backends registered and indexed (their first KV snapshot applied).
    let index: { backends: { url: string; indexed: boolean }[] } = { backends: [] };
    for (let i = 0; i < 100 && !(index.backends.length === 2 && index.backends.every((b) => b.indexed)); i++) {
      if (i > 0) await sleep(200);
      const res = await fetch(`${stack.edgeUrl}/v1/pool`, { headers: { "x-agent-edge-secret": stack.secret } });
      index = ((await res.json()) as { index: typeof index }).index;
    }
    expect(index.backends.map((b) => b.url).sort()).toEqual([...stack.backendUrls].sort());
    expect(index.backends.every((b) => b.indexed)).toBe(true);

    const system = { role: "system", content: `You are the shared agent prompt. ${"Rules apply. ".repeat(60)}` };
    const first = await chat("kv-first", [system, { role: "user", content: "task one" }]);
    const holder = first.backend;
    const other = stack.backendUrls.find((u) => u !== holder)!;

    // A new trajectory that a load tie would send to the other backend goes to the holder.
    const second = await chat(idTiedTo(other, "kv-second"), [system, { role: "user", content: "task two" }]);
    expect(second.backend).toBe(holder);
    expect(second.cached).toBeGreaterThan(100);

    // Other prompts straight to the holder evict the system prompt's blocks there.
    for (let k = 0; k < 5; k++) {
      const content = Array.from({ length: 150 }, (_, i) => `w${k}x${i}`).join(" ");
      const { status, frames } = await generate(holder, stack.secret, { requestId: `evict-${k}`, mode: "full", messages: [{ role: "user", content }], sampling: greedy(1) });
      expect(status).toBe(200);
      expect(frames.at(-1)!.type).toBe("done");
    }
    // Two heartbeats (2 s apart) carry the removed events and report the load back at 0.
    await sleep(5000);

    // The holder is still a holder by the text-level index, but holds none of the blocks now:
    // the next new trajectory goes by load (the tie sends this id to the other backend).
    const third = await chat(idTiedTo(other, "kv-third"), [system, { role: "user", content: "task three" }]);
    expect(third.backend).toBe(other);
    expect(third.cached).toBe(0);
  });
});
