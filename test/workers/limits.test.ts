import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { LIMIT_DEFAULTS } from "../../durable-objects/settings";
import { TrajectoryStore } from "../../durable-objects/trajectory/trajectory-store";
import type { ChatMessage } from "../../protocol/messages";
import { call, chat, completion, createTrajectory, expectError, getState, seededTurn, SMALL, stored, type Stored, stubOf, trajectoryPath, uid, uniqueSystem } from "./helpers";
import { TENANTS, TEST_MAX_BODY_BYTES } from "./tenants";

/**
 * The configured caps (docs/edge.md, "Limits") at their defaults (the workers tests set none), on
 * every API's shape: one message, tool, character or header byte past a cap is refused with its
 * status and code, the message names the setting, and nothing is stored.
 */

const MODEL = "tiny-llama-random";
const { maxMessages, maxTools, maxTotalChars, maxHeaderBytes } = LIMIT_DEFAULTS;

/** `n` tiny messages, user and assistant in turn, ending with a user message. */
function manyMessages(n: number): ChatMessage[] {
  return Array.from({ length: n }, (_, i): ChatMessage => ({ role: (n - i) % 2 === 1 ? "user" : "assistant", content: "x" }));
}

const bigText = (chars: number) => "y".repeat(chars);

/** A trajectory that does not exist (and must not after a refusal). */
async function expectNoTrajectory(id: string): Promise<void> {
  await expectError(await call(trajectoryPath("a", id)), 404, "not_found");
  expect((await stored("a", id)).meta).toBeNull();
}

/** Checks a refusal, its message naming the setting, and that its body fit MAX_BODY_BYTES (so the cap, not the body limit, refused it). */
async function refused(res: Response, status: number, code: string, setting: string, bodyBytes: number): Promise<void> {
  expect(bodyBytes).toBeLessThan(TEST_MAX_BODY_BYTES);
  const body = await expectError(res, status, code);
  expect(body.error.message).toContain(setting);
}

function sent(body: unknown): number {
  return new TextEncoder().encode(JSON.stringify(body)).byteLength;
}

describe("limits: chat completions", () => {
  it("MAX_MESSAGES, MAX_TOOLS and MAX_TOTAL_CHARS refuse stateless and trajectory turns, storing nothing", async () => {
    const tools = Array.from({ length: maxTools + 1 }, (_, i) => ({ type: "function", function: { name: `t${i}` } }));
    const cases = [
      { body: { messages: manyMessages(maxMessages + 1), ...SMALL }, status: 400, code: "limit_exceeded", setting: `limit of ${maxMessages} (MAX_MESSAGES)` },
      { body: { messages: [{ role: "user", content: "hi" }], tools, ...SMALL }, status: 400, code: "limit_exceeded", setting: `limit of ${maxTools} (MAX_TOOLS)` },
      { body: { messages: [{ role: "user", content: bigText(maxTotalChars + 1) }], ...SMALL }, status: 413, code: "payload_too_large", setting: `limit of ${maxTotalChars} (MAX_TOTAL_CHARS)` },
    ];
    for (const c of cases) {
      await refused(await chat(c.body), c.status, c.code, c.setting, sent(c.body));
      const id = uid("lim-chat");
      await refused(await chat(c.body, { headers: { "x-trajectory-id": id } }), c.status, c.code, c.setting, sent(c.body));
      await refused(await chat({ ...c.body, stream: true }, { headers: { "x-trajectory-id": id } }), c.status, c.code, c.setting, sent(c.body));
      await expectNoTrajectory(id);
    }
    // At the caps exactly, the edge takes the request (the tiny model's context is what refuses it).
    const atCap = await chat({ messages: manyMessages(maxMessages), ...SMALL });
    expect(atCap.status).not.toBe(413);
    expect(((await atCap.json()) as { error?: { code: string } }).error?.code).not.toBe("limit_exceeded");
  });

  it("an existing trajectory refused past a cap keeps its transcript and turns", async () => {
    const id = uid("lim-keep");
    const base: ChatMessage[] = [uniqueSystem(), { role: "user", content: "start" }];
    await completion(await chat({ messages: base, ...SMALL }, { headers: { "x-trajectory-id": id } }));
    const before = await stored("a", id);
    const body = { messages: [...before.messages, ...manyMessages(maxMessages)], ...SMALL };
    await refused(await chat(body, { headers: { "x-trajectory-id": id } }), 400, "limit_exceeded", "MAX_MESSAGES", sent(body));
    expect(await stored("a", id)).toEqual(before);
    expect((await getState("a", id)).turns).toHaveLength(1);
  });
});

