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
  "test/structured-outputs.test.ts": 183.4,
  "gpu-backend/model/gguf/tests/gguf-checkpoint.test.ts": 150.4,
  "bench/llamacpp-bench.test.ts": 145.5,
  "test/agent-clis.test.ts": 136.7,
  "test/oracle/llama-cpp-oracle.test.ts": 118.5,
  "test/workers/fuzz.test.ts": 117.1,
  "test/oracle/trained-model.test.ts": 59.6,
  "gpu-backend/model/gguf/tests/gguf-tokenizer.test.ts": 47.8,
  "gpu-backend/engine/constrained-turns.test.ts": 38.7,
  "bench/soak-bench.test.ts": 38.2,
  "bench/studies/precision-accuracy.test.ts": 26.7,
  "gpu-backend/server/device-pool-transfer.webgpu.test.ts": 24.6,
  "test/oracle/llama-cpp-quantized.test.ts": 23.7,
  "test/restarts.test.ts": 23.2,
  "test/workers/security.test.ts": 23.2,
  "gpu-backend/model/executors/family-checkpoints.test.ts": 21.0,
  "test/pool-kill.test.ts": 20.9,
  "gpu-backend/model/executors/device-pool-precision.webgpu.test.ts": 20.4,
  "gpu-backend/server/demo-agent.test.ts": 20.2,
  "test/kv-move.test.ts": 20.1,
  "test/workers/limits.test.ts": 19.5,
  "gpu-backend/engine/engine.test.ts": 19.5,
  "gpu-backend/model/export/gguf-export.test.ts": 19.2,
  "gpu-backend/engine/speculative-turns.test.ts": 18.3,
  "gpu-backend/engine/fork-turns.test.ts": 17.3,
  "gpu-backend/server/heartbeat.test.ts": 16.6,
  "gpu-backend/engine/load-model-gguf.test.ts": 16.3,
  "gpu-backend/model/executors/web-device-pool-executor.webgpu.test.ts": 14.7,
  "gpu-backend/engine/family-turns.test.ts": 14.3,
  "gpu-backend/model/executors/fused-paged-graph.webgpu.test.ts": 14.1,
  "bench/pool-scale.test.ts": 14.0,
  "test/pool-cells.test.ts": 13.4,
  "gpu-backend/model/executors/device-pool-executor.webgpu.test.ts": 12.8,
  "gpu-backend/model/testing/paged-llama-graph.test.ts": 12.3,
  "test/inspector.browser.test.ts": 12.1,
  "gpu-backend/model/checkpoint/family-tokenizers.test.ts": 11.3,
  "gpu-backend/model/checkpoint/checkpoint.test.ts": 11.2,
  "test/backend-server.test.ts": 10.9,
  "gpu-backend/server/kv-transfer.test.ts": 10.5,
  "test/start-stack.test.ts": 10.2,
  "test/edge-failover.test.ts": 9.4,
  "test/workers/storage.test.ts": 9.3,
  "test/workers/idempotency-concurrency.test.ts": 8.2,
  "test/edge-logprobs.test.ts": 8.2,
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
