/**
 * The one seeded PRNG of the codebase (mulberry32): the draw behind a request's `sampling.seed`
 * (same seed and logits, same token on every backend), seeded random weights, and test and
 * benchmark workloads. 32 bits of state; fast; not for secrets.
 *
 * @example const rand = mulberry32(7); rand(); // a float in [0, 1)
 */
export function mulberry32(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
