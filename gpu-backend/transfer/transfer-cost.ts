/**
 * Copy or compute: the cost model that decides whether pulling a prompt's missing blocks from
 * another backend beats prefilling them here. Both sides are measured on this backend, as moving
 * averages: prefill time per token (from engine steps of at least {@link MIN_PREFILL_TOKENS}
 * tokens) and copy bandwidth (from finished pulls of at least {@link MIN_COPY_BYTES}), plus a
 * fixed per-pull overhead (a round trip and the holder's lookup). The priors hold until the first
 * measurements: a GPU's prefill is faster than the CPU prior, and its pulls are measured too.
 *
 * @example
 * const cost = new TransferCost();
 * cost.notePrefill(512, 380);
 * if (cost.copyBeatsCompute({ blocks: 40, blockSize: 16, bytesPerBlock: 131072 })) pull();
 */
export class TransferCost {
  /** ms per prefilled token (moving average). */
  prefillMsPerToken = 1;
  /** Copy bandwidth, bytes per ms (moving average; 200 MB/s prior). */
  bytesPerMs = 200_000;
  /** Per-pull overhead, ms. */
  overheadMs = 5;

  notePrefill(tokens: number, ms: number): void {
    if (tokens < MIN_PREFILL_TOKENS || ms <= 0) return;
    this.prefillMsPerToken = blend(this.prefillMsPerToken, ms / tokens);
  }

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

/** Steps with fewer tokens are decode-bound: their time per token says nothing about prefill. */
export const MIN_PREFILL_TOKENS = 64;
/** Smaller pulls are overhead-bound. */
export const MIN_COPY_BYTES = 1 << 20;

const WEIGHT = 0.3;
function blend(old: number, sample: number): number {
  return old * (1 - WEIGHT) + sample * WEIGHT;
}
