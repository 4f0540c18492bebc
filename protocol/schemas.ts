import { z } from "zod";
import { ERROR_CODES } from "./errors";
import { kvPullReportSchema } from "./kv-schemas";
import type { Assert, Equals } from "./schema-parts";
import { array, boolean, count, expect, integer, map, milliseconds, nonEmptyString, oneOf, positiveMilliseconds, shortBlockHash, string, tokenId } from "./schema-parts";
import type {
  BlockEviction,
  CachePoint,
  CacheWrite,
  AssistantMessage,
  ChatMessage,
  DoneFrame,
  Speculation,
  ErrorCode,
  ErrorFrame,
  FinishReason,
  Frame,
  GenerateRequest,
  Heartbeat,
  HeartbeatReply,
  KvEventBatch,
  LeaseRequest,
  LeaseResponse,
  ReleaseLeaseRequest,
  ReleaseLeaseResponse,
  ReleaseStateRequest,
  JsonAnswer,
  ReplyConstraint,
  Role,
  SamplingParams,
  Timings,
  TokenFrame,
  ReplyDelta,
  ToolCallDelta,
  TokenizeRequest,
  TokenizeResponse,
  TokenLogprob,
  ToolCall,
  ToolDefinition,
  TopLogprob,
  Usage,
} from "./messages";
import { EVICTED_BY, EVICTED_FROM, MAX_CACHE_POINTS, MAX_KV_EVENTS_PER_BATCH, MAX_PROMPT_BLOCK_HASHES, MAX_TOP_LOGPROBS } from "./messages";

/**
 * Zod schemas for every message decoded from the wire, typed to match `messages.ts` exactly: each
 * schema `satisfies z.ZodType<T>` and a type-level equality check at the bottom of this file turns
 * any drift between a schema and its TypeScript type (a field added, removed, made optional or
 * retyped on either side) into a compile error.
 *
 * Issue messages are phrased to follow the field path, which `codec.ts` prepends:
 * "sampling.maxTokens must be an integer >= 1", "messages[0].role is required".
 * Unknown keys are stripped (a newer peer may add fields), never an error.
 */

// KV transfer between backends: kv-schemas.ts
export * from "./kv-schemas";

export const ROLES = ["system", "user", "assistant", "tool"] as const satisfies readonly Role[];
export const FINISH_REASONS = ["stop", "length", "stop_sequence", "cancelled"] as const satisfies readonly FinishReason[];
export const GENERATE_MODES = ["full", "delta"] as const satisfies readonly GenerateRequest["mode"][];

