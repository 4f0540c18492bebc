import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { ChatMessage } from "../../../protocol/messages";
import { call, chat, createTrajectory, expectError, getState, sessionPath, SMALL, stored, uid } from "../helpers";
import { CLOSED_BACKEND_URL } from "../tenants";

const MESSAGES: ChatMessage[] = [{ role: "user", content: "hello" }];

/** The "workers-backend-down" project: BACKEND_URLS points where nothing listens. */
describe("backend unavailable", () => {
  it("runs against a closed port", () => {
    expect(env.BACKEND_URLS).toBe(CLOSED_BACKEND_URL);
  });

  it("a stateless turn: 503 backend_unavailable, retryable (retry-after)", async () => {
    const res = await chat({ messages: MESSAGES, ...SMALL });
    expect(res.headers.get("retry-after")).toBe("1");
    const body = await expectError(res, 503, "backend_unavailable");
    expect(body.error.type).toBe("server_error");
    const streamed = await chat({ messages: MESSAGES, ...SMALL, stream: true });
    expect(streamed.headers.get("retry-after")).toBe("1");
    await expectError(streamed, 503, "backend_unavailable");
  });

  it("a trajectory turn: 503 backend_unavailable, and nothing is stored", async () => {
    const id = uid("down-chat");
    const res = await chat({ messages: MESSAGES, ...SMALL }, { headers: { "x-trajectory-id": id } });
    expect(res.headers.get("retry-after")).toBe("1");
    await expectError(res, 503, "backend_unavailable");
    const s = await stored("a", id);
    expect(s.messages).toEqual([]);
    expect(s.turns).toEqual([]);
    expect(s.meta?.stateId ?? null).toBeNull();
    // The object is free again: the next attempt fails the same way, not with trajectory_busy.
    await expectError(await chat({ messages: MESSAGES, ...SMALL, stream: true }, { headers: { "x-trajectory-id": id } }), 503, "backend_unavailable");
  });

  it("a session-URL turn: 503 backend_unavailable; the trajectory stays empty and can be deleted", async () => {
    const id = uid("down-sess");
    await createTrajectory("a", id);
    const res = await call(sessionPath("a", id, "/turns"), { body: { messages: MESSAGES, ...SMALL } });
    expect(res.headers.get("retry-after")).toBe("1");
    await expectError(res, 503, "backend_unavailable");
    const state = await getState("a", id);
    expect(state.turns).toEqual([]);
    expect(state.message_count).toBe(0);
    expect((await call(sessionPath("a", id), { method: "DELETE" })).status).toBe(200);
  });

  it("routes that need no backend still answer", async () => {
    expect((await call("/healthz", { tenant: null })).status).toBe(200);
    expect((await call("/v1/models")).status).toBe(200);
  });
});
