import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll } from "vitest";
import type { Frame, GenerateRequest, SamplingParams } from "../../protocol/messages";
import { BlockPool } from "../kv/block-pool";
import { CpuExecutor } from "../model/executors/cpu-executor";
import { tinyModelDir } from "../model/testing/tiny-model";
import { createEngine } from "./create-engine";
import type { Engine } from "./engine";
import { loadModel, type LoadedModel } from "./load-model";
import type { SpeculationOptions } from "./speculation";
import type { StepRecord } from "./step-trace";
import { ScriptedExecutor } from "./testing/scripted-executor";

/** Block size of the engines the fixture makes. */
export const BLOCK = 16;

/**
 * The engine tests' fixture (test-only) (engine.test.ts, speculative-turns.test.ts): the tiny model loaded once
 * per file (beforeAll), engines on a scripted cpu executor (`makeEngine`), disposed after the file.
 *
 * @example const fx = engineFixture(); it("...", async () => { const { engine } = await fx.makeEngine(); });
 */
export function engineFixture() {
  let dir: string;
  let model: LoadedModel;
  const executors: CpuExecutor[] = [];
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "agent-edge-engine-"));
    model = await loadModel({ dir: await tinyModelDir(dir) });
  });
  afterAll(async () => {
    for (const e of executors) await e.dispose();
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    /** The loaded tiny model (inside tests and hooks). */
    model: () => model,
    async makeEngine(options: { numBlocks?: number; prefixCache?: boolean; maxBatchTokens?: number; onStep?: (r: StepRecord) => void; speculative?: SpeculationOptions } = {}) {
      const numBlocks = options.numBlocks ?? 256;
      const inner = await CpuExecutor.create({ spec: model.spec, weights: model.weights, numBlocks, blockSize: BLOCK, threads: 1 });
      executors.push(inner);
      const executor = new ScriptedExecutor(inner);
      const pool = new BlockPool({ numBlocks, blockSize: BLOCK });
      executor.pool = pool;
      const engine = createEngine({
        executor,
        pool,
        codec: model.codec,
        modelId: model.spec.modelId,
        scheduler: { maxBatchTokens: options.maxBatchTokens ?? 64, maxRunningSequences: 16, blockSize: BLOCK },
        enablePrefixCache: options.prefixCache ?? true,
        backendId: "test",
        ...(options.onStep ? { onStep: options.onStep } : {}),
        ...(options.speculative ? { speculative: options.speculative } : {}),
      });
      return { engine, executor, pool };
    },
  };
}

/** Greedy sampling of `maxTokens` (end of sequence ignored), with overrides. */
export const greedy = (maxTokens: number, over: Partial<SamplingParams> = {}): SamplingParams => ({
  maxTokens,
  temperature: 0,
  topP: 1,
  topK: 0,
  stop: [],
  stopTokenIds: [],
  ignoreEos: true,
  ...over,
});

/** `n` prompt token ids (deterministic, `offset` makes another prompt). */
export const prompt = (n: number, offset = 0) => Array.from({ length: n }, (_, i) => 100 + ((i * 31 + offset) % 5000));

/** Submits a request and collects its frames until the done or error frame. */
export function turn(engine: Engine, req: GenerateRequest): Promise<{ frames: Frame[]; last: Frame }> {
  return new Promise((resolve) => {
    const frames: Frame[] = [];
    engine.submit(req, (f) => {
      frames.push(f);
      if (f.type !== "token") resolve({ frames, last: f });
    });
  });
}
