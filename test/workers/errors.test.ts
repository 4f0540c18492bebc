import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { ChatMessage } from "../../protocol/messages";
import { call, chat, completion, createTrajectory, expectError, getState, replyOf, SMALL, stored, trajectoryPath, uid, uniqueSystem } from "./helpers";
import { TEST_MAX_BODY_BYTES } from "./tenants";

const MESSAGES: ChatMessage[] = [{ role: "user", content: "hello" }];

/** A trajectory with one finished turn, and what its storage held after it. */
async function trajectoryWithOneTurn(prefix: string) {
  const id = uid(prefix);
  const base: ChatMessage[] = [uniqueSystem(), { role: "user", content: "first" }];
  const c = await completion(await chat({ messages: base, ...SMALL }, { headers: { "x-trajectory-id": id } }));
  const before = await stored("a", id);
  expect(before.messages).toEqual([...base, replyOf(c)]);
  expect(before.turns).toHaveLength(1);
  return { id, headers: { "x-trajectory-id": id }, before, next: [...before.messages, { role: "user", content: "second" } as ChatMessage] };
}

describe("request errors", () => {
  it("malformed JSON: 400 invalid_request", async () => {
    const body = await expectError(await call("/v1/chat/completions", { body: "{not json" }), 400, "invalid_request");
    expect(body.error.message).toMatch(/not valid JSON/);
    await expectError(await call(trajectoryPath("a", uid("x"), "/turns"), { body: '{"messages": [' }), 400, "invalid_request");
    await expectError(await call(trajectoryPath("a"), { body: "]" }), 400, "invalid_request");
  });

  it("x-agent-edge-speculative other than on/off: 400 invalid_request naming the header; off and on are served", async () => {
    const body = await expectError(await call("/v1/chat/completions", { body: JSON.stringify({ messages: MESSAGES, ...SMALL }), headers: { "x-agent-edge-speculative": "maybe" } }), 400, "invalid_request");
    expect(body.error.message).toMatch(/x-agent-edge-speculative/);
    for (const value of ["off", "on"]) expect((await chat({ messages: MESSAGES, ...SMALL }, { headers: { "x-agent-edge-speculative": value } })).status).toBe(200);
  });

  it("an empty body: 400 invalid_request", async () => {
    await expectError(await call("/v1/chat/completions", { method: "POST" }), 400, "invalid_request");
  });

  it("wrong field types: 400 invalid_request naming the field", async () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ messages: "hello" }, /^messages\b/],
      [{}, /^messages\b/],
      [{ messages: [] }, /^messages\b/],
      [{ messages: [{ role: "robot", content: "hi" }] }, /^messages\[0\]\.role\b/],
      [{ messages: [{ role: "user", content: 42 }] }, /^messages\[0\]\.content\b/],
      [{ messages: MESSAGES, max_tokens: "2" }, /^max_tokens\b/],
      [{ messages: MESSAGES, max_tokens: 0 }, /^max_tokens\b/],
      [{ messages: MESSAGES, temperature: 5 }, /^temperature\b/],
      [{ messages: MESSAGES, seed: 1.5 }, /^seed\b/],
      [{ messages: MESSAGES, stream: "yes" }, /^stream\b/],
      [{ messages: MESSAGES, n: 2 }, /^n\b/],
      [{ messages: MESSAGES, stop: ["a", "b", "c", "d", "e"] }, /^stop\b/],
      [{ messages: MESSAGES, tools: [{ type: "function", function: { name: "" } }] }, /^tools\[0\]\.function\.name\b/],
      [{ messages: MESSAGES, prompt_cache_key: 7 }, /^prompt_cache_key\b/],
      [{ messages: MESSAGES, logprobs: "yes" }, /^logprobs\b/],
      [{ messages: MESSAGES, logprobs: true, top_logprobs: 21 }, /^top_logprobs: must be an integer in \[0, 20\]$/],
      [{ messages: MESSAGES, logprobs: true, top_logprobs: -1 }, /^top_logprobs: must be an integer in \[0, 20\]$/],
      [{ messages: MESSAGES, top_logprobs: 3 }, /^top_logprobs: requires logprobs: true$/],
      [{ messages: MESSAGES, logprobs: false, top_logprobs: 0 }, /^top_logprobs: requires logprobs: true$/],
    ];
    for (const [body, field] of cases) {
      const err = await expectError(await chat(body), 400, "invalid_request");
      expect(err.error.message, JSON.stringify(body)).toMatch(field);
    }
    // A bad trajectory id.
    await expectError(await chat({ messages: MESSAGES, ...SMALL }, { headers: { "x-trajectory-id": "no spaces allowed" } }), 400, "invalid_request");
  });

  it("an oversize body: 413 payload_too_large, declared or streamed", async () => {
    const big = new Uint8Array(TEST_MAX_BODY_BYTES + 1024 * 1024).fill(0x20);
    const declared = await call("/v1/chat/completions", { body: big, headers: { "content-type": "application/json" } });
    await expectError(declared, 413, "payload_too_large");

    // No content-length: the limit holds while reading.
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent >= big.byteLength) return controller.close();
        controller.enqueue(big.subarray(sent, sent + 65536));
        sent += 65536;
      },
    });
    await expectError(await call("/v1/chat/completions", { body: stream }), 413, "payload_too_large");
    // Just under the limit is read (and then judged on its content).
    const under = JSON.stringify({ messages: [{ role: "user", content: "x" }], max_tokens: "bad" }).padEnd(TEST_MAX_BODY_BYTES - 16, " ");
    await expectError(await call("/v1/chat/completions", { body: under }), 400, "invalid_request");
    expect(env.MAX_BODY_BYTES).toBe(String(TEST_MAX_BODY_BYTES));
  });

  it("an unknown model: 404 unknown_model (stateless)", async () => {
    const body = await expectError(await chat({ messages: MESSAGES, model: "no-such-model", ...SMALL }), 404, "unknown_model");
    expect(body.error.type).toBe("not_found_error");
    expect(body.error.message).toContain("no-such-model");
  });

  it("missing or wrong key: 401 unauthorized before anything else is read", async () => {
    await expectError(await call("/v1/chat/completions", { tenant: null, body: "{not json" }), 401, "unauthorized");
    await expectError(await call("/v1/chat/completions", { authorization: "Bearer nope", body: "{not json" }), 401, "unauthorized");
    await expectError(await call(trajectoryPath("a"), { authorization: "Bearer nope", body: { id: uid("x") } }), 401, "unauthorized");
  });
});

