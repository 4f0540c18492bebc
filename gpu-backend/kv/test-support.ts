/**
 * Test helpers for the kv folder (imported only by its *.test.ts files).
 */

/**
 * Wraps an object so that every method call is followed by `checkInvariants()`, also when the
 * method throws (an assertion must leave the bookkeeping consistent).
 *
 * @example const pool = checked(new BlockPool({ numBlocks: 8, blockSize: 4 }));
 */
export function checked<T extends { checkInvariants(): void }>(target: T): T {
  return new Proxy(target, {
    get(obj, prop) {
      const value: unknown = Reflect.get(obj, prop, obj);
      if (typeof value !== "function" || prop === "checkInvariants") return value;
      return (...args: unknown[]): unknown => {
        try {
          return (value as (...a: unknown[]) => unknown).apply(obj, args);
        } finally {
          obj.checkInvariants();
        }
      };
    },
  });
}

/**
 * Seeded PRNG (mulberry32): floats in [0, 1).
 *
 * @example const rand = prng(42); const die = 1 + Math.floor(rand() * 6);
 */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Integer in [lo, hi] (inclusive). */
export function randInt(rand: () => number, lo: number, hi: number): number {
  return lo + Math.floor(rand() * (hi - lo + 1));
}

/** Token ids [start, start + n). */
export function range(start: number, n: number): number[] {
  return Array.from({ length: n }, (_, i) => start + i);
}
