import { describe, expect, it } from "vitest";
import { hashBlocks, hashRoot } from "../../protocol/block-hash";
import { BlockPool } from "./block-pool";
import { KvCacheManager } from "./kv-cache-manager";
import { checked, range, sequence, slotsOf, type TestSequence } from "./testing";

const B = 4;
const root = hashRoot({ modelId: "test-model", salt: "" });
const otherTenant = hashRoot({ modelId: "test-model", salt: "tenant-b" });

function setup(numBlocks: number, enablePrefixCache = true): { kv: KvCacheManager; pool: BlockPool } {
  const pool = new BlockPool({ numBlocks, blockSize: B });
  const kv = checked(new KvCacheManager({ pool, enablePrefixCache }));
  kv.checkInvariants();
  return { kv, pool };
}

/** Computes every not-yet-computed token of a sequence in one chunk. */
function prefill(kv: KvCacheManager, seqId: number): void {
  const n = kv.tokenIds(seqId).length - kv.numComputedTokens(seqId);
  expect(kv.allocateSlots(seqId, n)).toBe(true);
  kv.markComputed(seqId, n);
}

/** One decode step: the sampled token is appended (to the sequence), then its KV computed. */
function decode(kv: KvCacheManager, seq: TestSequence, tokenId: number): void {
  seq.tokenIds.push(tokenId);
  expect(kv.allocateSlots(seq.seqId, 1)).toBe(true);
  kv.markComputed(seq.seqId, 1);
}

describe("KvCacheManager: block tables and slots", () => {
  it("allocates a table covering the prompt, block by block", () => {
    const { kv, pool } = setup(8);
    expect(kv.startSequence(sequence({ seqId: 1, tokenIds: range(100, 10), root }))).toEqual({ numCachedTokens: 0 });
    expect(kv.allocateSlots(1, 6)).toBe(true);
    expect(kv.blockTable(1)).toHaveLength(2);
    kv.markComputed(1, 6);
    expect(kv.allocateSlots(1, 4)).toBe(true);
    expect(kv.blockTable(1)).toHaveLength(3);
    kv.markComputed(1, 4);
    expect(kv.numComputedTokens(1)).toBe(10);
    expect(pool.numFree).toBe(5);
  });

  it("refuses to allocate or mark past the known tokens or the allocated slots", () => {
    const { kv } = setup(8);
    kv.startSequence(sequence({ seqId: 1, tokenIds: range(0, 6), root }));
    expect(() => kv.allocateSlots(1, 7)).toThrow(/only 6/);
    kv.allocateSlots(1, 3);
    expect(() => kv.markComputed(1, 5)).toThrow(/slots for 4/);
    expect(() => kv.markComputed(1, 7)).toThrow(/6 tokens/);
    expect(kv.numComputedTokens(1)).toBe(0);
  });

  it("returns false and changes nothing when the pool is short", () => {
    const { kv, pool } = setup(3);
    kv.startSequence(sequence({ seqId: 1, tokenIds: range(0, 8), root }));
    prefill(kv, 1);
    kv.startSequence(sequence({ seqId: 2, tokenIds: range(50, 9), root }));
    const free = pool.freeOrder();
    expect(kv.allocateSlots(2, 9)).toBe(false);
    expect(kv.blockTable(2)).toEqual([]);
    expect(pool.freeOrder()).toEqual(free);
    expect(kv.allocateSlots(2, 4)).toBe(true);
    expect(kv.allocateSlots(2, 5)).toBe(false);
    expect(kv.blockTable(2)).toHaveLength(1);
  });

  it("rejects unknown and duplicate sequence ids", () => {
    const { kv } = setup(4);
    kv.startSequence(sequence({ seqId: 1, tokenIds: [1, 2], root }));
    expect(() => kv.startSequence(sequence({ seqId: 1, tokenIds: [1], root }))).toThrow(/already registered/);
    expect(() => kv.allocateSlots(2, 1)).toThrow(/unknown sequence 2/);
    kv.freeSequence(1);
    expect(kv.has(1)).toBe(false);
    expect(() => kv.freeSequence(1)).toThrow(/unknown/);
  });
});

