import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { ProtocolError } from "../../protocol/errors";
import { edgePath } from "../../protocol/routes";
import { errorResponse, retryAfter } from "./errors";

/** The one error mapping, through a Hono app: status, body code and the `retry-after` header. */
async function answer(path: string, err: ProtocolError): Promise<Response> {
  const app = new Hono();
  app.all("*", (c) => errorResponse(c, err));
  return app.request(path, { method: "POST" });
}

describe("errorResponse: retry-after", () => {
  it("answers an overloaded backend's estimate as the 429's retry-after, on both API shapes", async () => {
    const err = new ProtocolError("overloaded", "queue full", { retryAfterS: 7 });
    for (const path of [edgePath("openai", "chatCompletions"), edgePath("anthropic", "messages")]) {
      const res = await answer(path, err);
      expect(res.status).toBe(429);
      expect(res.headers.get("retry-after")).toBe("7");
      expect(JSON.stringify(await res.json())).toContain('"code":"overloaded"');
    }
  });

  it("keeps the estimate through a turn's error event (the frame's fields)", async () => {
    const event = new ProtocolError("overloaded", "queue full", { retryAfterS: 12 }).toFrame();
    expect((await answer("/v1/chat/completions", ProtocolError.fromFrame(event))).headers.get("retry-after")).toBe("12");
  });

  it("holds the estimate to 1..60 s and answers 1 without one", async () => {
    expect((await answer("/v1/chat/completions", new ProtocolError("overloaded", "x", { retryAfterS: 600 }))).headers.get("retry-after")).toBe("60");
    expect((await answer("/v1/chat/completions", new ProtocolError("overloaded", "x"))).headers.get("retry-after")).toBe("1");
    expect((await answer("/v1/chat/completions", new ProtocolError("backend_unavailable", "x"))).headers.get("retry-after")).toBe("1");
    expect(retryAfter(new ProtocolError("overloaded", "x", { retryAfterS: 0 }))).toBe("1");
  });

  it("sends no retry-after on an error that is not retryable", async () => {
    const res = await answer("/v1/chat/completions", new ProtocolError("invalid_request", "bad"));
    expect(res.status).toBe(400);
    expect(res.headers.get("retry-after")).toBeNull();
  });
});
