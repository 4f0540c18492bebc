import { relative } from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * Seconds each slow test file took in the baseline measurement (docs/testing.md: vitest's default
 * reporter, beforeAll included, one worker, 2 cores). Only the order matters: the long files start
 * first, so that none of them is left to run alone at the end of a run while the other workers
 * are idle. Files not listed here are short (under 5 s) and run after these, in vitest's order.
 * Re-measure and update when a file becomes slow (docs/testing.md says how).
 */
export const SLOW_FILES: Record<string, number> = {
  "bench/llamacpp-bench.test.ts": 105.7,
  "test/structured-outputs.test.ts": 79.3,
  "test/oracle/llama-cpp-oracle.test.ts": 46.7,
  "test/oracle/trained-model.test.ts": 45.0,
  "test/agent-clis.test.ts": 46.1,
  "bench/soak-bench.test.ts": 34.2,
  "test/workers/fuzz.test.ts": 20.0,
  "gpu-backend/model/executors/family-checkpoints.test.ts": 20.0,
  "gpu-backend/model/executors/device-pool-precision.webgpu.test.ts": 15.7,
  "gpu-backend/model/export/gguf-export.test.ts": 12.4,
  "test/restarts.test.ts": 11.8,
  "gpu-backend/engine/constrained-turns.test.ts": 11.7,
  "test/oracle/llama-cpp-quantized.test.ts": 11.6,
  "test/kv-move.test.ts": 11.4,
  "test/edge-e2e.test.ts": 10.7,
  "gpu-backend/model/executors/device-pool-executor.webgpu.test.ts": 10.5,
  "test/pool-kill.test.ts": 9.9,
  "gpu-backend/server/heartbeat.test.ts": 9.6,
  "gpu-backend/engine/engine.test.ts": 8.0,
  "gpu-backend/server/backend.webgpu.test.ts": 7.8,
  "test/anthropic-messages.test.ts": 7.6,
  "test/backend-server.test.ts": 7.5,
  "gpu-backend/engine/fork-turns.test.ts": 7.3,
  "test/workers/storage.test.ts": 6.2,
  "bench/studies/precision-accuracy.test.ts": 6.0,
  "test/edge-failover.test.ts": 5.6,
  "test/openai-responses.test.ts": 5.3,
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