describe("limits: trajectory URLs and Responses continuations count the stored transcript", () => {
  /** A trajectory whose storage holds `messages` (written as one committed turn, then read back by a fresh instance). */
  async function seeded(messages: ChatMessage[]): Promise<{ id: string; before: Stored }> {
    const id = uid("lim-seed");
    await createTrajectory("a", id);
    await runInDurableObject(stubOf("a", id), (_instance, state) => {
      new TrajectoryStore(state.storage).commitTurn(seededTurn(messages));
    });
    await evictDurableObject(stubOf("a", id));
    const before = await stored("a", id);
    expect(before.messages).toHaveLength(messages.length);
    return { id, before };
  }

  it("an append turn within the caps on its own is refused when the stored transcript takes the total past MAX_MESSAGES or MAX_TOTAL_CHARS", async () => {
    const many = await seeded([...manyMessages(maxMessages - 1), { role: "assistant", content: "ok" }]);
    const one = { messages: [{ role: "user", content: "one more" }], ...SMALL };
    await refused(await call(trajectoryPath("a", many.id, "/turns"), { body: one }), 400, "limit_exceeded", `${maxMessages + 1} messages`, sent(one));
    expect(await stored("a", many.id)).toEqual(many.before);
    expect((await getState("a", many.id)).message_count).toBe(maxMessages);

    const long = await seeded([{ role: "user", content: bigText(maxTotalChars - 100) }, { role: "assistant", content: "ok" }]);
    const more = { messages: [{ role: "user", content: bigText(200) }], ...SMALL };
    await refused(await call(trajectoryPath("a", long.id, "/turns"), { body: { ...more, stream: true } }), 413, "payload_too_large", "MAX_TOTAL_CHARS", sent(more));
    expect(await stored("a", long.id)).toEqual(long.before);
    expect((await getState("a", long.id)).turns).toHaveLength(1);
  });

  it("a Responses continuation (previous_response_id) counts the transcript it continues; nothing is stored", async () => {
    const r1res = await call("/v1/responses", { body: { instructions: uniqueSystem().content, input: "List the files.", ...SMALL } });
    const r1 = (await r1res.json()) as { id: string };
    expect(r1res.status, JSON.stringify(r1)).toBe(200);
    const trajectory = r1res.headers.get("x-trajectory-id")!;
    const before = await stored("a", trajectory);
    expect(before.messages).toHaveLength(3);
    // maxMessages - 1 new items: within the cap alone, past it with the 2 continued messages
    // (the stored user message and reply; the instructions are not carried over).
    const body = { previous_response_id: r1.id, input: manyMessages(maxMessages - 1), ...SMALL };
    await refused(await call("/v1/responses", { body }), 400, "limit_exceeded", `${maxMessages + 1} messages`, sent(body));
    expect(await stored("a", trajectory)).toEqual(before);
    expect((await getState("a", trajectory)).forks).toEqual([]);
  });
});

