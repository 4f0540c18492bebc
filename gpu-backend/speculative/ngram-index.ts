import { noDraft, type MatchedDraft } from "./matched-draft";

/** How an {@link NgramIndex} is sized. */
export interface NgramIndexOptions {
  /** Longest suffix matched, in tokens (default 8): longer matches are not told apart. */
  maxNgram?: number;
  /** Shortest suffix that counts as a match (default 1). */
  minNgram?: number;
  /**
   * Most tokens indexed (default 131072): past it the index is rebuilt over the last half of them,
   * so a sequence's index never holds more than `maxNgram` tables of `4 * maxIndexedTokens` slots
   * (4 bytes each: 16 MiB at the defaults; below the cap, 8 to 16 bytes per token per n-gram
   * length: 2 MiB for a 30k-token sequence at the defaults).
   */
  maxIndexedTokens?: number;
}

const EMPTY = 0;

/**
 * Prompt lookup's index over one sequence's tokens (its prompt and output): for every n-gram
 * length n = 1..maxNgram, an open-addressing hash table from the n-gram ending at a position to
 * the latest position it ends at. Keys are not stored: a slot holds a position (plus one), and a
 * probe compares the n tokens ending there with the probed n-gram, so there are no false matches.
 *
 * Incremental: each call indexes only the positions appended since the last one (maxNgram hashes
 * and probes per token), and then looks the context's last tokens up (maxNgram probes), so a
 * decode step costs the same at 30k tokens as at 300. The sequence must only grow between calls
 * (as the engine's sequences do); a shorter one, or one whose last indexed token changed, is
 * indexed again from scratch.
 *
 * What it proposes: the context's longest suffix (up to maxNgram tokens) that occurred earlier,
 * at its most recent earlier occurrence, and the tokens that followed it there, up to `max`. The
 * match length it reports is that suffix's length, or for a maxNgram-token match, how far back
 * that occurrence goes on matching (up to 1024).
 *
 * @example
 * const index = new NgramIndex();
 * index.lookup([5, 6, 7, 1, 2, 5, 6], 3); // { tokenIds: [7, 1, 2], matchLength: 2 }
 */
export class NgramIndex {
  private readonly maxNgram: number;
  private readonly minNgram: number;
  private readonly maxIndexed: number;
  /** tables[n - 1]: n-gram hash slot -> end position + 1 (EMPTY = free). */
  private tables: Int32Array[] = [];
  private mask = 0;
  /** First position of the indexed window (0 until the sequence outgrows maxIndexedTokens). */
  private base = 0;
  /** Positions base .. indexed - 1 are in the tables (as n-gram ends). */
  private indexed = 0;
  private lastIndexedToken = -1;
  private readonly hashes: Int32Array;

  /** @example new NgramIndex({ maxNgram: 4 }) */
  constructor(options: NgramIndexOptions = {}) {
    this.maxNgram = options.maxNgram ?? 8;
    this.minNgram = options.minNgram ?? 1;
    this.maxIndexed = options.maxIndexedTokens ?? 131072;
    if (!(this.maxNgram >= 1 && this.minNgram >= 1 && this.minNgram <= this.maxNgram)) throw new Error(`NgramIndex: need 1 <= minNgram (${this.minNgram}) <= maxNgram (${this.maxNgram})`);
    if (!(this.maxIndexed >= 2)) throw new Error(`NgramIndex: maxIndexedTokens must be at least 2, got ${this.maxIndexed}`);
    this.hashes = new Int32Array(this.maxNgram);
    this.reset(0);
  }

  /** Positions in the index (for tests and memory accounting). @example index.size() // 29999 */
  size(): number {
    return this.indexed - this.base;
  }

  /** Bytes the tables hold. @example index.bytes() // 8 * 131072 * 4 */
  bytes(): number {
    return this.tables.length * (this.mask + 1) * 4;
  }

  /**
   * Brings the index up to `tokens` (all but the last token, which has no successor yet) and
   * returns the continuation of the longest earlier match of its suffix, up to `max` tokens.
   * @example index.lookup(seq.tokenIds, 8)
   */
  lookup(tokens: readonly number[], max: number): MatchedDraft {
    const end = tokens.length - 1;
    if (end < 1 || max <= 0) {
      if (end < 0) this.reset(0);
      return noDraft();
    }
    this.catchUp(tokens, end);
    return this.match(tokens, end, max);
  }

