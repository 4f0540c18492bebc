import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sendTurn, TurnFailed } from "./turn-client";

/**
 * The turn client against canned answers of each API (a local HTTP server standing in for the
 * edge): streamed text, tool calls and usage parsed into one reply; refusals and cut streams into
 * `TurnFailed` with the status, error code and Retry-After a bench acts on.
 */
const sse = (...chunks: object[]) => [...chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`), "data: [DONE]\n\n"].join("");
const ANSWERS: Record<string, { status?: number; headers?: Record<string, string>; body: string }> = {
  "/v1/chat/completions": {
    headers: { "x-agent-edge-backend": "backend-1", "x-agent-edge-route": "pinned" },
    body: sse(
      { choices: [{ delta: { content: "Hel" } }] },
      { choices: [{ delta: { content: "lo" } }] },
      { choices: [{ delta: { tool_calls: [{ index: 0, id: "call_1", function: { name: "read", arguments: "{}" } }] } }] },
      { choices: [], usage: { prompt_tokens: 100, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 64 } } },
    ),
  },
  "/v1/messages": { body: sse({ type: "content_block_delta", delta: { type: "text_delta", text: "Hi" } }, { type: "message_stop" }) },
  "/v1/responses": { body: sse({ type: "response.output_text.delta", delta: "Yo" }, { type: "response.completed", response: { id: "resp_1", usage: { input_tokens: 7, output_tokens: 1 } } }) },
  "/v1/tenants/local/trajectories/t1/turns": { body: sse({ choices: [{ delta: { content: "cut" } }] }) },
  "/overloaded/v1/chat/completions": { status: 429, headers: { "retry-after": "2" }, body: JSON.stringify({ error: { code: "overloaded", message: "busy" } }) },
};

let server: Server;
let url: string;
beforeAll(async () => {
  server = createServer((req, res) => {
    const a = ANSWERS[req.url!] ?? { status: 404, body: "{}" };
    res.writeHead(a.status ?? 200, { "content-type": a.status ? "application/json" : "text/event-stream", ...a.headers });
    res.end(a.body);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

describe("sendTurn", () => {
  it("parses a streamed chat completion: text, tool calls, usage, the edge's headers", async () => {
    const r = await sendTurn({ edgeUrl: url, model: "m", trajectoryId: "t1", messages: [{ role: "user", content: "hi" }], maxTokens: 8, stream: true });
    expect(r).toMatchObject({ content: "Hello", promptTokens: 100, cachedTokens: 64, completionTokens: 3, backend: "backend-1", route: "pinned" });
    expect(r.message).toEqual({ role: "assistant", content: "Hello", tool_calls: [{ id: "call_1", type: "function", function: { name: "read", arguments: "{}" } }] });
    expect(r.ttftMs).toBeGreaterThan(0);
  });

  it("parses Messages and Responses streams", async () => {
    const messages = [{ role: "system" as const, content: "sys" }, { role: "user" as const, content: "hi" }];
    expect((await sendTurn({ edgeUrl: url, model: "m", via: "messages", messages, maxTokens: 8, stream: true })).content).toBe("Hi");
    expect(await sendTurn({ edgeUrl: url, model: "m", via: "responses", messages, maxTokens: 8, stream: true })).toMatchObject({ content: "Yo", responseId: "resp_1", promptTokens: 7 });
  });

  it("fails a chat or session stream that ends without usage as cut, a refusal with its status and Retry-After", async () => {
    const cut = await sendTurn({ edgeUrl: url, via: "session", trajectoryId: "t1", messages: [], maxTokens: 8, stream: true }).catch((e: unknown) => e);
    expect(cut).toBeInstanceOf(TurnFailed);
    expect((cut as TurnFailed).code).toBe("cut");
    const refused = await sendTurn({ edgeUrl: `${url}/overloaded`, messages: [], maxTokens: 8, stream: true }).catch((e: unknown) => e);
    expect((refused as TurnFailed).answer).toMatchObject({ status: 429, errorCode: "overloaded", retryAfter: "2" });
  });
});
