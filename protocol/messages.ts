/**
 * The wire contract between the edge (Worker / Durable Objects) and a GPU backend.
 *
 * Transport: HTTP POST with a msgpack body (`content-type: application/msgpack`); the answer to
 * `/v1/generate` is a stream of msgpack frames, each frame one msgpack value (a `Frame`),
 * concatenated back to back. `protocol/codec.ts` owns msgpackr: encode, decode and validation.
 *
 * Every request but `/healthz` carries the shared secret in the `x-agent-edge-secret` header.
 */

/** Version of this contract; bumped on any incompatible change. */
export const PROTOCOL_VERSION = 1;

export const SECRET_HEADER = "x-agent-edge-secret";
/** The shared secret both sides use when none is configured (local development only). */
export const DEV_SECRET = "dev-secret";
export const MSGPACK_CONTENT_TYPE = "application/msgpack";


// Chat content (OpenAI-compatible subset, as the backend's chat template sees it): chat-content.ts
export * from "./chat-content";
import type { AssistantMessage, ChatMessage, ReplyConstraint, ToolDefinition } from "./chat-content";
import type { KvPullReport, KvSource } from "./kv-messages";

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

export interface SamplingParams {
  /**
   * Most generated tokens (>= 1). Absent: what the context leaves after the prompt (OpenAI's
   * default). A budget larger than what the context leaves is clamped to it (as llama.cpp and
   * Ollama do); a reply the budget or the clamp ends finishes with `length`.
   */
  maxTokens?: number;
  /** 0 means greedy. */
  temperature: number;
  /** In (0, 1]; 1 disables nucleus sampling. */
  topP: number;
  /** 0 disables top-k. */
  topK: number;
  /** Seed for the sampler; the same seed and inputs give the same tokens. */
  seed?: number;
  /** Stop strings: generation ends before the first occurrence, which is not returned. */
  stop: string[];
  /** Extra stop token ids, in addition to the model's end-of-turn tokens. */
  stopTokenIds: number[];
  /** When true, the model's end-of-turn tokens do not stop generation (benchmarks). */
  ignoreEos?: boolean;
  /**
   * Log probabilities of the generated tokens (OpenAI's `logprobs` / `top_logprobs`). Absent: none
   * (the backend never fetches a logits row for them). n in 0..{@link MAX_TOP_LOGPROBS}: every
   * token frame carries, per generated token, its logprob and the n most likely tokens at its
   * position. Raw: the log-softmax of the model's logits, before temperature, top-k and top-p.
   */
  logprobs?: number;
}

/** Most alternatives per generated token (`SamplingParams.logprobs`), as OpenAI's `top_logprobs`. */
export const MAX_TOP_LOGPROBS = 20;

/**
 * One turn of a trajectory.
 *
 * - `mode: "full"`: `messages` is the whole transcript. The backend reuses every cached block up
 *   to the first token that differs from what it holds.
 * - `mode: "delta"`: `messages` holds only the messages appended since the state `stateId`
 *   (which ended with the model's own reply). The backend appends them to the exact token ids it
 *   kept, never re-tokenizing the model's output. An unknown or stale `stateId` answers with an
 *   error frame `state_unknown`; the caller then resends the full transcript.
 */
