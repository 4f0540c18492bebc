import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Engine } from "../gpu-backend/engine/engine";
import { materializeTinyModel } from "../gpu-backend/model/checkpoint/demo-model";
import { createBackendApp } from "../gpu-backend/server/app";
import { Drain } from "../gpu-backend/server/drain";
import { testEngine } from "../gpu-backend/server/testing/test-engine";
import { fuzzBackend, type FuzzFindings } from "./fuzz-backend";
import { fuzzEdge, type EdgeFuzzContext, type EdgeFuzzFindings } from "./fuzz-edge";
import { note } from "./kit/progress";
import { startBenchStack } from "./kit/stack";

/**
 * `npm run bench -- fuzz [--cases N] [--seed S] [--json]`: N (10,000) seeded cases against every
 * backend route of a real backend app and engine (tiny model, in process; bench/fuzz-backend.ts),
 * then N against every edge JSON route through `wrangler dev` and a backend process
 * (bench/fuzz-edge.ts). A failing case replays with `fuzzCase(S, index)` / `edgeFuzzCase(S, index, ctx)`.
 * The last line's `cases`, `crashes`, `serverErrors` and `trajectoriesChangedByRefusals` add up both.
 */
export interface FuzzSummary {
  seed: number;
  cases: number;
  crashes: number;
  serverErrors: number;
  trajectoriesChangedByRefusals: number;
  backend: FuzzFindings & { wallS: number };
  edge: EdgeFuzzFindings & { wallS: number };
}

export async function runFuzzBench(o: { cases?: number; seed?: number }): Promise<FuzzSummary> {
  const cases = o.cases ?? 10_000;
  const seed = o.seed ?? 1;
  const dir = mkdtempSync(join(tmpdir(), "agent-edge-fuzz-bench-"));
  try {
    const modelDir = await materializeTinyModel(join(dir, "tiny"));
    const backend = await fuzzBackendInProcess(modelDir, cases, seed);
    const edge = await fuzzEdgeStack(modelDir, cases, seed);
    return {
      seed,
      cases: backend.cases + edge.cases,
      crashes: backend.crashes + edge.crashes,
      serverErrors: backend.serverErrors + edge.serverErrors,
      trajectoriesChangedByRefusals: edge.trajectoriesChangedByRefusals,
      backend,
      edge,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A real backend app and engine on the model in `modelDir` (cpu, 64 blocks), in process: what the backend fuzzing runs against. */
export async function startFuzzBackend(modelDir: string, secret: string): Promise<{ app: ReturnType<typeof createBackendApp>; engine: Engine; dispose: () => Promise<void> }> {
  const { engine, executor } = await testEngine({ modelDir, numBlocks: 64, backendId: "fuzz", transfer: { secret, timeoutMs: 2000 } });
  return { app: createBackendApp({ engine, secret, backendId: "fuzz", drain: new Drain() }), engine, dispose: () => executor.dispose() };
}

async function fuzzBackendInProcess(modelDir: string, cases: number, seed: number): Promise<FuzzFindings & { wallS: number }> {
  const secret = "fuzz-bench-secret";
  const { app, engine, dispose } = await startFuzzBackend(modelDir, secret);
  const t0 = performance.now();
  note("fuzz", `backend: ${cases} cases, seed ${seed}, against every backend route (${engine.modelId}, in process)`);
  const findings = await fuzzBackend({ fetch: async (req) => app.fetch(req), secret, seed, cases, onProgress: (n) => note("fuzz", `backend: ${n}/${cases} cases`) });
  engine.kv.checkInvariants();
  await dispose();
  return { ...findings, wallS: secondsSince(t0) };
}

async function fuzzEdgeStack(modelDir: string, cases: number, seed: number): Promise<EdgeFuzzFindings & { wallS: number }> {
  note("fuzz", "edge: starting a backend and wrangler dev");
  // Two tenants, so a key is also tried on the other tenant's routes.
  const tenants = { "fuzz-a": "sk-fuzz-tenant-a-0123456789", "fuzz-b": "sk-fuzz-tenant-b-9876543210" };
  const apiKeys = JSON.stringify(Object.fromEntries(Object.entries(tenants).map(([name, key]) => [createHash("sha256").update(key).digest("hex"), name])));
  const stack = await startBenchStack({ name: "fuzz", backends: 1, model: modelDir, backend: { kvMemory: "64MiB", threads: 1 }, edge: { vars: { API_KEYS: apiKeys } } });
  try {
    const headers = { authorization: `Bearer ${tenants["fuzz-a"]}`, "content-type": "application/json" };
    const probe = `fuzz-probe-${seed}`;
    const model = ((await (await fetch(`${stack.edgeUrl}/v1/models`, { headers })).json()) as { data: { id: string }[] }).data[0]!.id;
    const first = await fetch(`${stack.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { ...headers, "x-trajectory-id": probe }, body: JSON.stringify({ model, messages: [{ role: "user", content: "Start." }], max_tokens: 2, temperature: 0 }) });
    if (!first.ok) throw new Error(`the probe trajectory's first turn answered ${first.status}: ${await first.text()}`);
    await first.arrayBuffer();
    const ctx: EdgeFuzzContext = { tenant: "fuzz-a", key: tenants["fuzz-a"], otherTenant: "fuzz-b", otherKey: tenants["fuzz-b"], model, probeTrajectory: probe };
    const state = async () => {
      const s = (await (await fetch(`${stack.edgeUrl}/v1/tenants/fuzz-a/trajectories/${probe}`, { headers })).json()) as { message_count: number; turns: unknown[] };
      return `${s.message_count}/${s.turns.length}`;
    };
    const t0 = performance.now();
    note("fuzz", `edge: ${cases} cases, seed ${seed}, against every edge route (${model})`);
    const findings = await fuzzEdge({ fetch: (req) => fetch(req), base: stack.edgeUrl, ctx, seed, cases, state, onProgress: (n) => note("fuzz", `edge: ${n}/${cases} cases`) });
    return { ...findings, wallS: secondsSince(t0) };
  } finally {
    await stack.close();
  }
}

function secondsSince(t0: number): number {
  return Math.round((performance.now() - t0) / 100) / 10;
}
