import type { DoneFrame } from "../../protocol/messages";
import type { Sequence } from "../scheduler/sequence";

/**
 * A finished sequence's token counts, as the done frame reports them.
 *
 * @example usageOf(seq) // { promptTokens: 812, cachedTokens: 800, computedTokens: 12, completionTokens: 9 }
 */
export function usageOf(seq: Sequence): DoneFrame["usage"] {
  return {
    promptTokens: seq.numPromptTokens,
    cachedTokens: seq.numCachedTokens,
    computedTokens: seq.numPrefilledTokens,
    completionTokens: seq.numGenerated,
  };
}

/**
 * A sequence's phases in ms from its arrival: queued, prefilling, first token, decoding, total.
 * A sequence that produced no token yet counts its first token as now.
 *
 * @example timingsOf(seq, job.firstTokenMs, job.lastTokenMs).ttftMs
 */
export function timingsOf(seq: Sequence, firstTokenMs: number | undefined, lastTokenMs: number | undefined): DoneFrame["timings"] {
  const arrival = seq.arrivalMs;
  const scheduled = seq.firstScheduledMs ?? arrival;
  const first = firstTokenMs ?? performance.now();
  const last = lastTokenMs ?? first;
  return {
    queueMs: scheduled - arrival,
    prefillMs: first - scheduled,
    ttftMs: first - arrival,
    decodeMs: last - first,
    totalMs: performance.now() - arrival,
  };
}
