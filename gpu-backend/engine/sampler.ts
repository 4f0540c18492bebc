import { mulberry32 } from "../../protocol/random";

export interface SamplerParams {
  /** 0 means greedy (argmax). */
  temperature: number;
  /** In (0, 1]; 1 disables nucleus sampling. */
  topP: number;
  /** 0 disables top-k. */
  topK: number;
  seed?: number;
}

/**
 * Picks the next token from one row of logits. Greedy is an argmax (ties go to the lowest id);
 * otherwise temperature, then top-k, then top-p (nucleus), then a draw from a seeded PRNG, so the
 * same seed and logits give the same token.
 *
 * @example
 * const sampler = new Sampler({ temperature: 0.7, topP: 0.9, topK: 0, seed: 1 });
 * const tokenId = sampler.sample(logits);
 */
export class Sampler {
  private readonly random: () => number;

  /** Greedy sampling needs only the argmax, which the executor computes on the device. */
  get greedy(): boolean {
    return this.params.temperature <= 0;
  }

  constructor(private readonly params: SamplerParams) {
    this.random = mulberry32(params.seed ?? Math.floor(Math.random() * 2 ** 32));
  }

  sample(logits: Float32Array): number {
    const { temperature, topP, topK } = this.params;
    if (temperature <= 0) return argmax(logits);

    let max = -Infinity;
    for (let i = 0; i < logits.length; i++) if (logits[i]! > max) max = logits[i]!;
    const probs = new Float32Array(logits.length);
    let sum = 0;
    for (let i = 0; i < logits.length; i++) sum += probs[i] = Math.exp((logits[i]! - max) / temperature);
    for (let i = 0; i < probs.length; i++) probs[i]! /= sum;

    let threshold = 0;
    if (topK > 0 && topK < probs.length) threshold = kthLargest(probs, topK);
    if (topP < 1) threshold = Math.max(threshold, nucleusThreshold(probs, topP, threshold));

    let kept = 0;
    for (let i = 0; i < probs.length; i++) if (probs[i]! >= threshold) kept += probs[i]!;
    let r = this.random() * kept;
    let last = -1;
    for (let i = 0; i < probs.length; i++) {
      if (probs[i]! < threshold) continue;
      last = i;
      r -= probs[i]!;
      if (r <= 0) return i;
    }
    return last;
  }
}

export function argmax(row: Float32Array): number {
  let best = 0;
  let bestValue = row[0]!;
  for (let i = 1; i < row.length; i++) {
    const v = row[i]!;
    if (v > bestValue) {
      bestValue = v;
      best = i;
    }
  }
  return best;
}

/** The k-th largest value (native typed-array sort on a copy). */
function kthLargest(probs: Float32Array, k: number): number {
  const sorted = Float32Array.from(probs).sort();
  return sorted[sorted.length - k]!;
}

/** Smallest probability kept by nucleus sampling among values >= floor. */
function nucleusThreshold(probs: Float32Array, topP: number, floor: number): number {
  const sorted = Float32Array.from(probs).sort();
  let total = 0;
  for (let i = sorted.length - 1; i >= 0; i--) if (sorted[i]! >= floor) total += sorted[i]!;
  let acc = 0;
  for (let i = sorted.length - 1; i >= 0; i--) {
    if (sorted[i]! < floor) break;
    acc += sorted[i]!;
    if (acc >= topP * total) return sorted[i]!;
  }
  return floor;
}
