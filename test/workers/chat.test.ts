import { listDurableObjectIds } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { poolOf } from "../../durable-objects/pool/pool-do";
import { edgeSettings } from "../../durable-objects/settings";
import { trajectoryName } from "../../durable-objects/trajectory-name";
import type { ChatMessage } from "../../protocol/messages";
import { chat, completion, getState, replyOf, SMALL, sseData, stored, uid, uniqueSystem, type ChatCompletion } from "./helpers";
import { TENANTS } from "./tenants";

interface Chunk {
  object: string;
  id: string;
  choices: { index: number; delta: { role?: string; content?: string }; finish_reason: string | null }[];
  usage?: ChatCompletion["usage"];
}

describe("chat completions", () => {
  it("non-streaming: a chat.completion with usage, served by the trajectory's object", async () => {
    const id = uid("chat-json");
    const messages: ChatMessage[] = [uniqueSystem(), { role: "user", content: "List the files." }];
    const res = await chat({ messages, ...SMALL }, { headers: { "x-trajectory-id": id } });
    expect(res.headers.get("x-trajectory-id")).toBe(id);
    expect(res.headers.get("x-agent-edge-turn")).toBe("1");
    expect(res.headers.get("x-agent-edge-mode")).toBe("full");
    expect(res.headers.get("x-agent-edge-backend")).toBeTruthy();
    const c = await completion(res);
    expect(c.object).toBe("chat.completion");
    expect(c.id).toMatch(/^chatcmpl-/);
    expect(c.choices).toHaveLength(1);
    expect(c.choices[0]!.message.role).toBe("assistant");
    expect(typeof c.choices[0]!.message.content).toBe("string");
    expect(["stop", "length"]).toContain(c.choices[0]!.finish_reason);
    expect(c.usage.prompt_tokens).toBeGreaterThan(20);
    expect(c.usage.completion_tokens).toBeGreaterThanOrEqual(1);
    expect(c.usage.completion_tokens).toBeLessThanOrEqual(2);
    expect(c.usage.total_tokens).toBe(c.usage.prompt_tokens + c.usage.completion_tokens);
    expect(c.usage.prompt_tokens_details.cached_tokens).toBe(0);

    const s = await stored("a", id);
    expect(s.messages).toEqual([...messages, replyOf(c)]);
    expect(s.turns).toHaveLength(1);
  });

  it("streaming: SSE chunks, a usage chunk with cached_tokens, then [DONE]", async () => {
    const id = uid("chat-sse");
    const messages: ChatMessage[] = [uniqueSystem(), { role: "user", content: "Run the tests." }];
    const res = await chat({ messages, ...SMALL, max_tokens: 4, stream: true, stream_options: { include_usage: true } }, { headers: { "x-trajectory-id": id } });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(res.headers.get("x-trajectory-id")).toBe(id);
    const data = sseData(await res.text());
    expect(data.at(-1)).toBe("[DONE]");
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as Chunk);
    for (const ch of chunks) {
      expect(ch.object).toBe("chat.completion.chunk");
      expect(ch.id).toBe(chunks[0]!.id);
    }
    expect(chunks[0]!.choices[0]!.delta.role).toBe("assistant");
    const usageChunk = chunks.at(-1)!;
    expect(usageChunk.choices).toEqual([]);
    expect(usageChunk.usage!.prompt_tokens).toBeGreaterThan(20);
    expect(usageChunk.usage!.prompt_tokens_details.cached_tokens).toBe(0);
    expect(usageChunk.usage!.completion_tokens).toBeGreaterThanOrEqual(1);
    const finish = chunks.at(-2)!;
    expect(["stop", "length"]).toContain(finish.choices[0]!.finish_reason);
    const content = chunks.map((ch) => ch.choices[0]?.delta.content ?? "").join("");

    // The streamed text is what the trajectory stored as the reply.
    const s = await stored("a", id);
    expect(s.messages).toEqual([...messages, { role: "assistant", content }]);

    // A second streamed turn extends the transcript: a delta turn with cached tokens.
    const res2 = await chat(
      { messages: [...messages, { role: "assistant", content }, { role: "user", content: "And the linter." }], ...SMALL, stream: true, stream_options: { include_usage: true } },
      { headers: { "x-trajectory-id": id } },
    );
    const data2 = sseData(await res2.text());
    expect(data2.at(-1)).toBe("[DONE]");
    const usage2 = (JSON.parse(data2.at(-2)!) as Chunk).usage!;
    expect(usage2.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
    expect((await getState("a", id)).turns.map((t) => t.mode)).toEqual(["full", "delta"]);
  });

  it("streaming without include_usage has no usage chunk", async () => {
    const res = await chat({ messages: [{ role: "user", content: "hello" }], ...SMALL, stream: true }, { headers: { "x-trajectory-id": uid("chat-sse-nousage") } });
    const data = sseData(await res.text());
    expect(data.at(-1)).toBe("[DONE]");
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as Chunk);
    expect(chunks.every((ch) => ch.usage === undefined && ch.choices.length === 1)).toBe(true);
    expect(chunks.at(-1)!.choices[0]!.finish_reason).not.toBeNull();
  });

  it("x-trajectory-id, x-session-affinity and prompt_cache_key reach the same trajectory", async () => {
    const id = uid("chat-ids");
    const messages: ChatMessage[] = [uniqueSystem(), { role: "user", content: "one" }];
    const c1 = await completion(await chat({ messages, ...SMALL }, { headers: { "x-trajectory-id": id } }));
    messages.push(replyOf(c1), { role: "user", content: "two" });
    const r2 = await chat({ messages, ...SMALL }, { headers: { "x-session-affinity": id } });
    expect(r2.headers.get("x-trajectory-id")).toBe(id);
    expect(r2.headers.get("x-agent-edge-turn")).toBe("2");
    const c2 = await completion(r2);
    messages.push(replyOf(c2), { role: "user", content: "three" });
    const r3 = await chat({ messages, ...SMALL, prompt_cache_key: id });
    expect(r3.headers.get("x-trajectory-id")).toBe(id);
    const c3 = await completion(r3);
    messages.push(replyOf(c3), { role: "user", content: "four" });
    // x-trajectory-id wins over the others.
    const c4 = await completion(await chat({ messages, ...SMALL, prompt_cache_key: uid("other") }, { headers: { "x-trajectory-id": id, "x-session-affinity": uid("other") } }));
    messages.push(replyOf(c4));

    const state = await getState("a", id);
    expect(state.turns.map((t) => t.turn)).toEqual([1, 2, 3, 4]);
    expect(state.turns.map((t) => t.mode)).toEqual(["full", "delta", "delta", "delta"]);
    expect(state.message_count).toBe(messages.length);
    expect((await stored("a", id)).messages).toEqual(messages);
  });

  it("without a trajectory id the turn is stateless and creates no Durable Object", async () => {
    const before = (await listDurableObjectIds(env.TRAJECTORY)).map((x) => x.toString());
    const res = await chat({ messages: [uniqueSystem(), { role: "user", content: "stateless" }], ...SMALL });
    expect(res.headers.get("x-trajectory-id")).toBeNull();
    const c = await completion(res);
    expect(c.usage.prompt_tokens).toBeGreaterThan(20);
    const s = sseData(await (await chat({ messages: [{ role: "user", content: "stateless stream" }], ...SMALL, stream: true })).text());
    expect(s.at(-1)).toBe("[DONE]");
    const after = (await listDurableObjectIds(env.TRAJECTORY)).map((x) => x.toString());
    expect(after.sort()).toEqual(before.sort());
  });

  it("listDurableObjectIds does see an object created by a trajectory turn", async () => {
    const id = uid("chat-listed");
    await completion(await chat({ messages: [{ role: "user", content: "stateful" }], ...SMALL }, { headers: { "x-trajectory-id": id } }));
    const ids = (await listDurableObjectIds(env.TRAJECTORY)).map((x) => x.toString());
    expect(ids).toContain(env.TRAJECTORY.idFromName(trajectoryName(TENANTS.a.name, id)).toString());
  });
});

