import { BlockPool } from "../../kv/block-pool";
import { CpuExecutor } from "../../model/executors/cpu-executor";
import type { SchedulerConfig } from "../../scheduler/scheduler";
import type { Engine, EngineOptions } from "../../engine/engine";
import { createEngine } from "../../engine/create-engine";
import { loadModel } from "../../engine/load-model";

/**
 * An engine in process for tests and the backend fuzzing: the model in `modelDir`, a CPU
 * executor (one thread) and a pool of `numBlocks` (128) blocks of 16 tokens, prefix cache on;
 * `scheduler` overrides the defaults (256 tokens a step, 8 sequences). Dispose the executor after.
 *
 * @example const { engine, executor } = await testEngine({ modelDir: await materializeTinyModel(dir), scheduler: { maxQueuedTokens: 100 } });
 */
export async function testEngine(p: {
  modelDir: string;
  numBlocks?: number;
  scheduler?: Partial<SchedulerConfig>;
  backendId?: string;
  transfer?: EngineOptions["transfer"];
  /** The model's context in tokens (default: the model's, 4096 for the tiny ones). */
  maxContext?: number;
  demoAgent?: EngineOptions["demoAgent"];
}): Promise<{ engine: Engine; executor: CpuExecutor }> {
  const numBlocks = p.numBlocks ?? 128;
  const model = await loadModel({ dir: p.modelDir, ...(p.maxContext ? { maxContext: p.maxContext } : {}) });
  const executor = await CpuExecutor.create({ spec: model.spec, weights: model.weights, numBlocks, blockSize: 16, threads: 1 });
  const engine = createEngine({
    executor,
    pool: new BlockPool({ numBlocks, blockSize: 16 }),
    codec: model.codec,
    modelId: model.spec.modelId,
    scheduler: { maxBatchTokens: 256, maxRunningSequences: 8, blockSize: 16, ...p.scheduler },
    enablePrefixCache: true,
    backendId: p.backendId ?? "t",
    ...(p.transfer ? { transfer: p.transfer } : {}),
    ...(p.demoAgent ? { demoAgent: p.demoAgent } : {}),
  });
  return { engine, executor };
}
