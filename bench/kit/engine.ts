import type { DoneFrame, Frame, GenerateRequest } from "../../protocol/messages";
import { createEngine } from "../../gpu-backend/engine/create-engine";
import type { Engine } from "../../gpu-backend/engine/engine";
import type { EngineOptions } from "../../gpu-backend/engine/engine-options";
import type { LoadedModel } from "../../gpu-backend/engine/load-model";
import { weightsAt, type WeightPrecision, type WeightsAt } from "../../gpu-backend/engine/weight-precision";
import { BlockPool } from "../../gpu-backend/kv/block-pool";
import { CpuExecutor } from "../../gpu-backend/model/executors/cpu-executor";
import { prefillWastePerToken } from "../../gpu-backend/model/graph/decoder-spec";

/**
 * Engines in this process on the cpu executor, for the benchmarks that measure the engine
 * without HTTP (agent): the weights at a precision (quantized once, the
 * cache saved), executors over a number of KV blocks, engines over them, and a turn's done frame
 * with its TTFT.
 *
 * @example
 * const weights = benchWeights(model, "int4", log);
 * const executor = await benchExecutor(model, weights, 1024);
 * const engine = benchEngine(model, executor, { numBlocks: 1024 });
 * const { done, ttftMs } = await submitTurn(engine, request);
 */

export const BLOCK_SIZE = 16;

/** The model's weights at `precision` (default the cpu default); throws where the cpu executor refuses it. */
export function benchWeights(model: LoadedModel, precision: WeightPrecision | undefined, log: (line: string) => void): WeightsAt {
  return weightsAt(model.checkpoint, "cpu", precision, log);
}

/** A cpu executor over `numBlocks` KV blocks; `threads`: onnxruntime intra-op threads (default every core). */
export function benchExecutor(model: LoadedModel, weights: WeightsAt, numBlocks: number, threads?: number): Promise<CpuExecutor> {
  return CpuExecutor.create({ spec: model.spec, weights: model.weights, quantized: weights.quantized, numBlocks, blockSize: BLOCK_SIZE, threads });
}

/**
 * An engine with a pool of its own (512-token steps, 64 sequences, the prefix cache on unless
 * said); `extra`: further engine options (e.g. speculative decoding's), applied last.
 */
export function benchEngine(model: LoadedModel, executor: CpuExecutor, o: { numBlocks: number } & Partial<Pick<EngineOptions, "enablePrefixCache" | "backendId">> & { maxRunningSequences?: number; extra?: Partial<EngineOptions> }): Engine {
  return createEngine({
    executor,
    pool: new BlockPool({ numBlocks: o.numBlocks, blockSize: BLOCK_SIZE }),
    codec: model.codec,
    modelId: model.spec.modelId,
    scheduler: { maxBatchTokens: 512, maxRunningSequences: o.maxRunningSequences ?? 64, blockSize: BLOCK_SIZE, prefillWastePerToken: prefillWastePerToken(model.spec) },
    enablePrefixCache: o.enablePrefixCache ?? true,
    backendId: o.backendId ?? "bench",
    ...o.extra,
  });
}

/** A turn through `engine.submit`: its done frame and its TTFT from the call. */
export function submitTurn(engine: Engine, req: GenerateRequest): Promise<{ done: DoneFrame; ttftMs: number }> {
  const t0 = performance.now();
  let ttftMs: number | undefined;
  return new Promise((resolve, reject) => {
    engine.submit(req, (f: Frame) => {
      if (f.type === "token" && ttftMs === undefined) ttftMs = performance.now() - t0;
      else if (f.type === "done") resolve({ done: f, ttftMs: ttftMs ?? performance.now() - t0 });
      else if (f.type === "error") reject(new Error(`${f.code}: ${f.message}`));
    });
  });
}

/** Greedy sampling of exactly `maxTokens` tokens (EOS ignored), as the benchmarks measure decode. */
export function greedy(maxTokens: number) {
  return { maxTokens, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true };
}
