import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { SECRET_HEADER, type ChatMessage, type Heartbeat } from "../../../protocol/messages";
import { poolOf } from "../../../durable-objects/pool/pool-do";
import { edgeSettings } from "../../../durable-objects/settings";
import { MODELS_TTL_MS } from "../../../src/http/models";
import { call, chat, createTrajectory, expectError, getState, SMALL, stored, trajectoryPath, uid } from "../helpers";
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

  it("a trajectory-URL turn: 503 backend_unavailable; the trajectory stays empty and can be deleted", async () => {
    const id = uid("down-sess");
    await createTrajectory("a", id);
    const res = await call(trajectoryPath("a", id, "/turns"), { body: { messages: MESSAGES, ...SMALL } });
    expect(res.headers.get("retry-after")).toBe("1");
    await expectError(res, 503, "backend_unavailable");
    const state = await getState("a", id);
    expect(state.turns).toEqual([]);
    expect(state.message_count).toBe(0);
    expect((await call(trajectoryPath("a", id), { method: "DELETE" })).status).toBe(200);
  });

  it("GET /v1/models: 503 backend_unavailable, retryable, while no backend serves a model", async () => {
    const res = await call("/v1/models");
    expect(res.headers.get("retry-after")).toBe("1");
    const body = await expectError(res, 503, "backend_unavailable");
    expect(body.error.type).toBe("server_error");
    expect(body.error.message).toMatch(/no backend is up/);
    // Not a cached answer of the first call: the same again.
    await expectError(await call("/v1/models", { tenant: "b" }), 503, "backend_unavailable");
    // The key is still checked first.
    await expectError(await call("/v1/models", { tenant: null }), 401, "unauthorized");
  });

  it("GET /v1/models lists a registered backend's model while it heartbeats, and answers 503 again within MODELS_TTL_MS of it going down", async () => {
    const pool = poolOf(env);
    // Nothing listens there either: only its heartbeat says it is up.
    const beat: Heartbeat = { id: "models-registered", url: "http://127.0.0.1:2", model: "model-from-heartbeat", kvCapacityBlocks: 64, running: 0, waiting: 0, kvUsage: 0, tokensPerS: 0 };
    try {
      const res = await call("/v1/pool/heartbeat", { tenant: null, body: beat, headers: { [SECRET_HEADER]: env.AGENT_EDGE_SECRET! } });
      expect(res.status).toBe(200);
      // A list cached before the beat may be answered for up to MODELS_TTL_MS.
      await new Promise((r) => setTimeout(r, MODELS_TTL_MS + 100));
      const up = await call("/v1/models");
      expect(up.status).toBe(200);
      expect(((await up.json()) as { data: { id: string }[] }).data.map((m) => m.id)).toEqual(["model-from-heartbeat"]);
      // Silent for longer than POOL_DOWN_AFTER_MS: down, and no longer listed once the cache expires.
      await runInDurableObject(pool, (_instance, state) => {
        state.storage.sql.exec(`UPDATE backends SET last_seen_ms = ? WHERE id = ?`, Date.now() - edgeSettings(env).poolDownAfterMs - 1000, beat.id);
      });
      await new Promise((r) => setTimeout(r, MODELS_TTL_MS + 100));
      await expectError(await call("/v1/models"), 503, "backend_unavailable");
    } finally {
      await pool.remove(beat.id);
    }
  });

  it("routes that need no backend still answer", async () => {
    expect((await call("/healthz", { tenant: null })).status).toBe(200);
  });
});