describe("a failed turn leaves the transcript exactly as before", () => {
  it("backend error: unknown model (404 unknown_model), non-streaming and streaming", async () => {
    const t = await trajectoryWithOneTurn("fail-model");
    await expectError(await chat({ messages: t.next, model: "no-such-model", ...SMALL }, { headers: t.headers }), 404, "unknown_model");
    await expectError(await chat({ messages: t.next, model: "no-such-model", ...SMALL, stream: true }, { headers: t.headers }), 404, "unknown_model");
    await expectError(await call(trajectoryPath("a", t.id, "/turns"), { body: { messages: [{ role: "user", content: "x" }], model: "no-such-model", ...SMALL } }), 404, "unknown_model");
    expect(await stored("a", t.id)).toEqual(t.before);
    // A diverging request that fails does not replace the transcript either.
    await expectError(await chat({ messages: [{ role: "user", content: "different" }], model: "no-such-model", ...SMALL }, { headers: t.headers }), 404, "unknown_model");
    expect(await stored("a", t.id)).toEqual(t.before);
  });

  it("context too long: 400 context_length_exceeded", async () => {
    const t = await trajectoryWithOneTurn("fail-context");
    const tooLong = [...t.before.messages, { role: "user", content: "token ".repeat(6000) } as ChatMessage];
    await expectError(await chat({ messages: tooLong, ...SMALL }, { headers: t.headers }), 400, "context_length_exceeded");
    // A max_tokens over what the context leaves is clamped by the backend, not refused (gpu-backend/server/reply-budget.test.ts).
    expect(await stored("a", t.id)).toEqual(t.before);
  });

  it("bad input: refused at the edge (400 invalid_request) and nothing stored", async () => {
    const t = await trajectoryWithOneTurn("fail-input");
    await expectError(await chat({ messages: [...t.next, { role: "wizard", content: "x" }], ...SMALL }, { headers: t.headers }), 400, "invalid_request");
    await expectError(await call("/v1/chat/completions", { body: "{oops", headers: t.headers }), 400, "invalid_request");
    await expectError(await call(trajectoryPath("a", t.id, "/turns"), { body: { messages: [] } }), 400, "invalid_request");
    expect(await stored("a", t.id)).toEqual(t.before);
    // And the trajectory goes on as a delta afterwards.
    const r = await chat({ messages: t.next, ...SMALL }, { headers: t.headers });
    expect(r.headers.get("x-agent-edge-mode")).toBe("delta");
    await completion(r);
    expect((await getState("a", t.id)).turns).toHaveLength(2);
  });

  it("a tool message answering no call: 400 invalid_request naming it, on a chat turn and an append turn, and nothing stored", async () => {
    const t = await trajectoryWithOneTurn("fail-tool");
    const orphan: ChatMessage = { role: "tool", tool_call_id: "call_nowhere", content: "42 files" };
    // The stored transcript is system, user, assistant reply: the tool message is messages[3].
    for (const stream of [false, true]) {
      const body = await expectError(await chat({ messages: [...t.before.messages, orphan], ...SMALL, stream }, { headers: t.headers }), 400, "invalid_request");
      expect(body.error.message).toBe(`messages[3]: tool message answers tool_call_id "call_nowhere", which no earlier assistant message's tool_calls names`);
    }
    // An append turn: indices are the ones the client sent.
    const appended = await expectError(
      await call(trajectoryPath("a", t.id, "/turns"), { body: { messages: [{ role: "user", content: "run it" }, orphan], ...SMALL } }),
      400,
      "invalid_request",
    );
    expect(appended.error.message).toMatch(/^messages\[1\]: tool message answers tool_call_id "call_nowhere", which no earlier/);
    await expectError(await call(trajectoryPath("a", t.id, "/turns"), { body: { messages: [orphan], ...SMALL, stream: true } }), 400, "invalid_request");
    expect(await stored("a", t.id)).toEqual(t.before);
    // And the trajectory goes on as a delta afterwards.
    const r = await chat({ messages: t.next, ...SMALL }, { headers: t.headers });
    expect(r.headers.get("x-agent-edge-mode")).toBe("delta");
    await completion(r);
  });

  it("an append turn answers the call of the stored reply; an answer after another message is refused", async () => {
    const id = uid("tool-append");
    await createTrajectory("a", id);
    const tools = [{ type: "function", function: { name: "ls", description: "List a folder", parameters: { type: "object", properties: { dir: { type: "string" } }, required: ["dir"] } } }];
    // A reply that must call the tool (constrained decoding): stored with the canonical id call_0.
    const c1 = await completion(
      await call(trajectoryPath("a", id, "/turns"), { body: { messages: [uniqueSystem(), { role: "user", content: "list src" }], tools, tool_choice: "required", max_tokens: 64, temperature: 0 } }),
    );
    const callId = (c1.choices[0]!.message.tool_calls as { id: string }[])[0]!.id;
    expect(callId).toBe("call_0");
    const before = await stored("a", id);
    // After a user message, the answer no longer follows its call: refused, nothing stored.
    const misplaced = await expectError(
      await call(trajectoryPath("a", id, "/turns"), { body: { messages: [{ role: "user", content: "wait" }, { role: "tool", tool_call_id: callId, content: "a.ts" }], ...SMALL } }),
      400,
      "invalid_request",
    );
    expect(misplaced.error.message).toMatch(/^messages\[1\]: tool message answers tool_call_id "call_0" of stored message 2, but messages\[0\] \(role user\) comes between/);
    expect(await stored("a", id)).toEqual(before);
    // The answer alone, right after the stored call: a delta turn.
    const r = await call(trajectoryPath("a", id, "/turns"), { body: { messages: [{ role: "tool", tool_call_id: callId, content: "a.ts" }], ...SMALL } });
    expect(r.headers.get("x-agent-edge-mode")).toBe("delta");
    await completion(r);
    expect((await stored("a", id)).messages[3]).toEqual({ role: "tool", tool_call_id: "call_0", content: "a.ts" });
  });

  it("a stateless turn with a tool message answering no call: 400 invalid_request before any backend is asked", async () => {
    const messages: ChatMessage[] = [{ role: "user", content: "hi" }, { role: "assistant", content: "ok" }, { role: "tool", tool_call_id: "x", content: "1" }];
    for (const stream of [false, true]) {
      const body = await expectError(await chat({ messages, ...SMALL, stream }), 400, "invalid_request");
      expect(body.error.message).toBe(`messages[2]: tool message answers tool_call_id "x", which no earlier assistant message's tool_calls names`);
    }
    // Answering the call it follows is fine.
    const ok: ChatMessage[] = [{ role: "user", content: "hi" }, { role: "assistant", content: null, tool_calls: [{ id: "x", type: "function", function: { name: "ls", arguments: "{}" } }] }, { role: "tool", tool_call_id: "x", content: "1" }];
    await completion(await chat({ messages: ok, ...SMALL }));
  });

  it("a failed first turn through a trajectory URL leaves the trajectory empty", async () => {
    const id = uid("fail-first");
    await createTrajectory("a", id);
    await expectError(await call(trajectoryPath("a", id, "/turns"), { body: { messages: MESSAGES, model: "no-such-model", ...SMALL } }), 404, "unknown_model");
    const state = await getState("a", id);
    expect(state.turns).toEqual([]);
    expect(state.message_count).toBe(0);
    expect((await stored("a", id)).messages).toEqual([]);
  });
});