describe("KvCacheManager: speculative lookahead and rollback", () => {
  it("allocates a draft's lookahead slots, caches only accepted tokens' blocks, and releases the rest", () => {
    const { kv, pool } = setup(8);
    const seq = sequence({ seqId: 1, tokenIds: range(100, 6), root });
    kv.startSequence(seq);
    prefill(kv, 1); // 6 computed: blocks 0, 1
    seq.tokenIds.push(50); // sampled, not computed
    expect(kv.allocateSlots(1, 1, 5)).toBe(true); // last token + 5 drafted: positions 6..11
    expect(kv.blockTable(1)).toHaveLength(3);
    expect(() => kv.allocateSlots(1, 2, 0)).toThrow(/would cover/); // lookahead is not the sequence's
    // The step accepted one drafted token (51) then produced 60: 8 computed, 9 tokens.
    kv.markComputed(1, 1);
    seq.tokenIds.push(51);
    kv.markComputed(1, 1);
    seq.tokenIds.push(60);
    expect(pool.numCached).toBe(2); // blocks 0 and 1 (tokens 0..7): every token accepted
    kv.releaseSlots(1, seq.tokenIds.length);
    expect(kv.blockTable(1)).toHaveLength(3); // token 8 (not computed) needs block 2
    kv.checkInvariants();
    expect(() => kv.releaseSlots(1, 7)).toThrow(/computed tokens/);
    expect(kv.allocateSlots(1, 1, 2)).toBe(true);
    kv.releaseSlots(1, 8);
    expect(kv.blockTable(1)).toHaveLength(2);
    expect(pool.numFree).toBe(6);
    kv.checkInvariants();
    // Lookahead the pool cannot hold is refused, changing nothing (out of blocks is a return value).
    expect(kv.allocateSlots(1, 1, 100)).toBe(false);
    expect(kv.blockTable(1)).toHaveLength(2);
    kv.checkInvariants();
  });
});

