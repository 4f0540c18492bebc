import type { DoneFrame, FinishReason, SamplingParams, TokenLogprob } from "../../protocol/messages";
import type { BlockPool } from "../kv/block-pool";
import type { LeaseTableParams } from "../kv/lease-table";
import type { Executor } from "../model/executors/executor";
import type { SchedulerConfig } from "../scheduler/scheduler";
import type { KvPullerParams } from "../transfer/kv-pull";
import type { ChatCodec } from "./chat-codec";
import type { DemoAgent } from "./demo-agent";
import type { StepRecord } from "./step-trace";

/** The engine's construction options, its request types for raw-token generation, and its counters (engine.ts). */
export interface EngineOptions {
  executor: Executor;
  pool: BlockPool;
  codec: ChatCodec;
  modelId: string;
  scheduler: SchedulerConfig;
  enablePrefixCache: boolean;
  /** Turn states kept for delta turns. Default 4096. */
  stateCapacity?: number;
  /** Reported in done frames. */
  backendId: string;
  /** Tool-pause leases: cap (default 0.75 of the pool), longest TTL, clock, eviction order (lease-table.ts). */
  leases?: Omit<LeaseTableParams, "pool">;
  /** Called after every step with what it computed and took (`--step-trace`; step-trace.ts). */
  onStep?: (record: StepRecord) => void;
  /** Pulling blocks from other backends (`GenerateRequest.kvSource`): the pool's shared secret, and a test's fetch. Absent: never pulls. */
  /** Bytes of host memory for the second KV tier (evicted blocks kept by hash; kv/host-tier.ts). 0 or absent: none. */
  hostTierBytes?: number;
  transfer?: Pick<KvPullerParams, "secret" | "timeoutMs" | "fetch" | "policy">;
  /** Demo agent mode (`--demo-agent [N]`, untrained models only; demo-agent.ts). Absent: off. */
  demoAgent?: DemoAgent;
}

/** Raw-token generation, for tests and benchmarks that bypass the chat template. */
export interface TokenRequest {
  tokenIds: number[];
  sampling: SamplingParams;
  cacheSalt?: string;
}

export interface TokenResult {
  tokenIds: number[];
  /** Per generated token (stop tokens excluded), when `sampling.logprobs` asked. */
  logprobs?: TokenLogprob[];
  finishReason: FinishReason;
  usage: DoneFrame["usage"];
  timings: DoneFrame["timings"];
}

/** Engine-wide counters, read by the server's /metrics. */
export interface EngineCounters {
  promptTokens: number;
  cachedTokens: number;
  computedTokens: number;
  generatedTokens: number;
  steps: number;
  preemptions: number;
  requests: number;
  stepTokens: number;
  stepMs: number;
  /** Time constrained decoding spent in the grammar (masks, matcher, budget checks, the greedy masked argmax; sampling excluded), ms. */
  grammarMs: number;
}
