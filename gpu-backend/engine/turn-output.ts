import { shortBlockHash, type BlockHash } from "../../protocol/block-hash";
import { MAX_PROMPT_BLOCK_HASHES, type AssistantMessage, type DoneFrame, type FinishReason, type Frame, type GenerateRequest, type TokenLogprob } from "../../protocol/messages";
import type { EvictionLog } from "../kv/eviction-log";
import type { KvCacheManager } from "../kv/kv-cache-manager";
import type { ChatCodec } from "./chat-codec";
import type { EngineParts } from "./engine-options";
import type { Job, SequenceCache } from "./job";
import type { BuiltPrompt } from "./prompt-builder";
import type { TurnState } from "./state-store";
import { timingsOf, usageOf } from "./turn-figures";

/**
 * Output, the engine's third part: takes a sampled token into the job's output. Appends it to the
 * sequence (the KV manager reads the sequence's own tokens), decodes it through the stop strings
 * and streams its text. Returns
 * how the job ends with it, if it does: a stop token, a stop string, or the budget (unless
 * `complete`: the constraint's structure ended, and the caller finishes the job with "stop").
 *
 * @example const reason = acceptToken(job, tokenId, logprob); if (reason) finish(job, reason);
 */
export function acceptToken(job: Job, tokenId: number, logprob: TokenLogprob | undefined, complete = false): FinishReason | undefined {
  const seq = job.seq;
  const now = performance.now();
  job.firstTokenMs ??= now;
  job.lastTokenMs = now;
  seq.tokenIds.push(tokenId);
  if (job.stopTokenIds.has(tokenId)) return "stop";
  const { emit, stopped } = job.stops.push(job.decoder.push(tokenId));
  job.sink({ type: "token", tokenIds: [tokenId], text: emit, ...(logprob ? { logprobs: [logprob] } : {}), ...(job.reply ? { reply: job.reply.push(emit) } : {}) });
  if (stopped) return "stop_sequence";
  if (seq.numGenerated >= seq.maxTokens && !complete) return "length";
  return undefined;
}

/**
 * A job's output at its end, before its sequence is freed: the hashes of the prompt's computed
 * full blocks (for the done frame), the text the decoder and the stop strings held back, and the
 * partial last block kept for its turn state.
 *
 * @example closeOutput(job, "length", kv); scheduler.finish(job.seq);
 */
export function closeOutput(job: Job, reason: FinishReason, kv: KvCacheManager): void {
  if (reason !== "cancelled" && kv.has(job.seq.seqId)) {
    const full = Math.min(Math.floor(job.seq.numPromptTokens / kv.blockSize), MAX_PROMPT_BLOCK_HASHES);
    job.promptBlockHashes = kv.blockHashes(job.seq.seqId).slice(0, full).map(shortBlockHash);
  }
  if (reason !== "cancelled") {
    // Bytes that never formed a whole character come out here, then any held-back text (a stop
    // sequence's text was cut: none); the reply's splitter settles what it held.
    const rest = reason === "stop_sequence" ? "" : job.stops.push(job.decoder.flush()).emit + job.stops.flush();
    const reply = job.reply?.finish(rest);
    if (rest || (reply && (reply.content !== undefined || reply.toolCalls !== undefined))) job.sink({ type: "token", tokenIds: [], text: rest, ...(reply ? { reply } : {}) });
  }
  // The turn state keeps the partial last block (a stop sequence's state drops the generated tokens: nothing to keep).
  if (reason !== "cancelled" && reason !== "stop_sequence") job.seq.keepTailAs = job.stateId;
}

/** A chat turn as its intake left it: what its end needs to keep its state and answer. */
export interface ChatTurn {
  req: GenerateRequest;
  prompt: BuiltPrompt;
  root: BlockHash;
  cache: SequenceCache;
  /** Whether the reply is parsed for tool calls (the reply plan's `parseToolCalls`). */
  parseToolCalls: boolean;
  sink: (frame: Frame) => void;
}

/**
 * A chat turn's end (not a cancelled one): its state is kept for the next turn, its cache points
 * are leased, and the done frame goes out.
 *
 * @example job.onFinish = (reason, job) => endChatTurn(parts, turn, reason, job);
 */
