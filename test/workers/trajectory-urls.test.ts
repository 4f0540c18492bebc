import { describe, expect, it } from "vitest";
import type { ChatMessage } from "../../protocol/messages";
import { call, completion, createTrajectory, expectError, getState, replyOf, SMALL, stored, trajectoryPath, uid, uniqueSystem } from "./helpers";

describe("trajectory URLs", () => {
  it("POST creates (201 with url and location), the same id again answers 200", async () => {
    const id = uid("sess-create");
    const res = await call(trajectoryPath("a"), { body: { id } });
    expect(res.status).toBe(201);
    const body = (await res.json()) as { object: string; id: string; tenant: string; url: string; created_at: string };
    expect(body.object).toBe("trajectory");
    expect(body.id).toBe(id);
    expect(body.tenant).toBe("tenant-a");
    expect(new URL(body.url).pathname).toBe(`/v1/tenants/tenant-a/trajectories/${id}`);
    expect(res.headers.get("location")).toBe(body.url);
    expect(Number.isNaN(Date.parse(body.created_at))).toBe(false);

    const again = await call(trajectoryPath("a"), { body: { id } });
    expect(again.status).toBe(200);
    const body2 = (await again.json()) as { id: string; created_at: string };
    expect(body2.id).toBe(id);
    expect(body2.created_at).toBe(body.created_at);

    const state = await getState("a", id);
    expect(state).toMatchObject({ object: "trajectory", id, tenant: "tenant-a", message_count: 0, backend: null, turns: [] });
  });

  it("POST without a body generates an id; a bad id is refused", async () => {
    const res = await call(trajectoryPath("a"), { method: "POST" });
    expect(res.status).toBe(201);
    const body = (await res.json()) as { id: string };
    expect(body.id).toMatch(/^traj_[0-9a-f]{32}$/);
    expect((await getState("a", body.id)).id).toBe(body.id);
    await expectError(await call(trajectoryPath("a"), { body: { id: "has spaces/and slashes" } }), 400, "invalid_request");
    await expectError(await call(trajectoryPath("a"), { body: { id: "x".repeat(129) } }), 400, "invalid_request");
  });

  it("GET state reports each turn's tokens, timings, backend and finish reason", async () => {
    const id = uid("sess-state");
    await createTrajectory("a", id);
    const first: ChatMessage[] = [uniqueSystem(), { role: "user", content: "Show me the diff." }];
    const r1 = await call(trajectoryPath("a", id, "/turns"), { body: { messages: first, ...SMALL } });
    expect(r1.headers.get("x-trajectory-id")).toBe(id);
    const c1 = await completion(r1);

    const state = await getState("a", id);
    expect(state.message_count).toBe(3);
    expect(state.backend).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(state.turns).toHaveLength(1);
    const t = state.turns[0]!;
    expect(t.turn).toBe(1);
    expect(t.mode).toBe("full");
    expect(t.full_reason).toBe("first-turn");
    expect(t.prompt_tokens).toBe(c1.usage.prompt_tokens);
    expect(t.cached_tokens).toBe(c1.usage.prompt_tokens_details.cached_tokens);
    expect(t.cached_tokens + t.computed_tokens).toBe(t.prompt_tokens);
    expect(t.completion_tokens).toBe(c1.usage.completion_tokens);
    expect(t.completion_tokens).toBeGreaterThanOrEqual(1);
    expect(t.ttft_ms).toBeGreaterThan(0);
    expect(t.backend_ttft_ms).toBeGreaterThan(0);
    expect(t.total_ms).toBeGreaterThanOrEqual(t.ttft_ms);
    expect(typeof t.backend).toBe("string");
    expect(t.backend.length).toBeGreaterThan(0);
    // The backend's reason ("stop" at end of sequence, "length" at max_tokens); OpenAI's is the same word here.
    expect(["stop", "length"]).toContain(t.finish_reason);
    expect(t.finish_reason).toBe(c1.choices[0]!.finish_reason);
    expect(t.request_bytes).toBeGreaterThan(100);
    expect(Number.isNaN(Date.parse(t.started_at))).toBe(false);
  });

  it("POST /turns appends only the new messages (a delta turn)", async () => {
    const id = uid("sess-append");
    await createTrajectory("a", id);
    const first: ChatMessage[] = [uniqueSystem(), { role: "user", content: "Open main.ts." }];
    const c1 = await completion(await call(trajectoryPath("a", id, "/turns"), { body: { messages: first, ...SMALL } }));
    const next: ChatMessage = { role: "user", content: "Now close it." };
    const r2 = await call(trajectoryPath("a", id, "/turns"), { body: { messages: [next], ...SMALL } });
    expect(r2.headers.get("x-agent-edge-mode")).toBe("delta");
    const c2 = await completion(r2);
    expect(c2.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);

    const s = await stored("a", id);
    expect(s.messages).toEqual([...first, replyOf(c1), next, replyOf(c2)]);
    const state = await getState("a", id);
    expect(state.turns.map((t) => [t.turn, t.mode, t.full_reason])).toEqual([
      [1, "full", "first-turn"],
      [2, "delta", null],
    ]);
    // Why each turn went where it did: placed (the one static backend), then kept there.
    expect(["least-loaded", "prefix"]).toContain(state.turns[0]!.route);
    expect(state.turns[1]!.route).toBe("pinned");
    // The delta turn sent the backend only the new message, not the transcript.
    expect(state.turns[1]!.request_bytes).toBeLessThan(state.turns[0]!.request_bytes);
  });

  it("POST /turns on a trajectory that does not exist answers 404", async () => {
    await expectError(await call(trajectoryPath("a", uid("sess-missing"), "/turns"), { body: { messages: [{ role: "user", content: "hi" }], ...SMALL } }), 404, "not_found");
    await expectError(await call(trajectoryPath("a", uid("sess-missing"))), 404, "not_found");
  });

  it("DELETE ends the trajectory: then GET answers 404, and a second DELETE too", async () => {
    const id = uid("sess-delete");
    await createTrajectory("a", id);
    await completion(await call(trajectoryPath("a", id, "/turns"), { body: { messages: [{ role: "user", content: "hi" }], ...SMALL } }));
    const res = await call(trajectoryPath("a", id), { method: "DELETE" });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ object: "trajectory.deleted", id, deleted: true });
    await expectError(await call(trajectoryPath("a", id)), 404, "not_found");
    await expectError(await call(trajectoryPath("a", id), { method: "DELETE" }), 404, "not_found");
    const s = await stored("a", id);
    expect(s).toEqual({ meta: null, messages: [], turns: [] });
  });
});
