import { PrefillRate } from "../scheduler/prefill-rate";

/**
 * Copy or compute: the cost model that decides whether pulling a prompt's missing blocks from
 * another backend beats prefilling them here. Both sides are measured on this backend, as moving
 * averages: prefill time per token (the engine's `PrefillRate`, the one measurement the heartbeat
 * and Retry-After use too) and copy bandwidth (from finished pulls of at least
 * {@link MIN_COPY_BYTES}), plus a fixed per-pull overhead (a round trip and the holder's lookup).
 * The priors hold until the first measurements: a GPU's prefill is faster than the CPU prior, and
 * its pulls are measured too.
 *
 * @example
 * const rate = new PrefillRate();
 * const cost = new TransferCost(rate);
 * rate.noteStep(512, 380);
 * if (cost.copyBeatsCompute({ blocks: 40, blockSize: 16, bytesPerBlock: 131072 })) pull();
 */
export class TransferCost {
  constructor(private readonly prefill: PrefillRate = new PrefillRate()) {}

  /** ms per prefilled token: the measured rate, else the prior (1 ms). */
  get prefillMsPerToken(): number {
    return this.prefill.msPerToken ?? PRIOR_PREFILL_MS_PER_TOKEN;
  }
  /** Copy bandwidth, bytes per ms (moving average; 200 MB/s prior). */
  bytesPerMs = 200_000;
  /** Per-pull overhead, ms. */
  overheadMs = 5;

  noteCopy(bytes: number, ms: number): void {
    if (bytes < MIN_COPY_BYTES || ms <= 0) return;
    this.bytesPerMs = blend(this.bytesPerMs, bytes / ms);
  }

  copyMs(blocks: number, bytesPerBlock: number): number {
    return this.overheadMs + (blocks * bytesPerBlock) / this.bytesPerMs;
  }

  computeMs(tokens: number): number {
    return tokens * this.prefillMsPerToken;
  }

  copyBeatsCompute(p: { blocks: number; blockSize: number; bytesPerBlock: number }): boolean {
    return this.copyMs(p.blocks, p.bytesPerBlock) < this.computeMs(p.blocks * p.blockSize);
  }
}

/** ms per prefilled token before the engine has measured one (a CPU's). */
const PRIOR_PREFILL_MS_PER_TOKEN = 1;
/** Smaller pulls are overhead-bound. */
export const MIN_COPY_BYTES = 1 << 20;

const WEIGHT = 0.3;
function blend(old: number, sample: number): number {
  return old * (1 - WEIGHT) + sample * WEIGHT;
}
