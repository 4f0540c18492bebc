import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Engine } from "../gpu-backend/engine/engine";
import { loadModel } from "../gpu-backend/engine/load-model";
import { BlockPool } from "../gpu-backend/kv/block-pool";
import { materializeTinyModel } from "../gpu-backend/model/checkpoint/demo-model";
import { CpuExecutor } from "../gpu-backend/model/executors/cpu-executor";
import { createBackendApp } from "../gpu-backend/server/app";
import { Drain } from "../gpu-backend/server/drain";
import { fuzzBackend, type FuzzFindings } from "./fuzz-backend";
import { note } from "./progress";

/**
 * `npm run bench -- fuzz [--cases N] [--seed S] [--json]`: N (10,000) seeded cases against every
 * backend route of a real backend app and engine (tiny model, in process), as bench/fuzz-backend.ts
 * builds them; a failing case replays with `fuzzCase(S, index)`. The edge's JSON routes are not
 * fuzzed yet (issue 19).
 */
export async function runFuzzBench(o: { cases?: number; seed?: number }): Promise<FuzzFindings & { seed: number; wallS: number }> {
  const cases = o.cases ?? 10_000;
  const seed = o.seed ?? 1;
  const dir = mkdtempSync(join(tmpdir(), "agent-edge-fuzz-bench-"));
  const secret = "fuzz-bench-secret";
  try {
    const model = await loadModel({ dir: await materializeTinyModel(join(dir, "tiny")) });
    const executor = await CpuExecutor.create({ spec: model.spec, weights: model.weights, numBlocks: 64, blockSize: 16, threads: 1 });
    const engine = new Engine({
      executor,
      pool: new BlockPool({ numBlocks: 64, blockSize: 16 }),
      codec: model.codec,
      modelId: model.spec.modelId,
      scheduler: { maxBatchTokens: 256, maxRunningSequences: 8, blockSize: 16 },
      enablePrefixCache: true,
      backendId: "fuzz",
      transfer: { secret, timeoutMs: 2000 },
    });
    const app = createBackendApp({ engine, secret, backendId: "fuzz", drain: new Drain() });
    const t0 = performance.now();
    note("fuzz", `${cases} cases, seed ${seed}, against the backend's routes (${model.spec.modelId}, in process)`);
    const findings = await fuzzBackend({ fetch: async (req) => app.fetch(req), secret, seed, cases, onProgress: (n) => note("fuzz", `${n}/${cases} cases`) });
    engine.kv.checkInvariants();
    await executor.dispose();
    return { ...findings, seed, wallS: Math.round((performance.now() - t0) / 100) / 10 };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
