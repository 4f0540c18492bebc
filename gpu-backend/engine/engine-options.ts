import type { BlockHash } from "../../protocol/block-hash";
import type { DoneFrame, FinishReason, SamplingParams, TokenLogprob } from "../../protocol/messages";
import type { GrammarCache } from "../constraint/grammar-cache";
import type { BlockPool } from "../kv/block-pool";
import type { EvictionLog } from "../kv/eviction-log";
import type { HostTier } from "../kv/host-tier";
import type { KvCacheManager } from "../kv/kv-cache-manager";
import type { KvEventLog } from "../kv/kv-events";
import type { LeaseTableParams } from "../kv/lease-table";
import type { Executor } from "../model/executors/executor";
import type { PrefillRate } from "../scheduler/prefill-rate";
import type { Scheduler, SchedulerConfig } from "../scheduler/scheduler";
import type { KvPuller, KvPullerParams } from "../transfer/kv-pull";
import type { KvServer } from "../transfer/kv-serve";
import type { ChatCodec } from "./chat-codec";
import type { DemoAgent } from "./demo-agent";
import type { SpeculationCounters, SpeculationOptions } from "./speculation";
import type { StateLeases } from "./state-leases";
import type { StateStore } from "./state-store";
import type { StepRecord } from "./step-trace";

/**
 * The engine's construction options (what `createEngine` composes its parts from), the parts
 * themselves, its request types for raw-token generation, and its counters (engine.ts).
 */
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
  /** Speculative decoding (`--speculative`; speculation.ts): drafts verified in one step, outputs unchanged. Absent: off. */
  speculative?: SpeculationOptions;
}

/**
 * The subsystems an `Engine` runs on, built by `createEngine` (create-engine.ts), the one place
 * that composes them: the engine, its intake and its output build none of them.
 */
export interface EngineParts {
  options: EngineOptions;
  kv: KvCacheManager;
  scheduler: Scheduler;
  /** The prefill rate measured from the engine's steps (heartbeats, the queue bound's `retryAfterS`). */
  prefillRate: PrefillRate;
  states: StateStore;
  /** Tool-pause leases on turn states (`POST /v1/leases`). */
  leases: StateLeases;
  /** Prefix-cache events since the last heartbeat (stored / removed block hashes). */
  kvEvents: KvEventLog;
  /** Recent evictions by hash: why a turn's first missing block is gone (the done frame's `evicted`). */
  evictions: EvictionLog;
  /** Serves this pool's blocks to other backends (`POST /v1/kv/pull`). */
  kvServer: KvServer;
  /** Pulls a prompt's missing blocks from another backend; undefined without block I/O, a secret or the prefix cache. */
  kvPuller: KvPuller | undefined;
  /** The second KV tier (`hostTierBytes`); undefined without it, block I/O or the prefix cache. */
  hostTier: HostTier | undefined;
  /** The model's grammar engine, built on first use (its tokenizer info takes ~0.35 s). */
  grammars: () => Promise<GrammarCache>;
  /** The block-hash root of this model under a cache salt. */
  rootFor: (salt: string) => BlockHash;
}

/** Raw-token generation, for tests and benchmarks that bypass the chat template. */
export interface TokenRequest {
  tokenIds: number[];
  sampling: SamplingParams;
  cacheSalt?: string;
  /** false: no speculative decoding for this request (default: the engine's option). */
  speculative?: boolean;
}

export interface TokenResult {
  tokenIds: number[];
  /** Per generated token (stop tokens excluded), when `sampling.logprobs` asked. */
  logprobs?: TokenLogprob[];
  finishReason: FinishReason;
  usage: DoneFrame["usage"];
  timings: DoneFrame["timings"];
  /** Draft tokens verified and accepted, when the request speculated. */
  speculation?: { drafted: number; accepted: number };
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
  /** Speculative decoding: drafted, accepted, verify steps, by draft length. */
  speculation: SpeculationCounters;
}
