import { describe, expect, it } from "vitest";
import { mulberry32 } from "../../protocol/random";
import { hashRoot, type BlockHash } from "../../protocol/block-hash";
import { BlockPool } from "./block-pool";
import { HostTier } from "./host-tier";
import { KvCacheManager } from "./kv-cache-manager";
import { checked, randInt, sequence, slotsOf, type TestSequence } from "./testing";

/**
 * Randomized model check. A fake engine writes, for every computed position p of a sequence, a
 * fingerprint of (root, tokens[0..p]) into that position's slot, the way real KV depends on the
 * whole prefix. After every operation (on top of the pool's and manager's invariants, checked by
 * the `checked` proxy) it verifies that
 *   - every sequence reads back its own fingerprints at every computed position (so a prefix hit
 *     never hands out KV of different tokens, another tenant's root, or an evicted block), and
 *   - no slot of any table is shared by two sequences unless, in both, it is the same position of
 *     a cached, computed full block.
 * Most finished sequences keep their partial last block as a tail (as the engine's turn states
 * do) and most continuations resume it, so a tail handed back with the wrong KV, or a kept tail's
 * block reused by another sequence, reads back wrong fingerprints.
 */
const configs = [
  { name: "small blocks, tight pool", seed: 1, blockSize: 4, numBlocks: 48, ops: 10000, enablePrefixCache: true },
  { name: "block 16, roomy pool", seed: 2, blockSize: 16, numBlocks: 40, ops: 8000, enablePrefixCache: true },
  { name: "block 2, very tight pool", seed: 3, blockSize: 2, numBlocks: 40, ops: 10000, enablePrefixCache: true },
  { name: "prefix cache off", seed: 4, blockSize: 4, numBlocks: 48, ops: 6000, enablePrefixCache: false },
  { name: "host tier of 24 blocks, tight pool", seed: 5, blockSize: 4, numBlocks: 40, ops: 10000, enablePrefixCache: true, hostTierBlocks: 24 },
];

describe("KvCacheManager randomized stress", () => {
  for (const cfg of configs) {
    it(`keeps every invariant and every sequence's KV intact (${cfg.name})`, () => {
      const counts = runStress(cfg);
      if (process.env.KV_STRESS_VERBOSE) console.log(cfg.name, counts);
      expect(counts.ops).toBe(cfg.ops);
      expect(counts.starts).toBeGreaterThan(50);
      expect(counts.preempts).toBeGreaterThan(10);
      expect(counts.allocFailures).toBeGreaterThan(0);
      if ("hostTierBlocks" in cfg) {
        expect(counts.tierPuts).toBeGreaterThan(100);
        expect(counts.tierHitTokens).toBeGreaterThan(0);
      }
      if (cfg.enablePrefixCache) {
        expect(counts.tailHits).toBeGreaterThan(3);
        expect(counts.tailMisses).toBeGreaterThan(0);
        expect(counts.hitTokens).toBeGreaterThan(0);
        expect(counts.evictions).toBeGreaterThan(0);
        expect(counts.sharedSlots).toBeGreaterThan(0);
      } else {
        expect(counts.hitTokens).toBe(0);
      }
    });
  }
});

interface StressConfig {
  seed: number;
  blockSize: number;
  numBlocks: number;
  ops: number;
  enablePrefixCache: boolean;
  /** A host tier of this many blocks (absent: none). */
  hostTierBlocks?: number;
}