describe("stateless turns (no session)", () => {
  it("are placed by their prefix key: a second request sharing the first message goes where the first one's blocks are", async () => {
    const system = uniqueSystem(40);
    const first = await chat({ messages: [system, { role: "user", content: "one" }], ...SMALL });
    await completion(first);
    expect(first.headers.get("x-trajectory-id")).toBeNull();
    // The first is placed by load: no backend served its key yet.
    expect(first.headers.get("x-agent-edge-route")).toBe("least-loaded");
    const second = await chat({ messages: [system, { role: "user", content: "two" }], ...SMALL });
    const c = await completion(second);
    expect(second.headers.get("x-agent-edge-route")).toBe("prefix");
    expect(second.headers.get("x-agent-edge-backend")).toBe(first.headers.get("x-agent-edge-backend"));
    expect(c.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
  });

  it("cost the pool one call each before the reply (place), one after it (notePrefix), and a view per POOL_VIEW_TTL_MS", async () => {
    const pool = poolOf(env);
    const system = uniqueSystem(40);
    const before = await pool.callCounts();
    const t0 = Date.now();
    const n = 6;
    for (let i = 0; i < n; i++) await completion(await chat({ messages: [system, { role: "user", content: `count ${i}` }], ...SMALL }));
    const elapsed = Date.now() - t0;
    // The prefix note runs after the reply: wait for the last one.
    let after = await pool.callCounts();
    for (let tries = 0; after.notePrefix - before.notePrefix < n && tries < 50; tries++) after = (await new Promise((r) => setTimeout(r, 20)), await pool.callCounts());
    expect(after.place - before.place).toBe(n);
    expect(after.notePrefix - before.notePrefix).toBe(n);
    expect(after.view - before.view).toBeLessThanOrEqual(Math.ceil(elapsed / edgeSettings(env).poolViewTtlMs) + 1);
  });
});
