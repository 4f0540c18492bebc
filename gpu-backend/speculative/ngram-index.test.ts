import { describe, expect, it } from "vitest";
import { NgramIndex } from "./ngram-index";

/** The brute-force reference: the longest suffix (<= maxNgram) that occurred earlier, its latest occurrence, its continuation. */
function reference(tokens: readonly number[], max: number, maxNgram: number): { tokenIds: number[]; matchLength: number } {
  const end = tokens.length - 1;
  for (let n = Math.min(maxNgram, end); n >= 1; n--) {
    for (let at = end - 1; at >= n - 1; at--) {
      let same = true;
      for (let k = 0; k < n && same; k++) same = tokens[at - k] === tokens[end - k];
      if (!same) continue;
      let length = n;
      if (n === maxNgram) while (at - length >= 0 && tokens[at - length] === tokens[end - length]) length++;
      return { tokenIds: tokens.slice(at + 1, Math.min(at + max, end) + 1), matchLength: length };
    }
  }
  return { tokenIds: [], matchLength: 0 };
}

/** A seeded generator (mulberry32), so a failure replays. */
function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe("NgramIndex", () => {
  it("proposes what followed the most recent occurrence of the context's last tokens", () => {
    expect(new NgramIndex().lookup([5, 6, 7, 1, 2, 5, 6], 3)).toEqual({ tokenIds: [7, 1, 2], matchLength: 2 });
    expect(new NgramIndex().lookup([1, 2, 7, 1, 2, 8, 1, 2], 1)).toEqual({ tokenIds: [8], matchLength: 2 });
    expect(new NgramIndex().lookup([1, 2, 7, 1, 2, 8, 1, 2], 3)).toEqual({ tokenIds: [8, 1, 2], matchLength: 2 });
  });

  it("prefers a longer match to a more recent shorter one", () => {
    // [1 2 3] occurred at 0..2 (then 9); [2 3] more recently at 5..6 (then 8).
    expect(new NgramIndex().lookup([1, 2, 3, 9, 5, 2, 3, 8, 1, 2, 3], 2)).toEqual({ tokenIds: [9, 5], matchLength: 3 });
  });

  it("stops the continuation at the context's end, and has nothing without a match or a budget", () => {
    expect(new NgramIndex().lookup([4, 4, 4], 5)).toEqual({ tokenIds: [4], matchLength: 2 });
    expect(new NgramIndex().lookup([1, 2, 3], 5)).toEqual({ tokenIds: [], matchLength: 0 });
    expect(new NgramIndex().lookup([1, 2, 1], 0)).toEqual({ tokenIds: [], matchLength: 0 });
    expect(new NgramIndex().lookup([1], 4)).toEqual({ tokenIds: [], matchLength: 0 });
    expect(new NgramIndex({ minNgram: 2 }).lookup([1, 2, 3, 1], 4)).toEqual({ tokenIds: [], matchLength: 0 });
  });

  it("reports how far back a full-length match goes", () => {
    expect(new NgramIndex({ maxNgram: 2 }).lookup([1, 2, 3, 4, 9, 1, 2, 3, 4], 1)).toEqual({ tokenIds: [9], matchLength: 4 });
  });

  it("equals the brute-force reference at every step of random growing sequences", () => {
    const next = random(37);
    for (const [vocab, maxNgram] of [[3, 8], [5, 3], [12, 4], [2, 6]] as const) {
      const index = new NgramIndex({ maxNgram });
      const tokens: number[] = [];
      for (let step = 0; step < 400; step++) {
        const grow = 1 + Math.floor(next() * 3);
        for (let g = 0; g < grow; g++) tokens.push(Math.floor(next() * vocab));
        const max = 1 + Math.floor(next() * 6);
        expect(index.lookup(tokens, max), `vocab ${vocab} step ${step}`).toEqual(reference(tokens, max, maxNgram));
      }
      expect(index.size()).toBe(tokens.length - 1);
    }
  });

  it("indexes again from scratch when the sequence shrank or changed", () => {
    const index = new NgramIndex();
    index.lookup([1, 2, 3, 1, 2, 3, 1], 4);
    expect(index.lookup([7, 8, 9, 7], 4)).toEqual(reference([7, 8, 9, 7], 4, 8));
    expect(index.lookup([7, 8, 9, 7, 5, 8], 4)).toEqual({ tokenIds: [9, 7, 5, 8], matchLength: 1 });
    expect(index.lookup([1, 2, 1, 2, 1, 2, 6, 1], 4)).toEqual(reference([1, 2, 1, 2, 1, 2, 6, 1], 4, 8));
  });

  it("keeps at most maxIndexedTokens positions in tables of at most 4 slots each, proposing as the reference over that window", () => {
    const next = random(5);
    const index = new NgramIndex({ maxNgram: 4, maxIndexedTokens: 64 });
    const tokens: number[] = [];
    let rebuilt = 0;
    for (let i = 0; i < 1000; i++) {
      tokens.push(i % 50 < 30 ? 1000 + i : Math.floor(next() * 4));
      const before = index.size();
      const draft = index.lookup(tokens, 3);
      if (index.size() < before) rebuilt++;
      expect(index.size()).toBeLessThanOrEqual(64);
      expect(index.bytes()).toBeLessThanOrEqual(4 * 4 * 64 * 4);
      const window = tokens.slice(tokens.length - 1 - index.size());
      expect(draft, `step ${i}`).toEqual(reference(window, 3, 4));
    }
    expect(rebuilt).toBeGreaterThan(20);
  });
});
