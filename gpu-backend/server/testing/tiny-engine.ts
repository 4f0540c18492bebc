import { join } from "node:path";
import { BlockPool } from "../../kv/block-pool";
import { materializeTinyModel } from "../../model/checkpoint/demo-model";
import { CpuExecutor } from "../../model/executors/cpu-executor";
import type { SchedulerConfig } from "../../scheduler/scheduler";
import { Engine } from "../../engine/engine";
import { loadModel } from "../../engine/load-model";

/**
 * An engine on the tiny model for tests: the model written under `dir`, a CPU executor and a pool
 * of 128 blocks of 16 tokens, prefix cache on, backend id "t"; `scheduler` overrides the defaults
 * (256 tokens a step, 8 sequences). Dispose the executor after.
 *
 * @example const { engine, executor } = await tinyEngine(dir, { maxQueuedTokens: 100 });
 */
export async function tinyEngine(dir: string, scheduler: Partial<SchedulerConfig> = {}): Promise<{ engine: Engine; executor: CpuExecutor }> {
  const model = await loadModel({ dir: await materializeTinyModel(join(dir, "tiny")) });
  const executor = await CpuExecutor.create({ spec: model.spec, weights: model.weights, numBlocks: 128, blockSize: 16, threads: 1 });
  const engine = new Engine({
    executor,
    pool: new BlockPool({ numBlocks: 128, blockSize: 16 }),
    codec: model.codec,
    modelId: model.spec.modelId,
    scheduler: { maxBatchTokens: 256, maxRunningSequences: 8, blockSize: 16, ...scheduler },
    enablePrefixCache: true,
    backendId: "t",
  });
  return { engine, executor };
}
