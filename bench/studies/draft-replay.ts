import type { DraftSource } from "../../gpu-backend/speculative/draft-source";

/** How many tokens to draft at each step, and what verification kept (DraftLength, or a fixed length). */
export interface DraftLengthPolicy {
  next(): number;
  record(drafted: number, accepted: number): void;
}

/** What replaying one reply through a draft source found. */
export interface ReplayCounts {
  /** Tokens of the reply. */
  replyTokens: number;
  /** Steps taken (verifications plus plain steps); plain decoding takes replyTokens. */
  steps: number;
  /** Draft tokens proposed, and those the reply's true next tokens confirmed. */
  drafted: number;
  accepted: number;
}

/**
 * A fixed draft length (no adaptation).
 * @example fixedLength(8).next() // 8
 */
export function fixedLength(k: number): DraftLengthPolicy {
  return { next: () => k, record: () => {} };
}

/**
 * Replays a reply as greedy speculative decoding would meet it, with the reply's true tokens
 * standing for the model's: each step asks the policy for a length, the source for a draft of
 * the context so far (prompt plus the reply's tokens up to there, one array that grows in place,
 * as the engine's sequence does), keeps the draft's longest prefix that matches the reply, and
 * adds the next true token (the one the verifying model computes itself). The reply is not
 * observed; the caller decides when a source learns it.
 *
 * @example
 * const counts = replayReply(new SequenceLookup(), "t", prompt, reply, fixedLength(8));
 * counts.accepted / counts.replyTokens; // the fraction of the reply drafts covered
 */
export function replayReply(source: DraftSource, tenant: string, prompt: readonly number[], reply: readonly number[], policy: DraftLengthPolicy): ReplayCounts {
  const tokenIds = [...prompt];
  const counts: ReplayCounts = { replyTokens: reply.length, steps: 0, drafted: 0, accepted: 0 };
  let at = 0;
  while (at < reply.length) {
    const k = policy.next();
    const draft = k > 0 ? source.propose({ tenant, tokenIds, numPromptTokens: prompt.length }, k).slice(0, k) : [];
    let accepted = 0;
    while (accepted < draft.length && at + accepted < reply.length && draft[accepted] === reply[at + accepted]) accepted++;
    policy.record(draft.length, accepted);
    counts.drafted += draft.length;
    counts.accepted += accepted;
    counts.steps++;
    const take = Math.min(accepted + 1, reply.length - at);
    for (let i = 0; i < take; i++) tokenIds.push(reply[at + i]!);
    at += take;
  }
  return counts;
}

/**
 * Sums replays.
 * @example sumCounts([a, b]).accepted === a.accepted + b.accepted
 */
export function sumCounts(all: readonly ReplayCounts[]): ReplayCounts {
  return all.reduce((s, c) => ({ replyTokens: s.replyTokens + c.replyTokens, steps: s.steps + c.steps, drafted: s.drafted + c.drafted, accepted: s.accepted + c.accepted }), { replyTokens: 0, steps: 0, drafted: 0, accepted: 0 });
}
