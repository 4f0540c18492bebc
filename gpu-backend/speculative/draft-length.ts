/**
 * The cost of a decode step that computes `numTokens` tokens of one sequence (its last token plus
 * numTokens - 1 drafted ones), relative to a plain decode step: stepCost(1) = 1.
 */
export type StepCost = (numTokens: number) => number;

/** How {@link DraftLength} chooses. */
export interface DraftLengthOptions {
  /** Longest draft (default 16). */
  maxLength?: number;
  /**
   * What one drafted token costs in a decode step of one sequence, relative to that plain step
   * (default 0.1); with more sequences decoding together it costs more ({@link batchedDraftCost}).
   */
  perDraftToken?: number;
  /** Weight of the past per step (default 0.8: the last five or so verifications count most). */
  decay?: number;
  /** Per-token acceptance assumed before any verification (default 0.5). */
  initialAcceptance?: number;
  /** While off, a probe every this many steps (default 32). */
  probeEvery?: number;
  /** Tokens a probe drafts (default 4). */
  probeLength?: number;
}

/**
 * A step cost that grows linearly: 1 + perDraftToken x (numTokens - 1). From a fitted step model
 * (bench/studies/step-costs.ts), perDraftToken = (perRow + perLogitRow) / (perStep + perRow + perLogitRow).
 * @example linearStepCost(0.05)(9) // 1.4: verifying 8 drafted tokens costs 1.4 plain steps
 */
export function linearStepCost(perDraftToken: number): StepCost {
  return (numTokens) => 1 + perDraftToken * (numTokens - 1);
}

/**
 * What one drafted token costs relative to a sequence's share of a plain decode step when `batch`
 * sequences decode together: the step's fixed part (reading the weights, its overhead) is shared
 * by the batch, a row's own part (its products, its LM-head row, its attention) is not. At batch 1
 * the fixed part is (1 / perDraftToken - 1) rows' worth. On the cpu executor 8 agent trajectories
 * decoding together ran 4-7% faster with no drafts at all, single-stream decode 10-13% slower
 * (`npm run bench -- llamacpp --only ours`, int4, AVX2, 2026-12-07): drafts pay at batch 1, not at 8.
 * @example batchedDraftCost(0.1, 1) // 0.1
 * @example batchedDraftCost(0.1, 8) // 0.47: a draft token is now nearly half a sequence's step
 */
export function batchedDraftCost(perDraftToken: number, batch: number): number {
  return 1 / ((1 / perDraftToken - 1) / Math.max(1, batch) + 1);
}

/**
 * Tokens a step yields with a draft of k tokens when each drafted token is accepted with
 * probability `acceptance` (until the first rejection), the model's own token included:
 * 1 + a + a^2 + ... + a^k.
 * @example expectedTokensPerStep(0.5, 2) // 1.75
 */
export function expectedTokensPerStep(acceptance: number, k: number): number {
  if (acceptance >= 1) return k + 1;
  return (1 - acceptance ** (k + 1)) / (1 - acceptance);
}

/**
 * The draft length that maximizes tokens per unit of step cost at a per-token acceptance, and
 * that ratio (the speedup over plain decoding it predicts); length 0 (ratio 1) when no draft
 * pays, that is when every k has expected accepted tokens, expectedTokensPerStep - 1, at or below
 * the extra cost of its step, stepCost(k + 1) - 1.
 * @example bestDraftLength(0.9, 16, linearStepCost(0.1)) // { length: 10, speedup: 3.43... }
 */
export function bestDraftLength(acceptance: number, maxLength: number, stepCost: StepCost): { length: number; speedup: number } {
  let best = { length: 0, speedup: 1 };
  for (let k = 1; k <= maxLength; k++) {
    const speedup = expectedTokensPerStep(acceptance, k) / stepCost(k + 1);
    if (speedup > best.speedup) best = { length: k, speedup };
  }
  return best;
}

/**
 * One sequence's adaptive draft length, from its recent acceptance: the engine holds one per
 * sequence, asks {@link next} before drafting and tells {@link record} what verification kept.
 *
 * The per-token acceptance is estimated as accepted / (accepted + rejections) over the recent
 * verifications (decayed sums; a verification that kept a of k drafted tokens counts a
 * acceptances and, when a < k, one rejection), and the length is the one
 * {@link bestDraftLength} picks for it: it grows while drafts are accepted and shrinks as they
 * are rejected, down to 0 (off) when no length pays for its verification. While off, every
 * `probeEvery` steps one probe of `probeLength` tokens tests whether drafting pays again.
 *
 * @example
 * const length = new DraftLength({ perDraftToken: 0.05 });
 * const k = length.next();            // 0: don't draft this step
 * const draft = source.propose(context, k);
 * length.record(draft.length, accepted);
 */
export class DraftLength {
  private readonly maxLength: number;
  private readonly perDraftToken: number;
  private readonly decay: number;
  private readonly probeEvery: number;
  private readonly probeLength: number;
  private accepted: number;
  private rejected: number;
  private stepsOff = 0;

  /** @example new DraftLength({ maxLength: 8 }) */
  constructor(options: DraftLengthOptions = {}) {
    this.maxLength = options.maxLength ?? 16;
    this.perDraftToken = options.perDraftToken ?? 0.1;
    this.decay = options.decay ?? 0.8;
    this.probeEvery = options.probeEvery ?? 32;
    this.probeLength = Math.min(options.probeLength ?? 4, this.maxLength);
    const initial = options.initialAcceptance ?? 0.5;
    this.accepted = initial;
    this.rejected = 1 - initial;
    if (!(this.maxLength >= 1 && this.decay > 0 && this.decay <= 1 && this.probeEvery >= 1 && initial >= 0 && initial <= 1)) {
      throw new Error(`DraftLength: bad options ${JSON.stringify({ maxLength: this.maxLength, decay: this.decay, probeEvery: this.probeEvery, initial })}`);
    }
  }

  /** The estimated per-token acceptance, in [0, 1]. @example length.acceptance() // 0.93 */
  acceptance(): number {
    return this.accepted / (this.accepted + this.rejected);
  }

  /** The length the estimate picks (0: off) with `batch` sequences decoding, without a probe. @example length.length() // 9 */
  length(batch = 1): number {
    return bestDraftLength(this.acceptance(), this.maxLength, linearStepCost(batchedDraftCost(this.perDraftToken, batch))).length;
  }

  /**
   * How many tokens to draft this step with `batch` sequences decoding (0: none; counts a step off
   * toward the next probe). @example source.propose(context, length.next(decoding))
   */
  next(batch = 1): number {
    const k = this.length(batch);
    if (k > 0) {
      this.stepsOff = 0;
      return k;
    }
    if (++this.stepsOff < this.probeEvery) return 0;
    this.stepsOff = 0;
    return this.probeLength;
  }

  /**
   * What verifying a draft kept: `accepted` of its `drafted` tokens (a step that drafted nothing
   * teaches nothing and is ignored).
   * @example length.record(4, 4) // all accepted: the length grows
   */
  record(drafted: number, accepted: number): void {
    if (drafted <= 0) return;
    if (!(accepted >= 0 && accepted <= drafted)) throw new Error(`DraftLength.record: accepted ${accepted} of ${drafted} drafted`);
    this.accepted = this.decay * this.accepted + accepted;
    this.rejected = this.decay * this.rejected + (accepted < drafted ? 1 : 0);
  }
}