describe("KvCacheManager: prefix cache", () => {
  it("shares a cached prefix between two sequences and keeps it when one frees", () => {
    const { kv, pool } = setup(8);
    kv.startSequence(sequence({ seqId: 1, tokenIds: range(0, 10), root }));
    prefill(kv, 1);
    expect(pool.numCached).toBe(2);
    const tableA = [...kv.blockTable(1)];

    const prompt2 = [...range(0, 8), 77, 78, 79];
    expect(kv.findCachedPrefix({ tokenIds: prompt2, root }).numCachedTokens).toBe(8);
    expect(pool.refCount(tableA[0]!)).toBe(1);
    expect(kv.startSequence(sequence({ seqId: 2, tokenIds: prompt2, root }))).toEqual({ numCachedTokens: 8 });
    expect(kv.numComputedTokens(2)).toBe(8);
    expect(kv.blockTable(2)).toEqual(tableA.slice(0, 2));
    expect(pool.refCount(tableA[0]!)).toBe(2);
    expect(pool.refCount(tableA[1]!)).toBe(2);
    prefill(kv, 2);
    expect(kv.blockTable(2)[2]).not.toBe(tableA[2]);
    const slots2 = slotsOf(kv.blockTable(2), B, 0, 11);

    kv.freeSequence(1);
    expect(pool.refCount(tableA[0]!)).toBe(1);
    expect(pool.refCount(tableA[1]!)).toBe(1);
    expect(pool.refCount(tableA[2]!)).toBe(0);
    expect(pool.freeOrder()).not.toContain(tableA[0]);
    expect(slotsOf(kv.blockTable(2), B, 0, 11)).toEqual(slots2);
    expect(kv.stats).toEqual({ queriedTokens: 21, hitTokens: 8 });
  });

  it("always leaves at least one prompt token to compute", () => {
    const { kv, pool } = setup(8);
    kv.startSequence(sequence({ seqId: 1, tokenIds: range(0, 8), root }));
    prefill(kv, 1);
    expect(pool.numCached).toBe(2);
    expect(kv.startSequence(sequence({ seqId: 2, tokenIds: range(0, 8), root }))).toEqual({ numCachedTokens: 4 });
    expect(kv.findCachedPrefix({ tokenIds: range(0, 9), root }).numCachedTokens).toBe(8);
    expect(kv.findCachedPrefix({ tokenIds: range(0, 4), root }).numCachedTokens).toBe(0);
    expect(kv.findCachedPrefix({ tokenIds: range(0, 5), root }).numCachedTokens).toBe(4);
    expect(kv.findCachedPrefix({ tokenIds: [], root }).numCachedTokens).toBe(0);
    prefill(kv, 2);
    expect(kv.numComputedTokens(2)).toBe(8);
  });

  it("stops at the first miss and returns hashes in chain order", () => {
    const { kv } = setup(8);
    kv.startSequence(sequence({ seqId: 1, tokenIds: range(0, 13), root }));
    prefill(kv, 1);
    const tokens = [...range(0, 4), 99, ...range(5, 8)];
    const hit = kv.findCachedPrefix({ tokenIds: tokens, root });
    expect(hit.numCachedTokens).toBe(4);
    expect(hit.blockHashes).toEqual(hashBlocks(root, range(0, 4), B));
    expect(hit.blockIds).toEqual([kv.blockTable(1)[0]]);
    expect(kv.blockHashes(1)).toEqual(hashBlocks(root, range(0, 13), B));
  });

  it("never shares across roots (model id / tenant salt)", () => {
    const { kv } = setup(8);
    kv.startSequence(sequence({ seqId: 1, tokenIds: range(0, 10), root }));
    prefill(kv, 1);
    expect(kv.startSequence(sequence({ seqId: 2, tokenIds: range(0, 10), root: otherTenant }))).toEqual({ numCachedTokens: 0 });
  });

  it("caches blocks filled during decode, so the next turn hits them", () => {
    const { kv, pool } = setup(8);
    const seq = sequence({ seqId: 1, tokenIds: range(0, 6), root });
    kv.startSequence(seq);
    prefill(kv, 1);
    expect(pool.numCached).toBe(1);
    for (const t of [40, 41, 42, 43, 44, 45]) decode(kv, seq, t);
    expect(kv.numComputedTokens(1)).toBe(12);
    expect(pool.numCached).toBe(3);
    const transcript = [...kv.tokenIds(1)];
    kv.freeSequence(1);
    const nextTurn = [...transcript, 50, 51, 52];
    expect(kv.startSequence(sequence({ seqId: 2, tokenIds: nextTurn, root }))).toEqual({ numCachedTokens: 12 });
    expect(kv.blockHashes(2)).toEqual(hashBlocks(root, transcript, B));
  });

  it("caches nothing and finds nothing with prefix caching off", () => {
    const { kv, pool } = setup(8, false);
    kv.startSequence(sequence({ seqId: 1, tokenIds: range(0, 10), root }));
    prefill(kv, 1);
    expect(pool.numCached).toBe(0);
    expect(kv.blockHashes(1)).toEqual([]);
    expect(kv.findCachedPrefix({ tokenIds: range(0, 10), root })).toEqual({ blockIds: [], blockHashes: [], numCachedTokens: 0 });
    expect(kv.startSequence(sequence({ seqId: 2, tokenIds: range(0, 10), root }))).toEqual({ numCachedTokens: 0 });
    expect(kv.stats).toEqual({ queriedTokens: 20, hitTokens: 0 });
  });

  it("leaves a block computed twice in parallel uncached, and evicts it first", () => {
    const { kv, pool } = setup(8);
    kv.startSequence(sequence({ seqId: 1, tokenIds: range(0, 9), root }));
    kv.startSequence(sequence({ seqId: 2, tokenIds: range(0, 9), root }));
    prefill(kv, 1);
    prefill(kv, 2);
    expect(pool.numCached).toBe(2);
    const [a, b] = [[...kv.blockTable(1)], [...kv.blockTable(2)]];
    expect(pool.blockHash(b[0]!)).toBeNull();
    expect(kv.blockHashes(2)).toEqual(kv.blockHashes(1));
    kv.freeSequence(1);
    kv.freeSequence(2);
    const order = pool.freeOrder();
    for (const dup of b) expect(order.indexOf(dup)).toBeLessThan(order.indexOf(a[0]!));
    expect(kv.findCachedPrefix({ tokenIds: range(0, 9), root }).blockIds).toEqual(a.slice(0, 2));
  });

  it("evicts under a tiny pool, tail block of a chain before its head", () => {
    const { kv, pool } = setup(4);
    kv.startSequence(sequence({ seqId: 1, tokenIds: range(0, 9), root }));
    prefill(kv, 1);
    const [a0, a1, a2] = kv.blockTable(1) as [number, number, number];
    kv.freeSequence(1);
    expect(pool.freeOrder()).toEqual([a2, 3, a1, a0]);

    kv.startSequence(sequence({ seqId: 2, tokenIds: range(100, 5), root }));
    prefill(kv, 2);
    expect(pool.stats.evictions).toBe(0);
    kv.startSequence(sequence({ seqId: 3, tokenIds: range(200, 3), root }));
    prefill(kv, 3);
    expect(kv.blockTable(3)).toEqual([a1]);
    expect(pool.stats.evictions).toBe(1);
    expect(kv.findCachedPrefix({ tokenIds: range(0, 9), root }).numCachedTokens).toBe(4);

    kv.startSequence(sequence({ seqId: 4, tokenIds: range(0, 9), root }));
    expect(kv.numComputedTokens(4)).toBe(4);
    expect(kv.blockTable(4)).toEqual([a0]);
    expect(kv.allocateSlots(4, 5)).toBe(false);
    kv.freeSequence(3);
    expect(kv.allocateSlots(4, 5)).toBe(false);
    kv.freeSequence(2);
    prefill(kv, 4);
    expect(kv.blockHashes(4)).toEqual(hashBlocks(root, range(0, 9), B));
  });
});

