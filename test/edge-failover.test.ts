import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isPortFree, type Stack } from "../scripts/stack";
import { chatTurn, trajectoryRecord } from "./support/edge-turns";
import { startTestStack, type TestStack } from "./support/stack-fixture";

/**
 * Two real backend processes behind `wrangler dev`; the trajectory's backend is killed between
 * turns and in the middle of a streamed turn. The transcript lives in the Durable Object, so
 * another backend takes the turn in full and the trajectory goes on intact.
 */
describe("edge failover (two backends, one killed)", () => {
  let fixture: TestStack | undefined;
  let stack: Stack;
  let inspectorPort: number;

  beforeAll(async () => {
    fixture = await startTestStack({
      name: "failover",
      backends: 3,
      // As the benchmarks run it: wrangler dev without its devtools inspector.
      devtools: false,
      kvMemory: "64MiB",
      threads: 1,
    });
    ({ stack, inspectorPort } = fixture);
  });

  afterAll(() => fixture?.stop());

  const chat = (trajectoryId: string, messages: unknown[], extra: object = {}) =>
    chatTurn(stack, trajectoryId, { model: "tiny-llama-random", messages, max_tokens: 4, temperature: 0, ...extra });
  const state = (id: string) => trajectoryRecord(stack, id);
  const kill = (url: string) => {
    const part = stack.parts.find((p) => p.url === url);
    expect(part, `a backend at ${url}`).toBeDefined();
    part!.process.signalGroup("SIGKILL");
  };

  it("runs wrangler dev without its devtools inspector when asked: nothing listens on the inspector port", async () => {
    // The edge answers (the stack waited for /healthz), yet the port given to --inspector-port is
    // unbound: wrangler kept its inspector proxy off. With devtools on, wrangler listens there.
    expect((await fetch(`${stack.edgeUrl}/healthz`)).status).toBe(200);
    expect(await isPortFree(inspectorPort, "127.0.0.1")).toBe(true);
  });

  it("places a new trajectory on the backend that already caches its system prompt", async () => {
    const system = { role: "system", content: `You are the shared agent prompt. ${"Rules apply. ".repeat(40)}` };
    const first = await chat("placement-1", [system, { role: "user", content: "task one" }]);
    expect(first.status).toBe(200);
    await first.json();
    const holder = (await state("placement-1")).backend;
    // Several new trajectories with the same system prompt: each lands where it is cached.
    for (const id of ["placement-2", "placement-3", "placement-4"]) {
      const r = await chat(id, [system, { role: "user", content: `task ${id}` }]);
      expect(r.status).toBe(200);
      await r.json();
      const s = await state(id);
      expect(s.backend).toBe(holder);
      expect(s.turns[0]!.cached_tokens).toBeGreaterThan(0);
    }
  });

  it("moves a trajectory whose backend died between turns, with its transcript intact", async () => {
    const id = "failover-between";
    const messages: { role: string; content: string }[] = [
      { role: "system", content: "You are an agent. ".repeat(30) },
      { role: "user", content: "Start." },
    ];
    for (let turn = 1; turn <= 2; turn++) {
      const r = await chat(id, messages);
      expect(r.status).toBe(200);
      messages.push({ role: "assistant", content: ((await r.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content });
      messages.push({ role: "user", content: `step ${turn}` });
    }
    const before = await state(id);
    kill(before.backend);

    const r3 = await chat(id, messages);
    expect(r3.status).toBe(200);
    const after = await state(id);
    expect(after.turns).toHaveLength(3);
    expect(after.turns[2]).toMatchObject({ mode: "full", full_reason: "failover", route: "failover" });
    expect(after.turns[1]).toMatchObject({ route: "pinned" });
    expect(after.backend).not.toBe(before.backend);
    expect(after.message_count).toBe(messages.length + 1);

    // The next turn is a delta on the new backend again.
    messages.push({ role: "assistant", content: ((await r3.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content });
    messages.push({ role: "user", content: "step 3" });
    expect((await chat(id, messages)).status).toBe(200);
    const last = (await state(id)).turns[3]!;
    expect(last.mode).toBe("delta");
    expect(last.cached_tokens).toBeGreaterThan(0);
  });

  it("answers a retryable error when the backend dies mid-stream, stores nothing, and the retry completes", async () => {
    const id = "failover-mid-stream";
    const messages = [
      { role: "system", content: "You are an agent. ".repeat(30) },
      { role: "user", content: "Write a long answer." },
    ];
    const r1 = await chat(id, messages);
    expect(r1.status).toBe(200);
    await r1.json();
    const before = await state(id);

    // A long streamed turn; kill its backend as soon as the first token arrives.
    const next = [...messages, { role: "assistant", content: "x" }, { role: "user", content: "more" }];
    const res = await chat(id, next, { max_tokens: 3000, stream: true, temperature: 0 });
    expect(res.status).toBe(200);
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    let killed = false;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += value;
      if (!killed && text.includes('"content":"') && /"content":"[^"]/.test(text)) {
        kill(before.backend);
        killed = true;
      }
    }
    expect(killed).toBe(true);
    expect(text).toMatch(/"code":"backend_unavailable"/);
    expect(text).not.toContain("[DONE]");
    const mid = await state(id);
    expect(mid.turns).toHaveLength(1);
    expect(mid.message_count).toBe(before.message_count);

    // The client retries the same turn: another backend takes it in full.
    const retry = await chat(id, next, { max_tokens: 4 });
    expect(retry.status).toBe(200);
    const after = await state(id);
    expect(after.turns).toHaveLength(2);
    expect(after.turns[1]).toMatchObject({ full_reason: expect.stringMatching(/failover|diverged/) });
    expect(after.backend).not.toBe(before.backend);
  });
});
