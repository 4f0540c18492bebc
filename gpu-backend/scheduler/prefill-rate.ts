import { retryAfterSeconds } from "../../protocol/errors";

/**
 * The backend's measured prefill rate: prompt tokens per second, a moving average over the engine
 * steps that carry at least `minTokens` prefill tokens (fewer, and the step's fixed cost and its
 * decode rows say nothing about prefill). A sample is the step's prefill tokens over its wall
 * time, decode rows included: the rate at which queued prompt tokens actually drain while the
 * backend also decodes. What the heartbeat reports (`prefillTokensPerS`) and what an overloaded
 * refusal's `retryAfterS` divides the queue by.
 *
 * Tunables: `minTokens` = 64 (the engine passes min(64, its step budget), so a backend whose
 * steps are smaller still measures); the average's weight of a new sample = 0.3.
 *
 * @example
 * const rate = new PrefillRate();
 * rate.noteStep(512, 380);
 * rate.tokensPerS; // 1347.4
 * rate.retryAfterS(16_384); // 13
 */
export class PrefillRate {
  private mean: number | undefined;

  constructor(private readonly minTokens = MIN_PREFILL_STEP_TOKENS) {}

  /** Notes one engine step: the prompt tokens it prefilled and its wall time. */
  noteStep(prefillTokens: number, wallMs: number): void {
    if (prefillTokens < this.minTokens || !(wallMs > 0)) return;
    const sample = wallMs / prefillTokens;
    this.mean = this.mean === undefined ? sample : this.mean * (1 - WEIGHT) + sample * WEIGHT;
  }

  /** ms per prompt token (the moving average itself); undefined until a step was measured. */
  get msPerToken(): number | undefined {
    return this.mean;
  }

  /** Prompt tokens per second (one decimal); undefined until a step was measured. */
  get tokensPerS(): number | undefined {
    return this.mean === undefined ? undefined : Math.round((1000 / this.mean) * 10) / 10;
  }

  /** Whole seconds until `queuedTokens` are prefilled at this rate (1..MAX_RETRY_AFTER_S); undefined before a measurement. */
  retryAfterS(queuedTokens: number): number | undefined {
    return retryAfterSeconds(queuedTokens, this.tokensPerS);
  }
}

/** Steps with fewer prefill tokens are not measured (unless the step budget is smaller). */
export const MIN_PREFILL_STEP_TOKENS = 64;

const WEIGHT = 0.3;
