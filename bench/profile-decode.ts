import { createEngine } from "../gpu-backend/engine/create-engine";
import { BlockPool } from "../gpu-backend/kv/block-pool";
import { CpuExecutor } from "../gpu-backend/model/executors/cpu-executor";
import { loadModel } from "../gpu-backend/engine/load-model";
const model = await loadModel({ dir: undefined });
const executor = await CpuExecutor.create({ spec: model.spec, weights: model.weights, numBlocks: 4096, blockSize: 16 });
const engine = createEngine({ executor, pool: new BlockPool({ numBlocks: 4096, blockSize: 16 }), codec: model.codec, modelId: "demo", scheduler: { maxBatchTokens: 512, maxRunningSequences: 64, blockSize: 16 }, enablePrefixCache: true, backendId: "p" });
const base = Array.from({ length: 2100 }, (_, i) => 100 + (i * 7) % 5000);
const sampling = { maxTokens: 48, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true };
await engine.generateTokens({ tokenIds: base, sampling });
for (const B of [1, 8, 1, 8]) {
  const c0 = { ...engine.counters };
  const t0 = performance.now();
  const rs = await Promise.all(Array.from({ length: B }, (_, b) => engine.generateTokens({ tokenIds: [...base, 1000 + b, 2000 + b], sampling })));
  const wall = performance.now() - t0;
  const steps = engine.counters.steps - c0.steps;
  const stepMs = engine.counters.stepMs - c0.stepMs;
  const dec = rs.map((r) => r.timings.decodeMs);
  console.log(`B=${B} wall ${wall.toFixed(0)} ms, steps ${steps}, executor ${stepMs.toFixed(0)} ms (${(stepMs/steps).toFixed(1)}/step), decodeMs ${Math.max(...dec).toFixed(0)}, overhead/step ${((wall - stepMs)/steps).toFixed(1)} ms`);
}
// raw executor timing split
const { performance: perf } = await import("node:perf_hooks");