export interface GenerateRequest {
  requestId: string;
  /** Model id; empty or absent means the backend's default model. */
  model?: string;
  /** Stable id of the trajectory (the conversation); used for state bookkeeping and logs. */
  trajectoryId?: string;
  /** Per-tenant salt mixed into block hashes so caches never cross tenants. */
  cacheSalt?: string;
  mode: "full" | "delta";
  messages: ChatMessage[];
  stateId?: string;
  /**
   * A fork's first turn (full): the trajectory it was forked from (the same `<tenant>/<id>` form
   * as `trajectoryId`). When this backend keeps that trajectory's state under the same cache salt,
   * the prompt starts from its exact ids, whole turns of them, as far as the transcripts agree
   * (the parent's replies keep the ids the model generated); otherwise it is ignored.
   */
  forkOf?: string;
  tools?: ToolDefinition[];
  sampling: SamplingParams;
  /**
   * The chat template's thinking switch: rendered with `enable_thinking: thinking` (Qwen3's
   * templates read it; `false` adds an empty `<think>\n\n</think>` block to the generation
   * prompt). Absent: the template's default. Templates that do not read it are unaffected.
   */
  thinking?: boolean;
  /** Structured outputs; absent: the reply is unconstrained. */
  constraint?: ReplyConstraint;
  /**
   * Prefixes the client asked to keep cached (Anthropic's `cache_control`): the backend leases
   * the prompt's blocks up to each point for its TTL after the turn, and reports the tokens it
   * computed under them (`DoneFrame.cacheWrites`). At most {@link MAX_CACHE_POINTS}.
   */
  cachePoints?: CachePoint[];
  /**
   * Another backend that holds this trajectory's blocks (the one it leaves, or the pool index's
   * holder of its prefix): before prefilling, the backend pulls the blocks it lacks from there
   * (`POST /v1/kv/pull`) when its cost model says a copy beats recomputing (gpu-backend/transfer/kv-pull.ts).
   */
  kvSource?: KvSource;
  /**
   * false: no speculative decoding for this turn (the backend's `--speculative` drafts and
   * verifies otherwise; the output is the same either way, only the speed differs).
   */
  speculative?: boolean;
}

/** A client-named cache prefix: the transcript's first `messages` messages (with the tools; 0: the tools alone). */
export interface CachePoint {
  messages: number;
  /** How long to keep it, in milliseconds (> 0; the backend may shorten it). */
  ttlMs: number;
}

/** Most cache points one request names (Anthropic allows 4 `cache_control` marks). */
export const MAX_CACHE_POINTS = 4;

/** Prompt tokens a turn computed and now keeps under its cache points, per TTL asked. */
export interface CacheWrite {
  ttlMs: number;
  tokens: number;
}

export interface ReleaseStateRequest {
  stateId: string;
}

/**
 * Counts the prompt tokens of a conversation without running it (`POST /v1/tokenize`): the chat
 * template rendered with `tools` and the generation prompt, then tokenized, exactly as a full
 * turn's prompt is. The answer is a {@link TokenizeResponse}.
 */
export interface TokenizeRequest {
  /** Model id; empty or absent means the backend's default model. */
  model?: string;
  messages: ChatMessage[];
  tools?: ToolDefinition[];
  /** The chat template's thinking switch, as {@link GenerateRequest.thinking}. */
  thinking?: boolean;
}

export interface TokenizeResponse {
  /** What `usage.promptTokens` of a full turn over the same messages and tools reports. */
  promptTokens: number;
}

/** Hold the KV blocks of a state (its prompt and generated tokens) while the agent runs a tool. */
export interface LeaseRequest {
  stateId: string;
  /** How long to hold them, in milliseconds (> 0; the backend may shorten it). */
  ttlMs: number;
  /**
   * When the agent is expected back, ms from now (> 0; optional): when admission must break a
   * lease, the backend breaks the one expected back last (without it: the one due last).
   */
  expectedReturnMs?: number;
}

export interface LeaseResponse {
  /** False when the state is unknown, has no cached blocks, or is larger than the lease cap. */
  leased: boolean;
  /** Blocks held. */
  blocks: number;
  /** Deadline, milliseconds since the epoch on the backend's clock (0 when not leased). */
  expiresAt: number;
}

export interface ReleaseLeaseRequest {
  stateId: string;
  /** True when the edge releases it because its deadline passed (counted as expired unused). */
  expired?: boolean;
}

export interface ReleaseLeaseResponse {
  /** A lease was active and is now ended. */
  released: boolean;
  /** Only when `released` is false: whether a turn on the state already ended the lease. */
  hit?: boolean;
}

