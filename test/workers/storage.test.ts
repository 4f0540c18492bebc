import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { TrajectoryStore } from "../../durable-objects/trajectory/trajectory-store";
import type { ChatMessage } from "../../protocol/messages";
import { call, chat, completion, createTrajectory, expectError, replyOf, seededTurn, SMALL, stored, stubOf, trajectoryPath, uid, uniqueSystem } from "./helpers";

/** PART_CHARS in durable-objects/trajectory/trajectory-store.ts: a message's JSON is split into rows of this many characters. */
const PART_CHARS = 256 * 1024;

describe("Durable Object storage of long transcripts", () => {
  it("~200 messages round-trip exactly through SQLite (after eviction) and extend with a delta turn", async () => {
    const id = uid("store-200");
    const headers = { "x-trajectory-id": id };
    const messages: ChatMessage[] = [uniqueSystem(2)];
    for (let i = 0; i < 99; i++) {
      messages.push({ role: "user", content: `u${i}` });
      messages.push(
        i % 10 === 3
          ? // Ids and arguments already canonical (positional `call_k`, sorted JSON): stored as sent.
            { role: "assistant", content: null, tool_calls: [{ id: `call_${(i - 3) / 10}`, type: "function", function: { name: "ls", arguments: `{"dir":"d${i}"}` } }] }
          : { role: "assistant", content: `a${i} ünïcödé 🚀` },
      );
      if (i % 10 === 3) messages.push({ role: "tool", tool_call_id: `call_${(i - 3) / 10}`, content: `f${i}.ts` });
    }
    messages.push({ role: "user", content: "last" });
    expect(messages.length).toBeGreaterThanOrEqual(200);
    const c1 = await completion(await chat({ messages, ...SMALL }, { headers }));
    expect(c1.usage.prompt_tokens).toBeLessThan(4096);
    const expected = [...messages, replyOf(c1)];

    // A fresh instance reads the transcript back from SQLite.
    await evictDurableObject(stubOf("a", id));
    expect(await stubOf("a", id).messages()).toEqual(expected);
    expect((await stored("a", id)).messages).toEqual(expected);

    const next: ChatMessage[] = [...expected, { role: "user", content: "one more" }];
    const r2 = await chat({ messages: next, ...SMALL }, { headers });
    expect(r2.headers.get("x-agent-edge-mode")).toBe("delta");
    const c2 = await completion(r2);
    expect(c2.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(c1.usage.prompt_tokens / 2);
    expect((await stored("a", id)).messages).toEqual([...next, replyOf(c2)]);
  });

  it("a ~1 MiB message is stored across rows (> PART_CHARS) and reads back exactly, surrogate pairs included", async () => {
    const id = uid("store-1mb");
    await createTrajectory("a", id);
    // 262,144 emoji: 1 MiB of UTF-8, 524,288 UTF-16 units; after the 27 characters before them in
    // the JSON, every part boundary falls inside a surrogate pair.
    const big: ChatMessage = { role: "user", content: `a${"😀".repeat(262_144)}` };
    const bigJson = JSON.stringify(big);
    for (let at = PART_CHARS; at < bigJson.length; at += PART_CHARS) {
      expect(bigJson.charCodeAt(at - 1)).toBe(0xd83d);
      expect(bigJson.charCodeAt(at)).toBe(0xde00);
    }
    const ascii: ChatMessage = { role: "tool", tool_call_id: "call_1", content: "x".repeat(PART_CHARS * 3 + 5) };
    const transcript: ChatMessage[] = [{ role: "system", content: "s" }, big, { role: "assistant", content: "ok" }, ascii, { role: "assistant", content: "done" }];
    const rows = await runInDurableObject(stubOf("a", id), (_instance, state) => {
      const store = new TrajectoryStore(state.storage);
      store.commitTurn(seededTurn(transcript));
      return state.storage.sql.exec<{ idx: number; parts: number }>(`SELECT idx, COUNT(*) AS parts FROM messages GROUP BY idx ORDER BY idx`).toArray();
    });
    expect(rows.map((r) => r.parts)).toEqual([1, Math.ceil(bigJson.length / PART_CHARS), 1, 4, 1]);
    expect(rows[1]!.parts).toBeGreaterThan(1);

    await evictDurableObject(stubOf("a", id));
    const back = await stubOf("a", id).messages();
    expect(back).not.toBeNull();
    expect(back!.length).toBe(transcript.length);
    expect(back![1]!.content!.length).toBe(big.content!.length);
    expect(back![1]!.content === big.content).toBe(true);
    expect(back).toEqual(transcript);
  });

  it("a ~1 MB message over the model's context is refused (context_length_exceeded) and the stored transcript is unchanged", async () => {
    const id = uid("store-huge");
    const headers = { "x-trajectory-id": id };
    const base: ChatMessage[] = [uniqueSystem(), { role: "user", content: "start" }];
    const c1 = await completion(await chat({ messages: base, ...SMALL }, { headers }));
    const before = await stored("a", id);
    expect(before.messages).toEqual([...base, replyOf(c1)]);

    const huge: ChatMessage = { role: "user", content: "word ".repeat(200_000) };
    expect(JSON.stringify(huge).length).toBeGreaterThan(PART_CHARS * 3);
    const body = await expectError(await chat({ messages: [...before.messages, huge], ...SMALL }, { headers }), 400, "context_length_exceeded");
    expect(body.error.message).toMatch(/context/);
    expect(await stored("a", id)).toEqual(before);

    // The same as an append turn (its trajectory URL's /turns), streaming: the error comes before any chunk.
    const res = await call(trajectoryPath("a", id, "/turns"), { body: { messages: [huge], ...SMALL, stream: true } });
    await expectError(res, 400, "context_length_exceeded");
    expect(await stored("a", id)).toEqual(before);

    // The trajectory still works, as a delta on the old state.
    const r3 = await chat({ messages: [...before.messages, { role: "user", content: "shorter" }], ...SMALL }, { headers });
    expect(r3.headers.get("x-agent-edge-mode")).toBe("delta");
    await completion(r3);
  });

  it("stores the short hashes of each turn's prompt blocks with the turn, and only when it commits", async () => {
    const id = uid("store-hashes");
    const headers = { "x-trajectory-id": id };
    const hashesOf = () => runInDurableObject(stubOf("a", id), (_instance, state) => new TrajectoryStore(state.storage).promptBlockHashes());
    const base: ChatMessage[] = [uniqueSystem(10), { role: "user", content: "start" }];
    const c1 = await completion(await chat({ messages: base, ...SMALL }, { headers }));
    const h1 = await hashesOf();
    expect(h1.length).toBe(Math.floor(c1.usage.prompt_tokens / 16));
    expect(h1.every((h) => /^[0-9a-f]{16}$/.test(h))).toBe(true);
    // The next (delta) turn's prompt extends this one: its hashes start with the same ones.
    const next: ChatMessage[] = [...base, replyOf(c1), { role: "user", content: "more ".repeat(40) }];
    const c2 = await completion(await chat({ messages: next, ...SMALL }, { headers }));
    const h2 = await hashesOf();
    expect(h2.length).toBe(Math.floor(c2.usage.prompt_tokens / 16));
    expect(h2.length).toBeGreaterThan(h1.length);
    expect(h2.slice(0, h1.length)).toEqual(h1);
    // A turn that fails writes nothing: the hashes stay those of the last committed turn.
    const huge: ChatMessage = { role: "user", content: "word ".repeat(20_000) };
    await expectError(await chat({ messages: [...next, replyOf(c2), huge], ...SMALL }, { headers }), 400, "context_length_exceeded");
    expect(await hashesOf()).toEqual(h2);
  });
});
