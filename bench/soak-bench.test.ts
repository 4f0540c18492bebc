import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runSoakBench } from "./soak-bench";
import { SOAK_KINDS } from "./soak-clients";
import { tinyModelDir } from "../gpu-backend/model/testing/tiny-model";

/**
 * The soak's 30-second version (`npm run bench -- soak` runs 64 clients for 5 minutes on the demo
 * model): 10 clients, two per API, on the tiny model through `wrangler dev` and 2 backends. No
 * error, every finished trajectory stored exactly as the client counted it (turns, messages, and
 * a session's idempotency keys cut to the last IDEMPOTENCY_TURNS=4 turns), nothing left on the
 * backends, every lease expired within LEASE_MAX_MS, memory sampled throughout. The stack's log
 * is bench/out/soak-test/soak-stack.log.
 */
const dir = mkdtempSync(join(tmpdir(), "agent-edge-soak-test-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("soak (30 s)", () => {
  it("runs every API for 30 s with no error and nothing lost or left behind", { timeout: 240_000 }, async () => {
    const model = await tinyModelDir(dir);
    const s = await runSoakBench({ trajectories: 10, seconds: 30, model, pauseMs: [100, 600], maxTokens: 8, sampleEveryMs: 5000, idleMs: 0, outDir: join(import.meta.dirname, "out", "soak-test") });
    console.log(JSON.stringify({ ...s, samples: s.samples.length }));
    expect(s.errorSamples).toEqual([]);
    expect(s.errors).toBe(0);
    expect(s.mismatchSamples).toEqual([]);
    for (const kind of SOAK_KINDS) expect(s.byKind[kind], kind).toBeGreaterThan(5);
    expect(s.streamed).toBeGreaterThan(0);
    expect(s.streamed).toBeLessThan(s.turns);
    expect(s.sequencesLeft).toBe(0);
    expect(s.queuedTokensLeft).toBe(0);
    expect(s.leasesExpiredAfterS).toBeGreaterThanOrEqual(0);
    expect(s.leasesExpiredAfterS).toBeLessThanOrEqual(15);
    expect(s.turnStates.every((n) => n <= 4096)).toBe(true);
    expect(s.samples.length).toBeGreaterThanOrEqual(6);
    expect(s.samples.every((x) => x.workerdMiB > 0 && x.backendsMiB.length === 2 && x.backendsMiB.every((m) => m > 0))).toBe(true);
  });
});
