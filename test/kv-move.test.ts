import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Stack } from "../scripts/stack";
import { startTestStack, type TestStack } from "./support/stack-fixture";

/**
 * KV that follows the trajectory, end to end: two real backend processes behind `wrangler dev`,
 * routed round-robin so that every turn of a trajectory moves to the other backend while the one
 * it left is up. The Durable Object names the backend it leaves as the turn's `kvSource`; the new
 * backend pulls the blocks it lacks from there over HTTP (`--kv-pull always`: the tiny model
 * prefills so fast that the cost model would rightly compute instead), and the turn record says
 * what arrived. The transcript is unaffected.
 */
describe("a moved trajectory pulls its blocks from the backend it left", () => {
  let fixture: TestStack | undefined;
  let stack: Stack;
  const auth = { authorization: "Bearer sk-local-dev", "content-type": "application/json" };

  beforeAll(async () => {
    fixture = await startTestStack({
      name: "kv-move",
      backends: 2,
      devtools: false,
      kvMemory: "64MiB",
      threads: 1,
      backendArgs: ["--kv-pull", "always"],
      vars: { ROUTING_POLICY: "round-robin" },
    });
    ({ stack } = fixture);
  }, 600_000);

  afterAll(() => fixture?.stop());

  interface TurnView {
    turn: number;
    mode: string;
    full_reason: string | null;
    backend: string;
    route: string | null;
    prompt_tokens: number;
    cached_tokens: number;
    kv_pull: { outcome: string; from: string; missing_blocks: number; blocks: number; bytes: number; ms: number } | null;
  }

  it("turn after turn on alternating backends: each full turn pulls what it lacks from the backend it left, and reuses it", async () => {
    const id = `kv-move-${Date.now().toString(36)}`;
    const messages: { role: string; content: string }[] = [
      { role: "system", content: `You are an agent that moves. ${"Keep to the plan and report progress. ".repeat(16)}` },
      { role: "user", content: "Start." },
    ];
    for (let turn = 1; turn <= 3; turn++) {
      const r = await fetch(`${stack.edgeUrl}/v1/chat/completions`, {
        method: "POST",
        headers: { ...auth, "x-trajectory-id": id },
        body: JSON.stringify({ model: "tiny-llama-random", messages, max_tokens: 6, temperature: 0 }),
      });
      expect(r.status).toBe(200);
      messages.push({ role: "assistant", content: ((await r.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content });
      messages.push({ role: "user", content: `step ${turn}` });
    }
    const state = (await (await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories/${id}`, { headers: auth })).json()) as { message_count: number; turns: TurnView[] };
    const [t1, t2, t3] = state.turns as [TurnView, TurnView, TurnView];
    expect(state.message_count).toBe(messages.length - 1);
    expect(t1).toMatchObject({ mode: "full", full_reason: "first-turn", kv_pull: null });
    expect(new Set([t1.backend, t2.backend]).size).toBe(2);
    expect(t3.backend).toBe(t1.backend);
    const urlOf = (name: string) => stack.parts.find((p) => p.name === name)!.url;

    // Turn 2 lands on a backend with nothing cached: it pulls every full block of its prompt from turn 1's.
    expect(t2).toMatchObject({ mode: "full", full_reason: "backend-changed", route: "round-robin" });
    expect(t2.kv_pull).toMatchObject({ outcome: "pulled", from: urlOf(t1.backend) });
    const t2Blocks = Math.floor((t2.prompt_tokens - 1) / 16);
    expect(t2.kv_pull!.missing_blocks).toBe(t2Blocks);
    expect(t2.kv_pull!.blocks).toBeGreaterThanOrEqual(Math.floor(t1.prompt_tokens / 16)); // at least turn 1's prompt
    expect(t2.kv_pull!.bytes).toBeGreaterThan(0);
    expect(t2.cached_tokens).toBe(t2.kv_pull!.blocks * 16);

    // Turn 3 is back on turn 1's backend, which holds turn 1's prompt and reply: it asks turn 2's
    // backend only for what follows. Turn 2's backend computed its chain from the re-rendered
    // transcript, while turn 3 here extends turn 1's state with the reply's generated ids; where
    // the tiny random model's reply does not re-tokenize to its own ids, the two chains part at
    // the reply and the holder has nothing past it (`not-held`), and the turn computes the rest.
    expect(t3).toMatchObject({ mode: "full", full_reason: "backend-changed" });
    expect(t3.kv_pull).toMatchObject({ from: urlOf(t2.backend), outcome: expect.stringMatching(/^(pulled|not-held)$/) });
    expect(t3.kv_pull!.missing_blocks).toBeLessThan(Math.floor((t3.prompt_tokens - 1) / 16));
    expect(t3.cached_tokens).toBeGreaterThanOrEqual(Math.floor(t1.prompt_tokens / 16) * 16);
  });
});

/**
 * Drain, end to end: a backend asked to drain (`POST /v1/drain`; SIGTERM does the same) while a
 * turn streams on it finishes that turn, reports `draining` in its heartbeats, learns its peers
 * from the pool's reply and pushes its trajectories' blocks there (the turn in flight too, once it
 * ends), then exits on its own once idle. The trajectory's next turn, after the exit, runs on the
 * other backend and reuses the pushed blocks. Nothing is lost or repeated.
 */
describe("draining a backend: it pushes its trajectories' blocks to a peer and exits when idle; the cache survives it", () => {
  let fixture: TestStack | undefined;
  let stack: Stack;
  const auth = { authorization: "Bearer sk-local-dev", "content-type": "application/json" };

  beforeAll(async () => {
    fixture = await startTestStack({ name: "kv-drain", backends: 2, devtools: false, kvMemory: "64MiB", threads: 1, backendArgs: ["--kv-pull", "always", "--drain-grace", "3000"] });
    ({ stack } = fixture);
  }, 600_000);

  afterAll(() => fixture?.stop());

  it("finishes the turn in flight, pushes its blocks, exits, and the next turn elsewhere reuses them", async () => {
    const id = `kv-drain-${Date.now().toString(36)}`;
    const messages: { role: string; content: string }[] = [
      { role: "system", content: `You are an agent on a backend about to drain. ${"Keep to the plan and report progress. ".repeat(16)}` },
      { role: "user", content: "Start." },
    ];
    const chat = (extra: object) =>
      fetch(`${stack.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { ...auth, "x-trajectory-id": id }, body: JSON.stringify({ model: "tiny-llama-random", messages, temperature: 0, ...extra }) });
    const state = async () =>
      (await (await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories/${id}`, { headers: auth })).json()) as {
        message_count: number;
        backend: string;
        turns: { backend: string; route: string | null; mode: string; prompt_tokens: number; cached_tokens: number; kv_pull: { outcome: string; from: string; blocks: number } | null }[];
      };

    const first = await chat({ max_tokens: 6 });
    expect(first.status).toBe(200);
    messages.push({ role: "assistant", content: ((await first.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content }, { role: "user", content: "Go on, at length." });
    const holderUrl = (await state()).backend;
    const holder = stack.parts.find((p) => p.url === holderUrl)!;

    // A long streamed turn; the drain starts after its first chunk.
    const streamed = await chat({ max_tokens: 400, stream: true });
    expect(streamed.status).toBe(200);
    const reader = streamed.body!.getReader();
    let sse = "";
    let drained: Response | undefined;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      sse += new TextDecoder().decode(value);
      if (!drained && sse.includes('"content"')) drained = await fetch(`${holderUrl}/v1/drain`, { method: "POST", headers: { "x-agent-edge-secret": stack.secret } });
    }
    expect(drained?.status).toBe(200);
    expect(((await drained!.json()) as { draining: boolean }).draining).toBe(true);
    expect(sse).toContain('"finish_reason":"length"');
    expect(sse).toContain("data: [DONE]");
    const text = sse
      .split("\n")
      .filter((l) => l.startsWith("data: {"))
      .map((l) => (JSON.parse(l.slice(6)) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? "")
      .join("");
    messages.push({ role: "assistant", content: text }, { role: "user", content: "Now wrap up." });

    // The pool sees the drain in the holder's heartbeats.
    const deadline = Date.now() + 15_000;
    for (;;) {
      const view = (await (await fetch(`${stack.edgeUrl}/v1/pool`, { headers: { "x-agent-edge-secret": stack.secret } })).json()) as { backends: { url: string; up: boolean; draining?: boolean }[] };
      if (view.backends.some((b) => b.url === holderUrl && b.up && b.draining)) break;
      if (Date.now() > deadline) throw new Error(`the pool never reported ${holderUrl} draining: ${JSON.stringify(view)}`);
      await new Promise((r) => setTimeout(r, 200));
    }

    // Idle for its grace (3 s) after pushing, the drained backend exits by itself, cleanly.
    const exit = await Promise.race([holder.process.exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), 30_000))]);
    expect(exit, "the drained backend exited by itself").toBeDefined();
    expect(exit!.code).toBe(0);

    // The next turn, with the holder gone: on the other backend, reusing the pushed blocks,
    // nothing pulled (there is no one to pull from). A full turn re-tokenizes the replies, and
    // the random model's do not round-trip, so its reuse ends at the first reply: turn 1's prompt.
    const third = await chat({ max_tokens: 6 });
    expect(third.status).toBe(200);
    await third.json();
    const s = await state();
    expect(s.turns).toHaveLength(3);
    expect(s.message_count).toBe(messages.length + 1);
    expect(s.turns[1]!.backend).toBe(holder.name);
    expect(s.turns[2]).toMatchObject({ mode: "full", kv_pull: null });
    expect(s.turns[2]!.backend).not.toBe(holder.name);
    expect(s.turns[2]!.cached_tokens).toBeGreaterThanOrEqual(Math.floor(s.turns[0]!.prompt_tokens / 16) * 16);
    expect(s.backend).not.toBe(holderUrl);
  });
});
