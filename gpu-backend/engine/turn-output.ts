import type { BlockHash } from "../../protocol/block-hash";
import type { AssistantMessage, DoneFrame, FinishReason } from "../../protocol/messages";
import type { EvictionLog } from "../kv/eviction-log";
import type { ChatCodec } from "./chat-codec";
import type { Job } from "./job";
import type { BuiltPrompt } from "./prompt-builder";
import type { TurnState } from "./state-store";
import { timingsOf, usageOf } from "./turn-figures";

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