describe("limits: Responses and Messages shapes", () => {
  it("POST /v1/responses past each cap: OpenAI-shaped 400/413, no response stored", async () => {
    const tools = Array.from({ length: maxTools + 1 }, (_, i) => ({ type: "function", name: `t${i}`, parameters: { type: "object" } }));
    const cases = [
      { body: { input: manyMessages(maxMessages + 1), ...SMALL }, status: 400, code: "limit_exceeded", setting: "MAX_MESSAGES" },
      { body: { input: "hi", tools, ...SMALL }, status: 400, code: "limit_exceeded", setting: "MAX_TOOLS" },
      { body: { input: bigText(maxTotalChars + 1), ...SMALL }, status: 413, code: "payload_too_large", setting: "MAX_TOTAL_CHARS" },
    ];
    for (const c of cases) {
      const id = uid("lim-resp");
      await refused(await call("/v1/responses", { body: c.body, headers: { "x-trajectory-id": id } }), c.status, c.code, c.setting, sent(c.body));
      await expectNoTrajectory(id);
      await refused(await call("/v1/responses", { body: { ...c.body, store: false } }), c.status, c.code, c.setting, sent(c.body));
    }
  });

  it("POST /v1/messages and count_tokens past each cap: Anthropic-shaped 400/413, nothing stored", async () => {
    const tools = Array.from({ length: maxTools + 1 }, (_, i) => ({ name: `t${i}`, input_schema: { type: "object" } }));
    const cases = [
      { body: { model: MODEL, max_tokens: 2, messages: manyMessages(maxMessages + 1) }, status: 400, code: "limit_exceeded", type: "invalid_request_error", setting: "MAX_MESSAGES" },
      { body: { model: MODEL, max_tokens: 2, messages: [{ role: "user", content: "hi" }], tools }, status: 400, code: "limit_exceeded", type: "invalid_request_error", setting: "MAX_TOOLS" },
      { body: { model: MODEL, max_tokens: 2, messages: [{ role: "user", content: bigText(maxTotalChars + 1) }] }, status: 413, code: "payload_too_large", type: "request_too_large", setting: "MAX_TOTAL_CHARS" },
    ];
    for (const c of cases) {
      const id = uid("lim-msg");
      for (const [path, headers] of [["/v1/messages", { "x-trajectory-id": id }], ["/v1/messages", {}], ["/v1/messages/count_tokens", {}]] as const) {
        const res = await call(path, { tenant: null, headers: { "x-api-key": TENANTS.a.key, ...headers }, body: c.body });
        const text = await res.text();
        expect(res.status, text).toBe(c.status);
        const body = JSON.parse(text) as { type: string; error: { type: string; code: string; message: string } };
        expect(body.type).toBe("error");
        expect(body.error.type).toBe(c.type);
        expect(body.error.code).toBe(c.code);
        expect(body.error.message).toContain(c.setting);
      }
      await expectNoTrajectory(id);
    }
  });
});

describe("limits: MAX_HEADER_BYTES", () => {
  it("refuses headers past the cap with 431 headers_too_large on every route, before the key is checked", async () => {
    const huge = { "x-padding": "h".repeat(maxHeaderBytes) };
    for (const [path, tenant] of [["/healthz", null], ["/v1/models", null], ["/v1/models", "a"], [trajectoryPath("a"), "a"], ["/v1/pool", null], ["/nothing-here", null]] as const) {
      const body = await expectError(await call(path, { tenant, headers: huge }), 431, "headers_too_large");
      expect(body.error.message).toContain(`limit of ${maxHeaderBytes} bytes (MAX_HEADER_BYTES)`);
    }
    // Anthropic's shape on the Messages API's routes.
    const res = await call("/v1/messages", { tenant: null, headers: { ...huge, "x-api-key": TENANTS.a.key }, body: { model: MODEL, max_tokens: 1, messages: [{ role: "user", content: "hi" }] } });
    expect(res.status).toBe(431);
    expect(((await res.json()) as { error: { type: string; code: string } }).error).toMatchObject({ type: "request_too_large", code: "headers_too_large" });
    // A trajectory turn refused for its headers stores nothing.
    const id = uid("lim-hdr");
    await expectError(await chat({ messages: [{ role: "user", content: "hi" }], ...SMALL }, { headers: { ...huge, "x-trajectory-id": id } }), 431, "headers_too_large");
    await expectNoTrajectory(id);
  });

  it("counts names and values of all headers together: just under the cap passes", async () => {
    // Headers the request carries besides the padding: authorization (and nothing else on a GET).
    const auth = `Bearer ${TENANTS.a.key}`;
    const room = maxHeaderBytes - "authorization".length - auth.length - "x-padding".length;
    expect((await call("/v1/models", { headers: { "x-padding": "h".repeat(room) } })).status).toBe(200);
    await expectError(await call("/v1/models", { headers: { "x-padding": "h".repeat(room + 1) } }), 431, "headers_too_large");
    // Split over many headers, the same total is refused too.
    const split = Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`x-p${i}`, "h".repeat(Math.ceil(maxHeaderBytes / 64))]));
    await expectError(await call("/healthz", { tenant: null, headers: split }), 431, "headers_too_large");
  });
});
