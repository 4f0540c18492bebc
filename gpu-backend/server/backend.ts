import type { Engine } from "../engine/engine";
import { createEngine } from "../engine/create-engine";
import type { DemoAgent } from "../engine/demo-agent";
import { speculationFor, type SpeculativeMode } from "../engine/speculation";
import { BlockPool, blocksForBudget } from "../kv/block-pool";
import { createExecutor } from "../model/executors/create-executor";
import { resolveExecutor, type ExecutorRequest } from "../model/executors/device";
import { executorLabel, type ExecutorKind, type ExecutorProvider } from "../model/executors/executor";
import type { Executor } from "../model/executors/executor";
import { loadModel } from "../engine/load-model";
import { prefillWastePerToken } from "../model/graph/decoder-spec";
import { StepTraceFile } from "../engine/step-trace";
import { weightsAt, type WeightPrecision } from "../engine/weight-precision";

export interface BackendOptions {
  /** Hugging Face-style folder; undefined means the embedded demo model. */
  modelDir: string | undefined;
  kvMemoryBytes: number;
  blockSize: number;
  maxBatchTokens: number;
  /** Bound on queued prompt tokens (`--max-queued-tokens`; SchedulerConfig.maxQueuedTokens). Default: none. */
  maxQueuedTokens?: number;
  enablePrefixCache: boolean;
  threads?: number | undefined;
  /** cpu | device-pool | host-pool | auto (default auto: `resolveExecutor`). */
  executor?: ExecutorRequest;
  /** The executor's provider (default: its first in `EXECUTOR_PROVIDERS`), e.g. host-pool on node-webgpu. */
  provider?: ExecutorProvider | undefined;
  /** Weight precision (default per executor: `defaultPrecision`). */
  weights?: WeightPrecision | undefined;
  backendId: string;
  maxRunningSequences?: number;
  /** Append a record of every engine step to `<stepTraceDir>/<backendId>.jsonl` (step-trace.ts). */
  stepTraceDir?: string | undefined;
  /** The pool's shared secret: with it, turns with a `kvSource` pull blocks from that backend. */
  secret?: string | undefined;
  /** Host-memory KV tier in bytes (`--kv-host-memory`; 0: none). */
  hostTierBytes?: number;
  /** Whether such turns pull: by the cost model (default), always, or never. */
  kvPull?: "auto" | "always" | "never";
  /** Demo agent mode (`--demo-agent [N]`; engine/demo-agent.ts): untrained models only. Absent: off. */
  demoAgent?: DemoAgent | undefined;
  /**
   * Speculative decoding (`--speculative`, `--speculative-max`; engine/speculation.ts). Mode absent:
   * `lookup` on the cpu executor (measured: outputs identical, docs/engine.md), off on the others.
   */
  speculative?: { mode?: SpeculativeMode | undefined; maxDraftTokens?: number | undefined };
  log?: (line: string) => void;
}

export interface Backend {
  engine: Engine;
  executor: Executor;
  close(): Promise<void>;
}

/**
 * Loads a model, sizes the KV pool from the memory budget, and wires executor and engine.
 *
 * @example
 * const { engine } = await createBackend({ modelDir: undefined, kvMemoryBytes: 2 ** 30, blockSize: 16,
 *   maxBatchTokens: 512, enablePrefixCache: true, backendId: "b0" });
 */
export async function createBackend(options: BackendOptions): Promise<Backend> {
  const log = options.log ?? (() => {});
  const t0 = performance.now();
  const model = await loadModel({ dir: options.modelDir, log });
  const { spec } = model;
  const choice = await resolveExecutor(options.executor ?? "auto", options.provider);
  const label = executorLabel(choice);
  log(`executor ${label} (${choice.reason})`);
  const { precision, quantized, save: saveQuantized } = weightsAt(model.checkpoint, choice.kind, options.weights, log);
  log(`weights ${precision}${options.weights ? "" : " (the default on " + choice.kind + ")"}`);
  const numBlocks = blocksForBudget({
    budgetBytes: options.kvMemoryBytes,
    blockSize: options.blockSize,
    numLayers: spec.numLayers,
    numKvHeads: spec.numKvHeads,
    headDim: spec.headDim,
    // The CPU pool is fp32; the GPU executors' pools are fp16.
    bytesPerElement: choice.kind === "cpu" ? 4 : 2,
  });
  if (numBlocks < 2) throw new Error(`--kv-memory ${options.kvMemoryBytes} bytes holds fewer than 2 blocks of ${options.blockSize} tokens`);
  log(`building the ONNX graph and the onnxruntime session (${label}), KV pool ${numBlocks} blocks x ${options.blockSize} tokens`);
  const executor = await createExecutor({ kind: choice.kind, provider: choice.provider, spec, weights: model.weights, quantized, float16: precision === "fp16", numBlocks, blockSize: options.blockSize, threads: options.threads });
  saveQuantized();
  const pool = new BlockPool({ numBlocks, blockSize: options.blockSize });
  const trace = options.stepTraceDir ? new StepTraceFile(options.stepTraceDir, options.backendId) : undefined;
  if (trace) log(`tracing every engine step to ${trace.path}`);
  const speculativeMode = options.speculative?.mode ?? defaultSpeculativeMode(choice.kind);
  const speculative = speculationFor(speculativeMode, options.speculative?.maxDraftTokens);
  const engine = createEngine({
    executor,
    pool,
    codec: model.codec,
    modelId: spec.modelId,
    scheduler: {
      maxBatchTokens: options.maxBatchTokens,
      maxRunningSequences: options.maxRunningSequences ?? 64,
      ...(options.maxQueuedTokens ? { maxQueuedTokens: options.maxQueuedTokens } : {}),
      blockSize: options.blockSize,
      prefillWastePerToken: prefillWastePerToken(spec),
    },
    enablePrefixCache: options.enablePrefixCache,
    backendId: options.backendId,
    ...(options.hostTierBytes ? { hostTierBytes: options.hostTierBytes } : {}),
    ...(trace ? { onStep: (r) => trace.add(r) } : {}),
    ...(options.demoAgent ? { demoAgent: options.demoAgent } : {}),
    ...(speculative ? { speculative } : {}),
    ...(options.secret !== undefined && options.kvPull !== "never" ? { transfer: { secret: options.secret, policy: options.kvPull ?? "auto" } } : {}),
  });
  log(`ready in ${((performance.now() - t0) / 1000).toFixed(1)} s: ${spec.modelId} (${precision}), ${(executor.kvBytes / 2 ** 20).toFixed(0)} MiB KV, prefix cache ${options.enablePrefixCache ? "on" : "off"}, speculative ${speculative ? `${speculativeMode} (drafts of at most ${speculative.maxDraftTokens} tokens)` : "off"}${options.demoAgent ? `, demo agent mode (replies of at most ${options.demoAgent.replyTokens} tokens, one tool call on a user's turn, greedy)` : ""}`);
  return {
    engine,
    executor,
    close: () => {
      trace?.flush();
      return executor.dispose();
    },
  };
}

/**
 * `--speculative` when not given: `lookup` on the cpu executor, where verify runs are attended
 * like decode rows (greedy outputs bit-identical, measured in `npm run bench -- speculative`);
 * off on the paged executors, whose speculation is not measured yet.
 */
export function defaultSpeculativeMode(kind: ExecutorKind): SpeculativeMode {
  return kind === "cpu" ? "lookup" : "off";
}