/** True for a tree of JSON values (null, boolean, finite number, string, array, plain object). */
function isJsonValue(value: unknown, depth = 0): boolean {
  if (depth > 64) return false;
  if (value === null || typeof value === "string" || typeof value === "boolean") return true;
  if (typeof value === "number") return Number.isFinite(value);
  if (Array.isArray(value)) return value.every((v) => isJsonValue(v, depth + 1));
  if (typeof value === "object") {
    const proto: unknown = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) return false;
    return Object.values(value).every((v) => isJsonValue(v, depth + 1));
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

export const toolCallSchema = map({
  id: string,
  type: z.literal("function", expect('must be "function"')),
  function: map({ name: nonEmptyString, arguments: string }),
}) satisfies z.ZodType<ToolCall>;

export const chatMessageSchema = map({
  role: z.enum(ROLES, expect(oneOf(ROLES))),
  content: z.string(expect("must be a string or null")).nullable(),
  tool_calls: array(toolCallSchema).optional(),
  tool_call_id: string.optional(),
  name: string.optional(),
}) satisfies z.ZodType<ChatMessage>;

export const toolDefinitionSchema = map({
  type: z.literal("function", expect('must be "function"')),
  function: map({
    name: nonEmptyString,
    description: string.optional(),
    parameters: z
      .record(z.string(), z.unknown(), expect("must be a map"))
      .refine((v) => isJsonValue(v), "must hold only JSON values (null, booleans, finite numbers, strings, arrays, maps)")
      .optional(),
    strict: boolean.optional(),
  }),
}) satisfies z.ZodType<ToolDefinition>;

const jsonMap = z
  .record(z.string(), z.unknown(), expect("must be a map"))
  .refine((v) => isJsonValue(v), "must hold only JSON values (null, booleans, finite numbers, strings, arrays, maps)");

const TOOL_CHOICE_MODES = ["auto", "required", "none"] as const;

const jsonObjectAnswer = map({ type: z.literal("json_object") });
const jsonSchemaAnswer = map({ type: z.literal("json_schema"), schema: jsonMap, strict: boolean });
const jsonAnswerSchema = z.discriminatedUnion("type", [jsonObjectAnswer, jsonSchemaAnswer], expect('must be a map with type "json_object" or "json_schema"')) satisfies z.ZodType<JsonAnswer>;

export const replyConstraintSchema = z.discriminatedUnion(
  "type",
  [
    jsonObjectAnswer,
    jsonSchemaAnswer,
    map({
      type: z.literal("tool_calls"),
      choice: z.union([z.enum(TOOL_CHOICE_MODES), map({ name: nonEmptyString })], expect(`must be ${oneOf(TOOL_CHOICE_MODES)} or a map {name}`)),
      parallel: boolean,
      answer: jsonAnswerSchema.optional(),
    }),
  ],
  expect('must be a map with type "json_object", "json_schema" or "tool_calls"'),
) satisfies z.ZodType<ReplyConstraint>;

export const samplingParamsSchema = map({
  maxTokens: integer(1).optional(),
  temperature: z.number(expect("must be a finite number >= 0")).min(0, "must be a finite number >= 0"),
  topP: z
    .number(expect("must be a number in (0, 1]"))
    .gt(0, "must be a number in (0, 1]")
    .max(1, "must be a number in (0, 1]"),
  topK: count,
  seed: z.number(expect("must be an integer")).int("must be an integer").optional(),
  stop: array(nonEmptyString),
  stopTokenIds: array(tokenId),
  ignoreEos: boolean.optional(),
  logprobs: integer(0, MAX_TOP_LOGPROBS).optional(),
}) satisfies z.ZodType<SamplingParams>;

export const generateRequestSchema = map({
  requestId: nonEmptyString,
  model: string.optional(),
  trajectoryId: string.optional(),
  cacheSalt: string.optional(),
  mode: z.enum(GENERATE_MODES, expect(oneOf(GENERATE_MODES))),
  messages: array(chatMessageSchema).min(1, "must be a non-empty array"),
  stateId: nonEmptyString.optional(),
  forkOf: nonEmptyString.optional(),
  tools: array(toolDefinitionSchema).optional(),
  sampling: samplingParamsSchema,
  thinking: boolean.optional(),
  constraint: replyConstraintSchema.optional(),
  cachePoints: array(map({ messages: count, ttlMs: positiveMilliseconds }) satisfies z.ZodType<CachePoint>)
    .max(MAX_CACHE_POINTS, `must hold at most ${MAX_CACHE_POINTS} points`)
    .optional(),
  kvSource: map({ url: nonEmptyString, backendId: string.optional() }).optional(),
  speculative: boolean.optional(),
}).refine((r) => r.mode !== "delta" || r.stateId !== undefined, {
  path: ["stateId"],
  error: 'is required when mode is "delta"',
}) satisfies z.ZodType<GenerateRequest>;

export const releaseStateRequestSchema = map({
  stateId: nonEmptyString,
}) satisfies z.ZodType<ReleaseStateRequest>;

export const tokenizeRequestSchema = map({
  model: string.optional(),
  messages: array(chatMessageSchema).min(1, "must be a non-empty array"),
  tools: array(toolDefinitionSchema).optional(),
  thinking: boolean.optional(),
}) satisfies z.ZodType<TokenizeRequest>;

export const tokenizeResponseSchema = map({
  promptTokens: count,
}) satisfies z.ZodType<TokenizeResponse>;

export const leaseRequestSchema = map({
  stateId: nonEmptyString,
  ttlMs: positiveMilliseconds,
  expectedReturnMs: positiveMilliseconds.optional(),
}) satisfies z.ZodType<LeaseRequest>;

export const releaseLeaseRequestSchema = map({
  stateId: nonEmptyString,
  expired: boolean.optional(),
}) satisfies z.ZodType<ReleaseLeaseRequest>;

export const leaseResponseSchema = map({
  leased: boolean,
  blocks: count,
  expiresAt: milliseconds,
}) satisfies z.ZodType<LeaseResponse>;

export const releaseLeaseResponseSchema = map({
  released: boolean,
  hit: boolean.optional(),
}) satisfies z.ZodType<ReleaseLeaseResponse>;

// ---------------------------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------------------------

export const usageSchema = map({
  promptTokens: count,
  cachedTokens: count,
  computedTokens: count,
  completionTokens: count,
}).refine((u) => u.cachedTokens <= u.promptTokens, {
  path: ["cachedTokens"],
  error: "must be <= promptTokens",
}) satisfies z.ZodType<Usage>;

export const timingsSchema = map({
  queueMs: milliseconds,
  prefillMs: milliseconds,
  ttftMs: milliseconds,
  decodeMs: milliseconds,
  totalMs: milliseconds,
}) satisfies z.ZodType<Timings>;

export const assistantMessageSchema = map({
  role: z.literal("assistant", expect('must be "assistant"')),
  content: z.string(expect("must be a string or null")).nullable(),
  tool_calls: array(toolCallSchema).optional(),
}) satisfies z.ZodType<AssistantMessage>;

/** A log probability: finite, <= 0 (the backend clamps -Infinity to -9999, as OpenAI does). */
const logprob = z.number(expect("must be a finite number <= 0")).max(0, "must be a finite number <= 0").min(-Number.MAX_VALUE, "must be a finite number <= 0");

export const topLogprobSchema = map({
  token: string,
  bytes: array(integer(0, 255)),
  logprob,
}) satisfies z.ZodType<TopLogprob>;

export const tokenLogprobSchema = map({
  token: string,
  bytes: array(integer(0, 255)),
  logprob,
  topLogprobs: array(topLogprobSchema).max(MAX_TOP_LOGPROBS, `must hold at most ${MAX_TOP_LOGPROBS} entries`),
}) satisfies z.ZodType<TokenLogprob>;

export const toolCallDeltaSchema = map({
  index: count,
  id: string.optional(),
  name: string.optional(),
  arguments: string.optional(),
}) satisfies z.ZodType<ToolCallDelta>;

export const replyDeltaSchema = map({
  content: string.optional(),
  toolCalls: array(toolCallDeltaSchema).optional(),
}) satisfies z.ZodType<ReplyDelta>;

export const tokenFrameSchema = map({
  type: z.literal("token"),
  tokenIds: array(tokenId),
  text: string,
  logprobs: array(tokenLogprobSchema).optional(),
  reply: replyDeltaSchema.optional(),
}).refine((f) => f.logprobs === undefined || f.logprobs.length === f.tokenIds.length, {
  path: ["logprobs"],
  error: "must hold one entry per token id",
}) satisfies z.ZodType<TokenFrame>;

export const doneFrameSchema = map({
  type: z.literal("done"),
  finishReason: z.enum(FINISH_REASONS, expect(oneOf(FINISH_REASONS))),
  stateId: nonEmptyString,
  text: string,
  stopSequence: nonEmptyString.optional(),
  message: assistantMessageSchema,
  usage: usageSchema,
  timings: timingsSchema,
  backendId: string,
  promptBlockHashes: array(shortBlockHash)
    .max(MAX_PROMPT_BLOCK_HASHES, `must hold at most ${MAX_PROMPT_BLOCK_HASHES} hashes`)
    .optional(),
  cacheWrites: array(map({ ttlMs: positiveMilliseconds, tokens: count }) satisfies z.ZodType<CacheWrite>)
    .max(MAX_CACHE_POINTS, `must hold at most ${MAX_CACHE_POINTS} entries`)
    .optional(),
  hostTierTokens: count.optional(),
  blockSize: count.optional(),
  evicted: map({
    agoMs: count,
    by: z.enum(EVICTED_BY, expect(oneOf(EVICTED_BY))),
    from: z.enum(EVICTED_FROM, expect(oneOf(EVICTED_FROM))),
  }).optional() satisfies z.ZodType<BlockEviction | undefined>,
  kvPull: kvPullReportSchema.optional(),
  speculation: map({ drafted: count, accepted: count }).optional() satisfies z.ZodType<Speculation | undefined>,
}) satisfies z.ZodType<DoneFrame>;

export const errorFrameSchema = map({
  type: z.literal("error"),
  code: z.enum(ERROR_CODES, expect(oneOf(ERROR_CODES))),
  message: string,
  retryable: boolean,
  retryAfterS: integer(1).optional(),
}) satisfies z.ZodType<ErrorFrame>;

const FRAME_TYPES = ["token", "done", "error"] as const satisfies readonly Frame["type"][];

export const frameSchema = z.discriminatedUnion("type", [tokenFrameSchema, doneFrameSchema, errorFrameSchema], {
  error: (issue) => {
    const input = issue.input;
    if (typeof input !== "object" || input === null || Array.isArray(input)) return "must be a map";
    return "type" in input ? oneOf(FRAME_TYPES) : "is required";
  },
}) satisfies z.ZodType<Frame>;

// ---------------------------------------------------------------------------------------------
// Heartbeats (JSON, backend -> edge pool)
// ---------------------------------------------------------------------------------------------

export const kvEventBatchSchema = map({
  seq: integer(1),
  kind: z.enum(["delta", "snapshot"], expect(oneOf(["delta", "snapshot"]))),
  stored: array(shortBlockHash),
  removed: array(shortBlockHash),
  offloaded: array(shortBlockHash).optional(),
})
  .refine((b) => b.stored.length + b.removed.length + (b.offloaded?.length ?? 0) <= MAX_KV_EVENTS_PER_BATCH, { message: `must hold at most ${MAX_KV_EVENTS_PER_BATCH} hashes` })
  .refine((b) => b.kind === "delta" || b.removed.length === 0, { path: ["removed"], message: "must be empty in a snapshot" }) satisfies z.ZodType<KvEventBatch>;

const fraction = z.number(expect("must be a number in [0, 1]")).min(0, "must be a number in [0, 1]").max(1, "must be a number in [0, 1]");
const nonNegative = z.number(expect("must be a finite number >= 0")).min(0, "must be a finite number >= 0").max(Number.MAX_VALUE, "must be a finite number >= 0");

export const heartbeatSchema = map({
  id: z.string(expect("must be a string")).regex(/^[A-Za-z0-9._:-]{1,128}$/, "must be 1-128 characters of [A-Za-z0-9._:-]"),
  url: z.url(expect("must be an http(s) URL")),
  model: nonEmptyString,
  kvCapacityBlocks: count,
  running: count,
  waiting: count,
  kvUsage: fraction,
  tokensPerS: nonNegative,
  loadAvg: nonNegative.optional(),
  queuedTokens: count.optional(),
  prefillTokensPerS: nonNegative.optional(),
  draining: boolean.optional(),
  leaving: boolean.optional(),
  kvEvents: kvEventBatchSchema.optional(),
}) satisfies z.ZodType<Heartbeat>;

export const heartbeatReplySchema = map({
  registered: boolean,
  kv: z.enum(["ok", "resync"], expect(oneOf(["ok", "resync"]))).optional(),
  peers: array(nonEmptyString).optional(),
}) satisfies z.ZodType<HeartbeatReply>;

// ---------------------------------------------------------------------------------------------
// Drift checks: each line fails to compile when a schema and its messages.ts type differ.
// ---------------------------------------------------------------------------------------------


export type SchemaDriftChecks = [
  Assert<Equals<z.output<typeof toolCallSchema>, ToolCall>>,
  Assert<Equals<z.output<typeof chatMessageSchema>, ChatMessage>>,
  Assert<Equals<z.output<typeof toolDefinitionSchema>, ToolDefinition>>,
  Assert<Equals<z.output<typeof samplingParamsSchema>, SamplingParams>>,
  Assert<Equals<z.output<typeof replyConstraintSchema>, ReplyConstraint>>,
  Assert<Equals<z.output<typeof generateRequestSchema>, GenerateRequest>>,
  Assert<Equals<z.output<typeof releaseStateRequestSchema>, ReleaseStateRequest>>,
  Assert<Equals<z.output<typeof tokenizeRequestSchema>, TokenizeRequest>>,
  Assert<Equals<z.output<typeof tokenizeResponseSchema>, TokenizeResponse>>,
  Assert<Equals<z.output<typeof leaseRequestSchema>, LeaseRequest>>,
  Assert<Equals<z.output<typeof releaseLeaseRequestSchema>, ReleaseLeaseRequest>>,
  Assert<Equals<z.output<typeof leaseResponseSchema>, LeaseResponse>>,
  Assert<Equals<z.output<typeof releaseLeaseResponseSchema>, ReleaseLeaseResponse>>,
  Assert<Equals<z.output<typeof usageSchema>, Usage>>,
  Assert<Equals<z.output<typeof timingsSchema>, Timings>>,
  Assert<Equals<z.output<typeof assistantMessageSchema>, AssistantMessage>>,
  Assert<Equals<z.output<typeof topLogprobSchema>, TopLogprob>>,
  Assert<Equals<z.output<typeof tokenLogprobSchema>, TokenLogprob>>,
  Assert<Equals<z.output<typeof tokenFrameSchema>, TokenFrame>>,
  Assert<Equals<z.output<typeof doneFrameSchema>, DoneFrame>>,
  Assert<Equals<z.output<typeof errorFrameSchema>, ErrorFrame>>,
  Assert<Equals<z.output<typeof frameSchema>, Frame>>,
  Assert<Equals<z.output<typeof kvEventBatchSchema>, KvEventBatch>>,
  Assert<Equals<z.output<typeof heartbeatSchema>, Heartbeat>>,
  Assert<Equals<z.output<typeof heartbeatReplySchema>, HeartbeatReply>>,
  Assert<Equals<(typeof ROLES)[number], Role>>,
  Assert<Equals<(typeof FINISH_REASONS)[number], FinishReason>>,
  Assert<Equals<(typeof GENERATE_MODES)[number], GenerateRequest["mode"]>>,
  Assert<Equals<(typeof FRAME_TYPES)[number], Frame["type"]>>,
];