// ---------------------------------------------------------------------------------------------
// Response frames
// ---------------------------------------------------------------------------------------------

export interface Usage {
  /** Tokens in the prompt of this turn. */
  promptTokens: number;
  /** Prompt tokens whose KV came from the cache. */
  cachedTokens: number;
  /** Prompt tokens computed by prefill this turn (prompt - cached, plus any recomputation). */
  computedTokens: number;
  completionTokens: number;
}

export interface Timings {
  /** From arrival to the first scheduled step. */
  queueMs: number;
  /** From the first scheduled step to the end of prefill. */
  prefillMs: number;
  /** From arrival to the first generated token. */
  ttftMs: number;
  /** From the first to the last generated token. */
  decodeMs: number;
  totalMs: number;
}

export type FinishReason = "stop" | "length" | "stop_sequence" | "cancelled";

export interface TokenFrame {
  type: "token";
  /** Generated token ids in this frame. */
  tokenIds: number[];
  /** Decoded text added by these tokens (may be empty while a multi-byte character is open). */
  text: string;
  /**
   * Only when the request asked (`sampling.logprobs`): one entry per id of `tokenIds`, in order.
   * Response-only: never part of a turn's state.
   */
  logprobs?: TokenLogprob[];
  /**
   * Only when the reply is parsed for tool calls: what these tokens add to the reply's structure
   * (its content and its calls), so clients see a call's name and arguments as they are generated.
   * Response-only: never part of a turn's state.
   */
  reply?: ReplyDelta;
}

/**
 * What a streamed frame adds to a reply parsed for tool calls, split by the model's tool-call
 * convention (gpu-backend/tokenizer/tool-call-stream.ts). The deltas of a turn add up to its done
 * frame's message: per call, the first delta names its `id` and `name` (identical to the message's),
 * and its `arguments` pieces concatenate to exactly the message's `function.arguments`; `content`
 * pieces concatenate to the message's content (with calls, up to whitespace at its two ends: the
 * message's content is trimmed). A call the parser would not accept at the end (cut by the budget,
 * malformed) may have streamed: the done message, not the deltas, is the reply.
 */
export interface ReplyDelta {
  /** Text of the reply's content (outside its tool calls) added by this frame. */
  content?: string;
  /** Pieces of tool calls added by this frame, in order. */
  toolCalls?: ToolCallDelta[];
}

/** A piece of one streamed tool call. */
export interface ToolCallDelta {
  /** The call's position among the reply's calls (0-based; the message's `tool_calls[index]`). */
  index: number;
  /** Only on a call's first delta: its id. */
  id?: string;
  /** Only on a call's first delta: the function's name. */
  name?: string;
  /** Text appended to the call's arguments. */
  arguments?: string;
}

/** One token at a generated position, with its log probability. */
export interface TopLogprob {
  /** The token's text as the tokenizer decodes it alone (U+FFFD for bytes of an unfinished character). */
  token: string;
  /** The token's raw bytes (each 0..255): the bytes of all tokens of a reply concatenate to its UTF-8. */
  bytes: number[];
  /** ln p under the model's raw distribution (log-softmax of the logits): <= 0, at least -9999. */
  logprob: number;
}

/** A generated token's log probability and the most likely tokens at its position. */
export interface TokenLogprob extends TopLogprob {
  /** `sampling.logprobs` tokens, most likely first (equal logprobs: lower token id first). */
  topLogprobs: TopLogprob[];
}