describe("KvCacheManager: preemption", () => {
  it("preempts, keeps the tokens, and restarts from the cached prefix", () => {
    const { kv, pool } = setup(8);
    const seq = sequence({ seqId: 1, tokenIds: range(0, 10), root });
    kv.startSequence(seq);
    prefill(kv, 1);
    for (const t of [60, 61, 62]) decode(kv, seq, t);
    const tokens = [...kv.tokenIds(1)];
    expect(tokens).toHaveLength(13);
    kv.preempt(1);
    expect(kv.isPreempted(1)).toBe(true);
    expect(kv.blockTable(1)).toEqual([]);
    expect(kv.numComputedTokens(1)).toBe(0);
    expect(kv.tokenIds(1)).toEqual(tokens);
    expect(pool.numFree).toBe(8);
    expect(pool.numCached).toBe(3);
    expect(() => kv.allocateSlots(1, 1)).toThrow(/preempted/);
    expect(() => kv.preempt(1)).toThrow(/preempted/);

    expect(kv.restartSequence(1)).toEqual({ numCachedTokens: 12 });
    expect(kv.isPreempted(1)).toBe(false);
    expect(() => kv.restartSequence(1)).toThrow(/not preempted/);
    prefill(kv, 1);
    expect(kv.numComputedTokens(1)).toBe(13);
    decode(kv, seq, 63);
    expect(kv.blockHashes(1)).toEqual(hashBlocks(root, kv.tokenIds(1), B));
  });

  it("restarts with a shorter hit when part of its prefix was evicted meanwhile", () => {
    const { kv } = setup(3);
    kv.startSequence(sequence({ seqId: 1, tokenIds: range(0, 12), root }));
    prefill(kv, 1);
    kv.preempt(1);
    kv.startSequence(sequence({ seqId: 2, tokenIds: range(500, 4), root }));
    prefill(kv, 2);
    expect(kv.restartSequence(1)).toEqual({ numCachedTokens: 8 });
    kv.freeSequence(2);
    prefill(kv, 1);
    expect(kv.stats).toEqual({ queriedTokens: 28, hitTokens: 8 });
  });

  it("frees a preempted sequence without touching the pool", () => {
    const { kv, pool } = setup(4);
    kv.startSequence(sequence({ seqId: 1, tokenIds: range(0, 6), root }));
    prefill(kv, 1);
    kv.preempt(1);
    kv.freeSequence(1);
    expect(kv.numSequences).toBe(0);
    expect(pool.numFree).toBe(4);
  });
});