function runStress(cfg: StressConfig): Record<string, number> {
  const rand = mulberry32(cfg.seed);
  const B = cfg.blockSize;
  const pool = new BlockPool({ numBlocks: cfg.numBlocks, blockSize: B });
  // Every call through `kv` is followed by kv.checkInvariants(); `raw` serves the read-only queries
  // of the model check, which would otherwise run the O(numBlocks) check dozens of times per op.
  const raw = new KvCacheManager({ pool, enablePrefixCache: cfg.enablePrefixCache });
  const kv = checked(raw);
  const kvSlots = new Int32Array(cfg.numBlocks * B);
  // The host tier moves a block's slots (its fingerprints) out of the pool and back, as bytes.
  const tier = cfg.hostTierBlocks ? new HostTier(cfg.hostTierBlocks * B * 4) : undefined;
  if (tier) {
    const slotsOfBlock = (id: number) => new Uint8Array(kvSlots.buffer, id * B * 4, B * 4);
    raw.transfer.setHostTier({ tier, bytesPerBlock: B * 4, read: (id, out) => out.set(slotsOfBlock(id)), write: (id, bytes) => slotsOfBlock(id).set(bytes) });
  }
  const roots: BlockHash[] = [hashRoot({ modelId: "m", salt: "" }), hashRoot({ modelId: "m", salt: "t2" })];
  const systemPrompts = Array.from({ length: 3 }, (_, i) => randomTokens(rand, 3 + i * 2 * B + randInt(rand, 0, B)));
  const maxLen = Math.floor((cfg.numBlocks * B) / 3);
  const model = new Map<number, { root: BlockHash; tokens: number[]; seq: TestSequence }>();
  const finished: { root: BlockHash; tokens: number[]; tail?: string }[] = [];
  let nextSeqId = 1;
  const counts = { ops: 0, starts: 0, preempts: 0, restarts: 0, frees: 0, steps: 0, allocFailures: 0, hitTokens: 0, evictions: 0, sharedSlots: 0, tailHits: 0, tailMisses: 0, tailDrops: 0, tierPuts: 0, tierHitTokens: 0 };

  const running = (): number[] => [...model.keys()].filter((id) => !raw.isPreempted(id));
  const preempted = (): number[] => [...model.keys()].filter((id) => raw.isPreempted(id));
  const pick = <T>(xs: T[]): T | undefined => xs[Math.floor(rand() * xs.length)];

  for (let op = 0; op < cfg.ops; op++) {
    counts.ops++;
    const r = rand();
    if (r < 0.12 && model.size < 12) {
      const seqId = nextSeqId++;
      let root = pick(roots)!;
      let tokens: number[];
      let resumeTail: string | undefined;
      const kind = rand();
      const prev = kind < 0.6 ? pick(finished) : undefined;
      if (prev !== undefined && prev.tokens.length < maxLen - 8) {
        root = prev.root;
        resumeTail = prev.tail;
        tokens = [...prev.tokens, ...randomTokens(rand, randInt(rand, 1, 8))];
        // An edited early token (a timestamp in the system prompt): later blocks are token-identical
        // to the cached ones but must miss, because their chained hashes differ.
        if (kind < 0.2) tokens[randInt(rand, 0, Math.min(tokens.length - 1, B - 1))] = 31;
      } else {
        tokens = [...pick(systemPrompts)!, ...randomTokens(rand, randInt(rand, 1, 2 * B))];
      }
      const seq = sequence({ seqId, tokenIds: tokens, root, ...(resumeTail !== undefined ? { resumeTail } : {}) });
      const tailsBefore = raw.numTails;
      const { numCachedTokens } = kv.startSequence(seq);
      counts.tierHitTokens += seq.hostTierTokens ?? 0;
      if (tier) expect(seq.hostTierTokens ?? 0).toBeLessThanOrEqual(numCachedTokens);
      expect(numCachedTokens).toBeLessThanOrEqual(tokens.length - 1);
      if (numCachedTokens % B !== 0) {
        // Only a resumed tail ends a hit mid-block, and it left the kept set.
        expect(resumeTail).toBeDefined();
        expect(raw.numTails).toBe(tailsBefore - 1);
        counts.tailHits++;
      } else {
        if (resumeTail !== undefined && raw.numTails < tailsBefore) counts.tailMisses++;
        expect(numCachedTokens).toBeLessThanOrEqual(Math.floor((tokens.length - 1) / B) * B);
      }
      model.set(seqId, { root, tokens, seq });
      counts.starts++;
    } else if (r < 0.75) {
      const seqId = pick(running());
      if (seqId === undefined) continue;
      const m = model.get(seqId)!;
      const computed = raw.numComputedTokens(seqId);
      let n: number;
      if (computed < m.tokens.length) {
        n = Math.min(randInt(rand, 1, 3 * B), m.tokens.length - computed);
      } else if (m.tokens.length < maxLen) {
        const t = randInt(rand, 0, 30);
        m.seq.tokenIds.push(t);
        m.tokens.push(t);
        n = 1;
      } else {
        finish(seqId);
        continue;
      }
      const tableBefore = [...raw.blockTable(seqId)];
      const freeBefore = pool.freeOrder();
      if (!kv.allocateSlots(seqId, n)) {
        counts.allocFailures++;
        expect(raw.blockTable(seqId)).toEqual(tableBefore);
        expect(pool.freeOrder()).toEqual(freeBefore);
        const victim = pick(running().filter((id) => id !== seqId)) ?? seqId;
        kv.preempt(victim);
        counts.preempts++;
      } else {
        const slots = slotsOf(raw.blockTable(seqId), B, computed, computed + n);
        const fps = fingerprints(m.root, m.tokens, computed + n);
        for (let i = 0; i < n; i++) kvSlots[slots[i]!] = fps[computed + i]!;
        kv.markComputed(seqId, n);
        counts.steps++;
      }
    } else if (r < 0.85) {
      const seqId = pick([...model.keys()]);
      if (seqId !== undefined) finish(seqId);
    } else if (r < 0.87) {
      // The state behind a tail is dropped (the engine's state store let it go).
      const f = pick(finished);
      if (f?.tail !== undefined && kv.dropTail(f.tail)) counts.tailDrops++;
    } else if (r < 0.92) {
      const seqId = pick(running());
      if (seqId === undefined) continue;
      kv.preempt(seqId);
      counts.preempts++;
    } else {
      const seqId = pick(preempted());
      if (seqId === undefined) continue;
      kv.restartSequence(seqId);
      counts.restarts++;
    }
    modelCheck();
    if (tier) expect(tier.usedBytes).toBeLessThanOrEqual(tier.capacityBytes);
  }
  counts.tierPuts = tier?.stats.puts ?? 0;
  counts.hitTokens = kv.stats.hitTokens;
  counts.evictions = pool.stats.evictions;
  expect(kv.stats.hitTokens).toBeLessThanOrEqual(kv.stats.queriedTokens);
  return counts;

  function finish(seqId: number): void {
    const m = model.get(seqId)!;
    const tail = rand() < 0.8 && !raw.isPreempted(seqId) ? `state-${seqId}` : undefined;
    if (tail !== undefined) m.seq.keepTailAs = tail;
    kv.freeSequence(seqId);
    model.delete(seqId);
    finished.push({ root: m.root, tokens: m.tokens, ...(tail !== undefined ? { tail } : {}) });
    if (finished.length > 20) {
      const gone = finished.shift()!;
      if (gone.tail !== undefined) kv.dropTail(gone.tail);
    }
    counts.frees++;
  }

  function modelCheck(): void {
    const owner = new Int32Array(cfg.numBlocks * B).fill(-1);
    const ownerPos = new Int32Array(cfg.numBlocks * B);
    for (const [seqId, m] of model) {
      const tokens = raw.tokenIds(seqId);
      if (tokens.length !== m.tokens.length || tokens.some((t, i) => t !== m.tokens[i])) throw new Error(`seq ${seqId}: token list diverged`);
      const computed = raw.numComputedTokens(seqId);
      const table = raw.blockTable(seqId);
      const allocated = table.length * B;
      const slots = slotsOf(table, B, 0, allocated);
      const fps = fingerprints(m.root, m.tokens, computed);
      for (let p = 0; p < computed; p++) {
        if (kvSlots[slots[p]!] !== fps[p]) throw new Error(`seq ${seqId}: position ${p} (slot ${slots[p]}) holds the wrong KV`);
      }
      const sharable = Math.floor(computed / B) * B;
      for (let p = 0; p < allocated; p++) {
        const s = slots[p]!;
        const other = owner[s]!;
        if (other === -1) {
          owner[s] = seqId;
          ownerPos[s] = p;
          continue;
        }
        const otherSharable = Math.floor(raw.numComputedTokens(other) / B) * B;
        const blockId = table[Math.floor(p / B)]!;
        if (ownerPos[s] !== p || p >= sharable || p >= otherSharable || pool.blockHash(blockId) === null) {
          throw new Error(`slot ${s} shared by seq ${other} (pos ${ownerPos[s]}) and seq ${seqId} (pos ${p}) without a common cached full block`);
        }
        counts.sharedSlots++;
      }
    }
  }
}

function randomTokens(rand: () => number, n: number): number[] {
  return Array.from({ length: n }, () => randInt(rand, 0, 30));
}

/** fp[p] depends on the root and on tokens[0..p], like the KV of position p. */
function fingerprints(root: BlockHash, tokens: readonly number[], n: number): Int32Array {
  const out = new Int32Array(n);
  let f = Number.parseInt(root.slice(0, 8), 16) | 0;
  for (let p = 0; p < n; p++) {
    f = (Math.imul(f ^ (tokens[p]! + 1), 0x01000193) + p) | 0;
    out[p] = f === 0 ? 1 : f;
  }
  return out;
}