  /** Indexes positions up to end - 1, rebuilding when the sequence changed or outgrew the cap. */
  private catchUp(tokens: readonly number[], end: number): void {
    const changed = this.indexed > end || (this.indexed > this.base && tokens[this.indexed - 1] !== this.lastIndexedToken);
    if (changed) this.reset(Math.max(0, end - (this.maxIndexed >> 1)));
    if (end - this.base > this.maxIndexed) this.reset(end - (this.maxIndexed >> 1));
    while (this.indexed < end) {
      if (2 * (this.indexed - this.base + 1) > this.mask + 1) this.grow(tokens);
      this.insert(tokens, this.indexed);
      this.indexed++;
    }
    if (end > this.base) this.lastIndexedToken = tokens[end - 1]!;
  }

  private match(tokens: readonly number[], end: number, max: number): MatchedDraft {
    const longest = Math.min(this.maxNgram, end + 1 - this.base);
    this.hashSuffixes(tokens, end, longest);
    for (let n = longest; n >= this.minNgram; n--) {
      const at = this.find(tokens, end, n, this.hashes[n - 1]!);
      if (at < 0) continue;
      const stop = Math.min(at + max, end);
      const tokenIds: number[] = [];
      for (let i = at + 1; i <= stop; i++) tokenIds.push(tokens[i]!);
      return { tokenIds, matchLength: n === this.maxNgram ? extendMatch(tokens, at, end, n, this.base) : n };
    }
    return noDraft();
  }

  /** The latest indexed end position of the n-gram ending at `end`, or -1. */
  private find(tokens: readonly number[], end: number, n: number, hash: number): number {
    const table = this.tables[n - 1]!;
    for (let slot = hash & this.mask; ; slot = (slot + 1) & this.mask) {
      const held = table[slot]!;
      if (held === EMPTY) return -1;
      if (sameNgram(tokens, held - 1, end, n)) return held - 1;
    }
  }

  /** Indexes the n-grams ending at `at` (n = 1..maxNgram within the window) as ending there last. */
  private insert(tokens: readonly number[], at: number): void {
    const longest = Math.min(this.maxNgram, at + 1 - this.base);
    this.hashSuffixes(tokens, at, longest);
    for (let n = 1; n <= longest; n++) this.put(tokens, at, n, this.hashes[n - 1]!);
  }

  private put(tokens: readonly number[], at: number, n: number, hash: number): void {
    const table = this.tables[n - 1]!;
    for (let slot = hash & this.mask; ; slot = (slot + 1) & this.mask) {
      const held = table[slot]!;
      if (held === EMPTY || sameNgram(tokens, held - 1, at, n)) {
        table[slot] = at + 1;
        return;
      }
    }
  }

  /** hashes[n - 1] = hash of the n tokens ending at `end`, for n = 1..count. */
  private hashSuffixes(tokens: readonly number[], end: number, count: number): void {
    let h = 0x2545f491;
    for (let k = 0; k < count; k++) {
      h = Math.imul(h ^ tokens[end - k]!, 0x9e3779b1);
      h ^= h >>> 15;
      this.hashes[k] = Math.imul(h, 0x85ebca6b) ^ (h >>> 13);
    }
  }

  /** Doubles the tables and re-inserts every indexed position in order (latest wins again). */
  private grow(tokens: readonly number[]): void {
    const capacity = (this.mask + 1) * 2;
    this.tables = Array.from({ length: this.maxNgram }, () => new Int32Array(capacity));
    this.mask = capacity - 1;
    for (let at = this.base; at < this.indexed; at++) this.insert(tokens, at);
  }

  private reset(base: number): void {
    const capacity = 64;
    this.tables = Array.from({ length: this.maxNgram }, () => new Int32Array(capacity));
    this.mask = capacity - 1;
    this.base = base;
    this.indexed = base;
    this.lastIndexedToken = -1;
  }
}

/** MAX_REPORTED_MATCH caps how far back a full-length match is measured. */
const MAX_REPORTED_MATCH = 1024;

/**
 * The true length of a match found at maxNgram tokens (the tokens ending at `at` and at `end`
 * agree on n), measured back within the indexed window up to MAX_REPORTED_MATCH: a combining source compares it with other
 * indexes' matches. Which occurrence is proposed does not change (the latest of the maxNgram-gram).
 */
function extendMatch(tokens: readonly number[], at: number, end: number, n: number, base: number): number {
  while (n < MAX_REPORTED_MATCH && at - n >= base && tokens[at - n] === tokens[end - n]) n++;
  return n;
}

function sameNgram(tokens: readonly number[], a: number, b: number, n: number): boolean {
  for (let k = 0; k < n; k++) if (tokens[a - k] !== tokens[b - k]) return false;
  return true;
}
