import { linearStepCost, type StepCost } from "./draft-length";

/**
 * What a drafted token costs on this backend, measured from its own decode steps: the step cost
 * `DraftLength` weighs drafts with. A drafted token's cost is counted against one sequence's share
 * of a plain decode step, since that is what the draft competes with: at batch 1 a plain step
 * yields one token, at batch 8 the same step yields eight, so a drafted token that costs 1.2 ms
 * is worth 0.1 of a step at batch 1 (12 ms) but 0.32 at batch 8 (30 ms for 8 tokens) on this
 * CPU, and drafts on text that copies little pay at batch 1 but not at batch 8.
 *
 * Two decayed means over decode-only steps (no prefill chunk in them): a plain step's wall time
 * per sequence (steps without drafts), and the extra wall time per drafted token (steps with
 * drafts: their time less the plain time of their sequences, over their drafted tokens). Until
 * both are measured it answers `fallback` (0.1 of a step per drafted token).
 *
 * @example
 * const cost = new DraftCostMeter();
 * cost.note(8, 0, 30);   // a plain step of 8 sequences: 3.75 ms each
 * cost.note(8, 16, 49);  // 16 drafted tokens added 19 ms
 * cost.perDraftToken;    // 1.19 ms / 3.75 ms = 0.32
 * new DraftLength({ stepCost: cost.stepCost });
 */
export class DraftCostMeter {
  private perSequenceMs: number | null = null;
  private perDraftMs: number | null = null;

  constructor(
    /** Weight of the past per step. */
    private readonly decay = 0.9,
    /** Cost per drafted token (in plain steps) until measured. */
    private readonly fallback = 0.1,
  ) {}

  /** One decode-only step: its sequences, the tokens drafted in it (0: a plain step), its wall time. */
  note(sequences: number, drafted: number, wallMs: number): void {
    if (sequences <= 0 || !(wallMs >= 0)) return;
    if (drafted === 0) this.perSequenceMs = this.mean(this.perSequenceMs, wallMs / sequences);
    else if (this.perSequenceMs !== null) this.perDraftMs = this.mean(this.perDraftMs, Math.max(0, wallMs - this.perSequenceMs * sequences) / drafted);
  }

  /** A drafted token's cost, in plain steps of one sequence (between 0.01 and 4). */
  get perDraftToken(): number {
    if (this.perSequenceMs === null || this.perDraftMs === null || this.perSequenceMs <= 0) return this.fallback;
    return Math.min(4, Math.max(0.01, this.perDraftMs / this.perSequenceMs));
  }

  /** The cost of a step of numTokens tokens for one sequence, at the current measurement. */
  readonly stepCost: StepCost = (numTokens) => linearStepCost(this.perDraftToken)(numTokens);

  private mean(prev: number | null, x: number): number {
    return prev === null ? x : this.decay * prev + (1 - this.decay) * x;
  }
}