export function endChatTurn(parts: EngineParts, turn: ChatTurn, reason: FinishReason, job: Job): void {
  if (reason === "cancelled") return;
  const { req, prompt, root, cache } = turn;
  const { codec, backendId } = parts.options;
  const stateId = cache.stateId!;
  const text = job.stops.fullText;
  // The reply as the template will render it next turn: a well-formed tool call re-renders
  // to the very text generated, so the next turn's prompt keeps the generated ids.
  // Its calls keep the ids they streamed with (token frames' `reply`).
  const message = turn.parseToolCalls ? codec.parseAssistant(text, job.reply?.ids) : { role: "assistant" as const, content: text };
  parts.states.put(keptState(job, { reason, stateId, message, prompt, root, trajectoryId: req.trajectoryId, cacheSalt: req.cacheSalt ?? "" }, codec));
  const cacheWrites = req.cachePoints?.length ? parts.leases.prefix.afterTurn(req.cachePoints, { ...prompt, tokenIds: job.seq.tokenIds.slice(0, job.seq.numPromptTokens), root, cachedTokens: job.seq.numCachedTokens }) : undefined;
  const done = doneFrameOf(job, { reason, stateId, text, message }, { backendId, blockSize: parts.kv.blockSize, evictions: parts.evictions, hostTier: parts.hostTier !== undefined });
  turn.sink({ ...done, ...(cacheWrites ? { cacheWrites } : {}), ...(cache.kvPull ? { kvPull: cache.kvPull } : {}) });
}

/** How a finished chat turn ended: its reason, the state it becomes, its text and parsed reply. */
export interface TurnEnd {
  reason: FinishReason;
  stateId: string;
  text: string;
  message: AssistantMessage;
}

/**
 * The turn's done frame: how it ended, its usage and timings, its prompt's block hashes and, for
 * cache-miss explanations, the eviction of its first missing block.
 */
export function doneFrameOf(job: Job, end: TurnEnd, ctx: { backendId: string; blockSize: number; evictions: EvictionLog; hostTier: boolean }): DoneFrame {
  return {
    type: "done",
    finishReason: end.reason,
    stateId: end.stateId,
    text: end.text,
    ...(end.reason === "stop_sequence" ? { stopSequence: job.stops.matched } : {}),
    message: end.message,
    usage: usageOf(job.seq),
    timings: timingsOf(job.seq, job.firstTokenMs, job.lastTokenMs),
    backendId: ctx.backendId,
    promptBlockHashes: job.promptBlockHashes,
    blockSize: ctx.blockSize,
    ...ctx.evictions.doneField(job.seq.blockHashes[Math.floor(job.seq.numCachedTokens / ctx.blockSize)]),
    ...(ctx.hostTier ? { hostTierTokens: job.seq.hostTierTokens ?? 0 } : {}),
    ...(job.speculation ? { speculation: { drafted: job.speculation.drafted, accepted: job.speculation.accepted } } : {}),
  };
}

/**
 * The token state a finished chat turn leaves for the next one (delta turns): the transcript with
 * its reply, the exact prompt ids and the generated ids (none after a stop sequence, whose text
 * was cut).
 */
export function keptState(
  job: Job,
  t: { reason: FinishReason; stateId: string; message: AssistantMessage; prompt: BuiltPrompt; root: BlockHash; trajectoryId: string | undefined; cacheSalt: string },
  codec: ChatCodec,
): TurnState {
  const generated = job.seq.tokenIds.slice(job.seq.numPromptTokens);
  const cut = t.reason === "stop_sequence";
  return {
    stateId: t.stateId,
    trajectoryId: t.trajectoryId,
    hashRoot: t.root,
    cacheSalt: t.cacheSalt,
    messages: [...t.prompt.messages, t.message],
    tools: t.prompt.tools,
    promptText: t.prompt.promptText,
    promptTokenIds: job.seq.tokenIds.slice(0, job.seq.numPromptTokens),
    generatedTokenIds: cut ? [] : generated,
    generatedText: cut ? "" : codec.decode(generated),
  };
}
