import { relative } from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * Seconds each slow test file (8 s or more) took in the last measurement (docs/testing.md, "Slow
 * files, re-measured": vitest's default reporter, beforeAll included, the full run's 3 workers on
 * 2 cores, so two to three times a file's time alone). Only the order matters: the long files start
 * first, so that none of them is left to run alone at the end of a run while the other workers
 * are idle. Files not listed here are short (under 8 s) and run after these, in vitest's order.
 * Re-measure and update when a file becomes slow (docs/testing.md says how).
 */
export const SLOW_FILES: Record<string, number> = {
  "bench/llamacpp-bench.test.ts": 203.1,
  "gpu-backend/model/gguf/tests/gguf-checkpoint.test.ts": 202.4,
  "test/oracle/llama-cpp-oracle.test.ts": 146.5,
  "test/agent-clis.test.ts": 121.8,
  "test/workers/fuzz.test.ts": 115.8,
  "test/structured-outputs.test.ts": 98.8,
  "test/oracle/trained-model.test.ts": 80.0,
  "gpu-backend/model/gguf/tests/gguf-tokenizer.test.ts": 56.7,
  "gpu-backend/engine/constrained-turns.test.ts": 50.7,
  "gpu-backend/model/executors/family-checkpoints.test.ts": 45.5,
  "bench/soak-bench.test.ts": 39.9,
  "bench/studies/precision-accuracy.test.ts": 39.4,
  "test/oracle/llama-cpp-quantized.test.ts": 37.8,
  "test/workers/security.test.ts": 35.8,
  "test/restarts.test.ts": 33.5,
  "gpu-backend/server/device-pool-transfer.webgpu.test.ts": 30.6,
  "gpu-backend/model/export/gguf-export.test.ts": 25.9,
  "gpu-backend/engine/engine.test.ts": 25.5,
  "gpu-backend/engine/family-turns.test.ts": 24.1,
  "gpu-backend/model/executors/device-pool-precision.webgpu.test.ts": 20.9,
  "test/pool-kill.test.ts": 20.9,
  "gpu-backend/model/executors/device-pool-executor.webgpu.test.ts": 20.7,
  "test/workers/limits.test.ts": 20.6,
  "test/kv-move.test.ts": 20.6,
  "gpu-backend/model/executors/fused-paged-graph.webgpu.test.ts": 19.9,
  "gpu-backend/engine/fork-turns.test.ts": 18.9,
  "gpu-backend/server/kv-transfer.test.ts": 18.7,
  "gpu-backend/model/executors/web-device-pool-executor.webgpu.test.ts": 17.2,
  "gpu-backend/engine/load-model-gguf.test.ts": 17.1,
  "gpu-backend/server/demo-agent.test.ts": 14.8,
  "gpu-backend/server/heartbeat.test.ts": 13.9,
  "gpu-backend/model/checkpoint/family-tokenizers.test.ts": 13.7,
  "gpu-backend/engine/speculative-turns.test.ts": 13.3,
  "test/start-stack.test.ts": 12.6,
  "gpu-backend/model/checkpoint/checkpoint.test.ts": 12.5,
  "gpu-backend/model/testing/paged-llama-graph.test.ts": 11.8,
  "test/inspector.browser.test.ts": 11.5,
  "test/edge-failover.test.ts": 11.5,
  "test/workers/idempotency-concurrency.test.ts": 11.0,
  "test/backend-server.test.ts": 11.0,
  "test/pool-cells.test.ts": 10.8,
  "test/workers/storage.test.ts": 10.7,
  "test/edge-logprobs.test.ts": 10.7,
  "bench/pool-scale.test.ts": 10.7,
  "gpu-backend/server/backend.webgpu.test.ts": 8.9,
  "gpu-backend/server/agent-clients.test.ts": 8.4,
};

/**
 * vitest's sequencer with the slow files first, longest first, across all projects (vitest's own
 * order groups files by project, and on a clean clone, with no timings cached, by file size).
 * With several workers this is the longest-processing-time-first schedule: the total time is then
 * close to (sum of durations) / workers instead of ending on one long file.
 *
 * @example
 * // vitest.config.ts
 * export default defineConfig({ test: { sequence: { sequencer: SlowFirstSequencer } } });
 */
export class SlowFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const root = this.ctx.config.root;
    const seconds = (f: TestSpecification) => SLOW_FILES[relative(root, f.moduleId).split("\\").join("/")] ?? 0;
    // Array.prototype.sort is stable: files of equal weight keep vitest's order.
    return sorted.sort((a, b) => seconds(b) - seconds(a));
  }
}