describe("KvCacheManager: kept tails (the exact tail)", () => {
  /** A finished turn of 10 computed tokens (2 full blocks + 2 in a partial block) kept as "s1". */
  function keptTurn(kv: KvCacheManager, tokens = range(100, 10)): TestSequence {
    const seq = sequence({ seqId: 1, tokenIds: tokens, root });
    kv.startSequence(seq);
    prefill(kv, 1);
    seq.keepTailAs = "s1";
    kv.freeSequence(1);
    return seq;
  }

  it("gives the next turn every computed token, the partial block included, in the same block", () => {
    const { kv, pool } = setup(8);
    keptTurn(kv);
    expect(kv.numTails).toBe(1);
    expect(pool.numFree).toBe(7);
    const next = sequence({ seqId: 2, tokenIds: [...range(100, 10), 7, 8, 9], root, resumeTail: "s1" });
    expect(kv.startSequence(next)).toEqual({ numCachedTokens: 10 });
    expect(kv.numTails).toBe(0);
    expect(kv.blockTable(2)).toHaveLength(3);
    prefill(kv, 2);
    expect(kv.blockHashes(2)).toEqual(hashBlocks(root, [...range(100, 10), 7, 8], B));
  });

  it("is given back, not used, when the prefix before it is not cached or the tokens differ", () => {
    const { kv, pool } = setup(8);
    keptTurn(kv);
    // Another tenant's chain: the tail's parent hash is not this prefix's.
    expect(kv.startSequence(sequence({ seqId: 2, tokenIds: range(100, 12), root: otherTenant, resumeTail: "s1" }))).toEqual({ numCachedTokens: 0 });
    expect(kv.numTails).toBe(0);
    kv.freeSequence(2);
    keptTurn(kv);
    const edited = [...range(100, 9), 55, 1, 2];
    expect(kv.startSequence(sequence({ seqId: 3, tokenIds: edited, root, resumeTail: "s1" }))).toEqual({ numCachedTokens: 8 });
    expect(kv.numTails).toBe(0);
    kv.freeSequence(3);
    expect(pool.numFree).toBe(8);
  });

  it("needs a token left to compute: a continuation with nothing new does not take it", () => {
    const { kv } = setup(8);
    keptTurn(kv);
    expect(kv.startSequence(sequence({ seqId: 2, tokenIds: range(100, 10), root, resumeTail: "s1" })).numCachedTokens).toBe(8);
  });

  it("goes back to its key when the turn that took it is preempted or freed before filling the block", () => {
    const { kv } = setup(8);
    keptTurn(kv);
    const next = sequence({ seqId: 2, tokenIds: [...range(100, 10), 7], root, resumeTail: "s1" });
    expect(kv.startSequence(next).numCachedTokens).toBe(10);
    kv.preempt(2);
    expect(kv.numTails).toBe(1);
    expect(kv.restartSequence(2)).toEqual({ numCachedTokens: 10 });
    expect(kv.numTails).toBe(0);
    kv.freeSequence(2); // failed: no new state
    expect(kv.numTails).toBe(1);
    expect(kv.startSequence(sequence({ seqId: 3, tokenIds: [...range(100, 10), 7], root, resumeTail: "s1" })).numCachedTokens).toBe(10);
  });

  it("is given back to the pool when an allocation would fail without it, and by dropTail", () => {
    const { kv, pool } = setup(4);
    keptTurn(kv); // 2 cached full blocks (free) + the tail (held)
    expect(pool.numFree).toBe(3);
    kv.startSequence(sequence({ seqId: 2, tokenIds: range(500, 16), root }));
    expect(kv.allocateSlots(2, 16)).toBe(true);
    expect(kv.numTails).toBe(0);
    kv.freeSequence(2);
    keptTurn(kv);
    expect(kv.dropTail("s1")).toBe(true);
    expect(kv.dropTail("s1")).toBe(false);
    expect(pool.numFree).toBe(4);
  });
});
