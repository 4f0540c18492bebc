import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Stack } from "../scripts/stack";
import { chatTurn, trajectoryRecord } from "./support/edge-turns";
import { startTestStack, type TestStack } from "./support/stack-fixture";

/**
 * The pool in cells, end to end: two real backends registering by heartbeat with `wrangler dev`
 * set to one backend a cell (POOL_CELL_BACKENDS=1) and no static BACKEND_URLS, so each is in a
 * cell of its own (the directory object assigns them) and a cell's view holds only its backend,
 * and agent trajectories through the OpenAI API across both.
 */
describe("pool cells (wrangler dev, two backends, one a cell)", () => {
  let fixture: TestStack | undefined;
  let stack: Stack;
  const secret = () => ({ "x-agent-edge-secret": stack.secret });

  beforeAll(async () => {
    fixture = await startTestStack({ name: "cells", backends: 2, devtools: false, kvMemory: "64MiB", threads: 1, vars: { POOL_CELL_BACKENDS: "1", BACKEND_URLS: "" } });
    ({ stack } = fixture);
  });
  afterAll(() => fixture?.stop());

  const chat = async (trajectoryId: string, messages: unknown[]) => {
    const res = await chatTurn(stack, trajectoryId, { model: "tiny-llama-random", messages, max_tokens: 3, temperature: 0 });
    expect(res.status).toBe(200);
    return (await res.json()) as { choices: { message: { role: string; content: string } }[]; usage: { prompt_tokens_details: { cached_tokens: number } } };
  };
  const backendOf = async (id: string) => (await trajectoryRecord(stack, id)).turns.map((t) => t.backend);

  it("puts each registered backend in a cell of its own, and the pool route shows both cells", async () => {
    let cells: { name: string; backends: number }[] = [];
    for (let tries = 0; tries < 100; tries++) {
      const pool = (await (await fetch(`${stack.edgeUrl}/v1/pool`, { headers: secret() })).json()) as { cells: { name: string; backends: number }[] };
      cells = pool.cells;
      if (cells.length === 2) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(cells.map((c) => [c.name, c.backends]).sort()).toEqual([["pool", 1], ["pool-1", 1]]);
  });

  it("runs trajectories under several system prompts in their cells: every turn answered, each trajectory on one backend, a shared prompt's second trajectory where its blocks are", async () => {
    const prompts = Array.from({ length: 12 }, (_, i) => ({ role: "system", content: `Agent ${i} of the cells test. ${"Follow the rules of this agent. ".repeat(30)}` }));
    const used = new Set<string>();
    for (const [i, system] of prompts.entries()) {
      const messages: unknown[] = [system, { role: "user", content: `task ${i}` }];
      for (let turn = 0; turn < 3; turn++) {
        const c = await chat(`cells-${i}`, messages);
        messages.push(c.choices[0]!.message, { role: "user", content: `observation ${turn}` });
      }
      const backends = await backendOf(`cells-${i}`);
      expect(new Set(backends).size).toBe(1);
      used.add(backends[0]!);
      // A second trajectory under the same prompt goes where the first one's blocks are, and reuses them.
      const second = await chat(`cells-${i}-b`, [system, { role: "user", content: `another task ${i}` }]);
      expect((await backendOf(`cells-${i}-b`))[0]).toBe(backends[0]);
      expect(second.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
    }
    // Twelve prompts over two cells of equal weight (each cell one backend): both take some
    // (all in one: 2 x 2^-12 for the run's tenant salt).
    expect(used.size).toBe(2);
  });
});
