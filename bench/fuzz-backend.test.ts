import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SECRET_HEADER } from "../protocol/messages";
import { ROUTES } from "../protocol/routes";
import { fuzzBackend, fuzzCase } from "./fuzz-backend";
import { startFuzzBackend } from "./fuzz-bench";
import { tinyModelDir } from "../gpu-backend/model/testing/tiny-model";
/**
 * Seeded fuzzing of every backend route (issue 19; bench/fuzz-backend.ts): mutated and random
 * msgpack bodies, with and without the secret, against the real app and engine (tiny model). No
 * answer is a 5xx, every refusal carries a stable code, nothing answers without the secret, and
 * the backend serves a normal turn afterwards with its KV pool intact. Replayable by seed.
 */
const SECRET = "fuzz-secret";
let dir: string;
let backend: Awaited<ReturnType<typeof startFuzzBackend>>;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "agent-edge-fuzz-"));
  backend = await startFuzzBackend(await tinyModelDir(dir), SECRET);
}, 120_000);

afterAll(async () => {
  await backend?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

describe("backend fuzzing", () => {
  it("answers 1,500 seeded mutated and random requests with clean coded errors or valid answers, and serves on", async () => {
    const { app, engine } = backend;
    const findings = await fuzzBackend({ fetch: async (req) => app.fetch(req), secret: SECRET, seed: 19, cases: 1500 });
    expect(findings.failures, JSON.stringify(findings.failures.slice(0, 5))).toEqual([]);
    expect(findings).toMatchObject({ cases: 1500, crashes: 0, serverErrors: 0, uncoded: 0, unauthorized2xx: 0 });
    // The mix reached both refusals and accepted requests.
    expect(findings.byStatus["400"]).toBeGreaterThan(100);
    expect(findings.byStatus["401"]).toBeGreaterThan(10);
    expect(findings.byStatus["200"]).toBeGreaterThan(10);

    // Still serving: a normal generate completes, and nothing is left running or corrupt.
    const ok = await app.fetch(new Request(`http://backend.fuzz${ROUTES.backend.healthz}`));
    expect(ok.status).toBe(200);
    for (let i = 0; i < 100 && engine.numRunning + engine.numWaiting > 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(engine.numRunning + engine.numWaiting).toBe(0);
    engine.kv.checkInvariants();
  }, 300_000);

  it("builds each case from the seed and its number alone", () => {
    const a = fuzzCase(7, 123, SECRET);
    const b = fuzzCase(7, 123, SECRET);
    expect(b).toEqual(a);
    expect(fuzzCase(8, 123, SECRET)).not.toEqual(a);
    expect(a.unauthenticated || a.headers[SECRET_HEADER] === SECRET).toBe(true);
  });
});
