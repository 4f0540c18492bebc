import { describe, expect, it } from "vitest";
import type { ChatMessage } from "../../protocol/messages";
import { call, chat, completion, createTrajectory, expectError, getState, replyOf, SMALL, sseData, stored, trajectoryPath, uid, uniqueSystem } from "./helpers";

describe("idempotency", () => {
  it("the same Idempotency-Key twice: the same completion, replayed, and the transcript grows once", async () => {
    const id = uid("idem");
    const key = uid("key");
    const messages: ChatMessage[] = [uniqueSystem(), { role: "user", content: "Create the file." }];
    const headers = { "x-trajectory-id": id, "idempotency-key": key };
    // Sampled (temperature 1, no seed): a second real turn would very likely differ.
    const sampling = { max_tokens: 8, temperature: 1 };
    const r1 = await chat({ messages, ...sampling }, { headers });
    expect(r1.headers.get("x-agent-edge-replayed")).toBeNull();
    const c1 = await completion(r1);
    const after1 = await stored("a", id);

    const r2 = await chat({ messages, ...sampling }, { headers });
    expect(r2.headers.get("x-agent-edge-replayed")).toBe("true");
    expect(r2.headers.get("x-agent-edge-turn")).toBe("1");
    const c2 = await completion(r2);
    expect(c2.choices[0]!.message).toEqual(c1.choices[0]!.message);
    expect(c2.choices[0]!.finish_reason).toBe(c1.choices[0]!.finish_reason);
    expect(c2.usage).toEqual(c1.usage);

    // Replayed as a stream too.
    const r3 = await chat({ messages, ...sampling, stream: true }, { headers });
    const data = sseData(await r3.text());
    expect(data.at(-1)).toBe("[DONE]");
    const content = data
      .slice(0, -1)
      .map((d) => (JSON.parse(d) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? "")
      .join("");
    expect(content).toBe(c1.choices[0]!.message.content);

    // The same key with another request is refused, and changes nothing.
    await expectError(await chat({ messages: [...messages, { role: "user", content: "different" }], ...sampling }, { headers }), 400, "invalid_request");

    const after = await stored("a", id);
    expect(after).toEqual(after1);
    expect(after.messages).toEqual([...messages, replyOf(c1)]);
    expect(after.turns).toHaveLength(1);

    // Another key is a new turn.
    const r4 = await chat({ messages: [...after.messages, { role: "user", content: "next" }], ...SMALL }, { headers: { ...headers, "idempotency-key": uid("key") } });
    expect(r4.headers.get("x-agent-edge-replayed")).toBeNull();
    expect(r4.headers.get("x-agent-edge-turn")).toBe("2");
    await completion(r4);
  });

  it("the trajectory URL's turns honour Idempotency-Key; a key over 256 characters is refused", async () => {
    const id = uid("idem-sess");
    await createTrajectory("a", id);
    const key = uid("key");
    const body = { messages: [{ role: "user", content: "append me once" }], max_tokens: 4, temperature: 1 };
    const c1 = await completion(await call(trajectoryPath("a", id, "/turns"), { body, headers: { "idempotency-key": key } }));
    const r2 = await call(trajectoryPath("a", id, "/turns"), { body, headers: { "idempotency-key": key } });
    expect(r2.headers.get("x-agent-edge-replayed")).toBe("true");
    expect((await completion(r2)).choices[0]!.message).toEqual(c1.choices[0]!.message);
    expect((await stored("a", id)).messages).toEqual([...body.messages, replyOf(c1)]);
    await expectError(await call(trajectoryPath("a", id, "/turns"), { body, headers: { "idempotency-key": "k".repeat(257) } }), 400, "invalid_request");
    expect((await getState("a", id)).turns).toHaveLength(1);
  });
});

describe("idempotency keys expire with their turn's age", () => {
  it("a key is remembered for the trajectory's last 64 turns (IDEMPOTENCY_TURNS): then the same key runs a new turn", async () => {
    const id = uid("idem-age");
    await createTrajectory("a", id);
    const turn = (content: string, key?: string) => call(trajectoryPath("a", id, "/turns"), { body: { messages: [{ role: "user", content }], max_tokens: 1, temperature: 0 }, headers: key ? { "idempotency-key": key } : {} });
    const keys = [uid("k1"), uid("k2"), uid("k3")];
    for (const [i, key] of keys.entries()) await completion(await turn(`keyed ${i}`, key));
    expect((await getState("a", id)).idempotency_keys).toBe(3);
    for (let i = 4; i <= 66; i++) await completion(await turn(`turn ${i}`));
    // After turn 66 the keys of turns 1 and 2 are gone; turn 3's is the oldest kept.
    expect((await getState("a", id)).idempotency_keys).toBe(1);
    const replay = await turn("keyed 2", keys[2]);
    expect(replay.headers.get("x-agent-edge-replayed")).toBe("true");
    expect(replay.headers.get("x-agent-edge-turn")).toBe("3");
    await completion(replay);
    const fresh = await turn("keyed 0", keys[0]);
    expect(fresh.headers.get("x-agent-edge-replayed")).toBeNull();
    expect(fresh.headers.get("x-agent-edge-turn")).toBe("67");
    await completion(fresh);
    const state = await getState("a", id);
    expect(state.turns).toHaveLength(67);
    expect(state.message_count).toBe(134);
  });
});

describe("concurrency", () => {
  it("two turns at once on one trajectory: one succeeds, the other gets 409 trajectory_busy (retryable)", async () => {
    const id = uid("busy");
    const headers = { "x-trajectory-id": id };
    const base: ChatMessage[] = [uniqueSystem(), { role: "user", content: "first" }];
    const c1 = await completion(await chat({ messages: base, ...SMALL }, { headers }));
    const before = await stored("a", id);
    // A long new message keeps the backend busy for a while (prefill), widening the overlap.
    const next: ChatMessage[] = [...before.messages, { role: "user", content: `second ${"please check every file in the repository; ".repeat(150)}` }];
    const [ra, rb] = await Promise.all([chat({ messages: next, ...SMALL }, { headers }), chat({ messages: next, ...SMALL }, { headers })]);
    const results = [ra, rb];
    const ok = results.filter((r) => r.status === 200);
    const busy = results.filter((r) => r.status === 409);
    expect(results.map((r) => r.status).sort()).toEqual([200, 409]);
    const body = await expectError(busy[0]!, 409, "trajectory_busy");
    expect(body.error.type).toBe("conflict_error");
    expect(busy[0]!.headers.get("retry-after")).toBe("1");
    const winner = await completion(ok[0]!);

    const after = await stored("a", id);
    expect(after.turns).toHaveLength(before.turns.length + 1);
    expect(after.messages).toEqual([...next, replyOf(winner)]);
    expect(before.messages).toEqual([...base, replyOf(c1)]);

    // Once the turn has finished, the next turn is served again.
    const retry = await chat({ messages: [...after.messages, { role: "user", content: "third" }], ...SMALL }, { headers });
    expect(retry.headers.get("x-agent-edge-mode")).toBe("delta");
    await completion(retry);
  });

  it("a streaming turn holds the trajectory until it ends; a trajectory-URL turn meanwhile is refused", async () => {
    const id = uid("busy-stream");
    await createTrajectory("a", id);
    const long = { role: "user", content: `go ${"describe the architecture in detail; ".repeat(150)}` };
    const [streamed, appended] = await Promise.all([
      call(trajectoryPath("a", id, "/turns"), { body: { messages: [long], ...SMALL, stream: true } }),
      call(trajectoryPath("a", id, "/turns"), { body: { messages: [long], ...SMALL } }),
    ]);
    const statuses = [streamed.status, appended.status].sort();
    expect(statuses).toEqual([200, 409]);
    const loser = streamed.status === 409 ? streamed : appended;
    const winner = streamed.status === 409 ? appended : streamed;
    await expectError(loser, 409, "trajectory_busy");
    await winner.text();
    const s = await stored("a", id);
    expect(s.turns).toHaveLength(1);
    expect(s.messages).toHaveLength(2);
  });

  it("DELETE while a turn streams: 409 trajectory_busy (not 404), and the trajectory stays", async () => {
    const id = uid("busy-delete");
    // Greedy on a random model: 256 tokens (no early end of sequence), so the turn outlasts the DELETE.
    const res = await chat({ messages: [{ role: "user", content: "Write a long story about a robot." }], max_tokens: 256, temperature: 0, stream: true }, { headers: { "x-trajectory-id": id } });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = decoder.decode((await reader.read()).value, { stream: true });
    const del = await call(trajectoryPath("a", id), { method: "DELETE" });
    expect(del.headers.get("retry-after")).toBe("1");
    await expectError(del, 409, "trajectory_busy");
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      text += decoder.decode(r.value, { stream: true });
    }
    expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
    expect(text).toContain('"finish_reason":"length"');
    const s = await stored("a", id);
    expect(s.turns).toHaveLength(1);
    expect(s.turns[0]!.completionTokens).toBe(256);
    // Once the turn has finished, DELETE works.
    expect((await call(trajectoryPath("a", id), { method: "DELETE" })).status).toBe(200);
    await expectError(await call(trajectoryPath("a", id)), 404, "not_found");
  });
});
