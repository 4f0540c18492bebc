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