export interface DoneFrame {
  type: "done";
  finishReason: FinishReason;
  /** Id of the state that now ends with this turn's reply; pass it back for a delta turn. */
  stateId: string;
  /** Full generated text of this turn (after stop-string trimming). */
  text: string;
  /**
   * With `finishReason: "stop_sequence"`: the stop string (one of `sampling.stop`) that ended the
   * reply, the one that occurs first in the generated text. Absent otherwise.
   */
  stopSequence?: string;
  /** `text` parsed per the model's tool-call convention: what an OpenAI-style answer returns. */
  message: AssistantMessage;
  usage: Usage;
  timings: Timings;
  /** Backend instance id that served the turn. */
  backendId: string;
  /**
   * Short hashes (`shortBlockHash`, 16 hex) of the prompt's full blocks, in order, at most
   * `MAX_PROMPT_BLOCK_HASHES` (the first ones); empty with the prefix cache off. The edge keeps
   * them to place the trajectory by the pool's block index if it must move.
   */
  promptBlockHashes?: string[];
  /** With `cachePoints`: the tokens this turn computed under them, per TTL (absent without points). */
  cacheWrites?: CacheWrite[];
  /** With `kvSource`: what the pull did (absent without a source). */
  kvPull?: KvPullReport;
  /** Of `usage.cachedTokens`, those brought back from the backend's host tier (absent: it has none). */
  hostTierTokens?: number;
  /** Tokens per KV block on this backend (a full turn reuses whole blocks only). */
  blockSize?: number;
  /**
   * The first prompt block the cache lacked was cached here once: how long ago it was evicted, why
   * (`lru`, or LRU after its lease was `lease-broken`, `lease-capped` or `lease-expired`) and from
   * which tier (`pool`, `host-tier`). Absent when it was never cached here, or is too long gone.
   */
  evicted?: BlockEviction;
  /** Speculative decoding on this turn: draft tokens verified and accepted (absent: it did not speculate). */
  speculation?: Speculation;
}

/** A turn's speculative decoding: draft tokens verified, and of those, accepted (the model's own tokens). */
export interface Speculation {
  drafted: number;
  accepted: number;
}

/** Why a cached block was evicted: plain LRU, or LRU after its lease ended early (broken, capped) or ran out. */
export const EVICTED_BY = ["lru", "lease-broken", "lease-capped", "lease-expired"] as const;
/** Which tier a block left the backend from. */
export const EVICTED_FROM = ["pool", "host-tier"] as const;

/** See `DoneFrame.evicted`. */
export interface BlockEviction {
  agoMs: number;
  by: (typeof EVICTED_BY)[number];
  from: (typeof EVICTED_FROM)[number];
}

/** Most prompt block hashes one done frame carries (64 KiB of hex; 65,536 tokens at block size 16). */
export const MAX_PROMPT_BLOCK_HASHES = 4096;

export interface ErrorFrame {
  type: "error";
  code: ErrorCode;
  message: string;
  /** True when the same request may succeed later or elsewhere. */
  retryable: boolean;
  /**
   * `overloaded` only: the backend's estimate of the seconds until its queue has drained (queued
   * prompt tokens / its measured prefill rate, rounded up, 1..MAX_RETRY_AFTER_S): the edge's
   * `Retry-After`. Absent before the backend has measured its prefill rate (the edge answers 1).
   */
  retryAfterS?: number;
}

export type Frame = TokenFrame | DoneFrame | ErrorFrame;

// Pool: heartbeats and their KV events (JSON, POST /v1/pool/heartbeat on the edge): pool-messages.ts
export * from "./pool-messages";

// KV transfer between backends (pulls, fetches, the block stream's header): kv-messages.ts
export * from "./kv-messages";

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/** Closed set of stable error codes, shared by backend and edge. */
export type ErrorCode =
  | "malformed_msgpack"
  | "invalid_request"
  | "unauthorized"
  | "unknown_model"
  | "state_unknown"
  | "context_length_exceeded"
  | "overloaded"
  | "not_found"
  | "payload_too_large"
  | "trajectory_busy"
  | "backend_unavailable"
  | "internal_error"
  | "invalid_schema"
  | "unsupported_schema"
  | "unknown_tool"
  | "max_tokens_too_small"
  | "limit_exceeded"
  | "headers_too_large"
  | "upgrade_required"
  | "response_already_in_flight"
  | "websocket_connection_limit_reached";
