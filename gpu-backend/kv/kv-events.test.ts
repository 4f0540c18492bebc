import { describe, expect, it } from "vitest";
import { hashBlocks, hashRoot, shortBlockHash, type BlockHash } from "../../protocol/block-hash";
import { BlockPool } from "./block-pool";
import { KvCacheManager } from "./kv-cache-manager";
import { KvEventLog, type KvEventSink } from "./kv-events";
import { checked, range, sequence } from "./testing";

const B = 4;
const root = hashRoot({ modelId: "test-model", salt: "" });
const h = (i: number): BlockHash => `${i.toString(16).padStart(16, "0")}${"f".repeat(16)}`;
const short = (i: number) => shortBlockHash(h(i));
const nothingCached = () => [];

/** A log that already published its first snapshot, so it records deltas. */
function synced(params: ConstructorParameters<typeof KvEventLog>[0] = {}): KvEventLog {
  const log = new KvEventLog(params);
  expect(log.take(nothingCached).kind).toBe("snapshot");
  return log;
}

class Recorder implements KvEventSink {
  readonly events: string[] = [];
  stored(blockHash: BlockHash) {
    this.events.push(`+${blockHash}`);
  }
  removed(blockHash: BlockHash) {
    this.events.push(`-${blockHash}`);
  }
}

describe("KvEventLog", () => {
  it("starts with a snapshot, then publishes deltas numbered one after another", () => {
    const log = new KvEventLog();
    expect(log.needsResync).toBe(true);
    log.stored(h(9)); // before the first snapshot: the snapshot covers it
    expect(log.numPending).toBe(0);
    expect(log.take(() => [h(1), h(2)])).toEqual({ seq: 1, kind: "snapshot", stored: [short(1), short(2)], removed: [] });
    log.stored(h(3));
    log.removed(h(1));
    expect(log.take(nothingCached)).toEqual({ seq: 2, kind: "delta", stored: [short(3)], removed: [short(1)] });
    expect(log.take(nothingCached)).toEqual({ seq: 3, kind: "delta", stored: [], removed: [] });
  });

  it("publishes blocks kept in the host tier as offloaded, after their removal from the pool, and in snapshots", () => {
    const log = synced();
    log.removed(h(1));
    log.offloaded(h(1)); // evicted from the pool, kept in the tier
    log.removed(h(2)); // evicted, not kept
    log.offloaded(h(3));
    log.stored(h(3)); // back in the pool from the tier
    expect(log.take(nothingCached)).toEqual({ seq: 2, kind: "delta", stored: [short(3)], removed: [short(2)], offloaded: [short(1)] });
    log.requestResync();
    expect(log.take(() => [h(4)], () => [h(5), h(6)])).toEqual({ seq: 3, kind: "snapshot", stored: [short(4)], removed: [], offloaded: [short(5), short(6)] });
    // The snapshot's cap counts both.
    const capped = new KvEventLog({ maxSnapshot: 2 });
    expect(capped.take(() => [h(4)], () => [h(5), h(6)])).toEqual({ seq: 1, kind: "snapshot", stored: [short(4)], removed: [], offloaded: [short(5)] });
  });

  it("publishes short hashes: the first 16 hex characters", () => {
    const log = synced();
    const full = "0123456789abcdef" + "fedcba9876543210";
    log.stored(full);
    expect(log.take(nothingCached).stored).toEqual(["0123456789abcdef"]);
  });

  it("keeps only each hash's last event between two batches", () => {
    const log = synced();
    log.stored(h(1));
    log.removed(h(1)); // stored then evicted: the pool only needs to know it is gone
    log.removed(h(2));
    log.stored(h(2)); // evicted then cached again: present
    log.stored(h(3));
    log.stored(h(3));
    expect(log.numPending).toBe(3);
    const batch = log.take(nothingCached);
    expect(batch.stored.sort()).toEqual([short(2), short(3)]);
    expect(batch.removed).toEqual([short(1)]);
  });

  it("overflows into a resync: the pending events are dropped and the next batch is a snapshot of the cache", () => {
    const log = synced({ maxPending: 3 });
    for (const i of [1, 2, 3]) log.stored(h(i));
    expect(log.needsResync).toBe(false);
    log.stored(h(2)); // already pending: no growth
    expect(log.needsResync).toBe(false);
    log.stored(h(4)); // a 4th distinct hash: overflow
    expect(log.needsResync).toBe(true);
    expect(log.numPending).toBe(0);
    log.removed(h(1)); // ignored: the snapshot will tell
    expect(log.numPending).toBe(0);
    expect(log.take(() => [h(2), h(3), h(4)])).toEqual({ seq: 2, kind: "snapshot", stored: [short(2), short(3), short(4)], removed: [] });
    expect(log.stats).toEqual({ batches: 2, snapshots: 2, overflows: 1 });
    log.stored(h(5));
    expect(log.take(nothingCached)).toMatchObject({ seq: 3, kind: "delta", stored: [short(5)] });
  });

  it("caps a snapshot at maxSnapshot hashes", () => {
    const log = new KvEventLog({ maxSnapshot: 2 });
    expect(log.take(() => [h(1), h(2), h(3)]).stored).toEqual([short(1), short(2)]);
  });

  it("turns the next batch into a snapshot on requestResync (a failed publish, or the pool asked)", () => {
    const log = synced();
    log.stored(h(1));
    log.requestResync();
    expect(log.take(() => [h(1), h(7)])).toMatchObject({ kind: "snapshot", stored: [short(1), short(7)] });
  });

  it("refuses bad bounds", () => {
    expect(() => new KvEventLog({ maxPending: 0 })).toThrow(/maxPending/);
    expect(() => new KvEventLog({ maxSnapshot: 1e9 })).toThrow(/maxSnapshot/);
  });
});

describe("BlockPool / KvCacheManager emit KV events for real cache operations", () => {
  function setup(numBlocks: number, enablePrefixCache = true) {
    const pool = new BlockPool({ numBlocks, blockSize: B });
    const recorder = new Recorder();
    pool.setEventSink(recorder);
    const kv = checked(new KvCacheManager({ pool, enablePrefixCache }));
    return { pool, kv, recorder };
  }

  it("stores each full block's chained hash once as it is computed, prefill and decode alike", () => {
    const { kv, recorder } = setup(8);
    const tokens = range(1, 10); // 10 tokens: 2 full blocks
    const seq = sequence({ seqId: 1, tokenIds: tokens, root });
    kv.startSequence(seq);
    expect(kv.allocateSlots(1, 10)).toBe(true);
    kv.markComputed(1, 10);
    const chain = hashBlocks(root, tokens, B);
    expect(recorder.events).toEqual(chain.map((x) => `+${x}`));
    // Two decode steps fill the third block.
    for (const t of [11, 12]) {
      seq.tokenIds.push(t);
      expect(kv.allocateSlots(1, 1)).toBe(true);
      kv.markComputed(1, 1);
    }
    expect(recorder.events).toEqual(hashBlocks(root, range(1, 12), B).map((x) => `+${x}`));
    expect([...kv.cachedBlockHashes()]).toEqual(hashBlocks(root, range(1, 12), B));
  });

  it("a prefix hit stores nothing new; a duplicate block is not stored twice", () => {
    const { kv, recorder } = setup(8);
    const tokens = range(1, 10);
    for (const seqId of [1, 2]) {
      kv.startSequence(sequence({ seqId, tokenIds: tokens, root }));
      expect(kv.allocateSlots(seqId, kv.tokenIds(seqId).length - kv.numComputedTokens(seqId))).toBe(true);
      kv.markComputed(seqId, kv.tokenIds(seqId).length - kv.numComputedTokens(seqId));
    }
    expect(recorder.events).toEqual(hashBlocks(root, tokens, B).map((x) => `+${x}`));
  });

  it("reports removed when a cached block is evicted to make room, tail of the chain first", () => {
    const { kv, recorder } = setup(3);
    const a = range(1, 12); // 3 full blocks: the whole pool
    kv.startSequence(sequence({ seqId: 1, tokenIds: a, root }));
    expect(kv.allocateSlots(1, 12)).toBe(true);
    kv.markComputed(1, 12);
    kv.freeSequence(1);
    recorder.events.length = 0;
    // Another prompt needs 2 blocks: the two least useful cached blocks go (tail, then middle).
    kv.startSequence(sequence({ seqId: 2, tokenIds: range(100, 8), root }));
    expect(kv.allocateSlots(2, 8)).toBe(true);
    const chainA = hashBlocks(root, a, B);
    expect(recorder.events).toEqual([`-${chainA[2]}`, `-${chainA[1]}`]);
    expect([...kv.cachedBlockHashes()]).toEqual([chainA[0]]);
  });

  it("emits nothing with the prefix cache off", () => {
    const { kv, recorder } = setup(4, false);
    kv.startSequence(sequence({ seqId: 1, tokenIds: range(1, 12), root }));
    expect(kv.allocateSlots(1, 12)).toBe(true);
    kv.markComputed(1, 12);
    kv.freeSequence(1);
    kv.startSequence(sequence({ seqId: 2, tokenIds: range(50, 12), root }));
    expect(kv.allocateSlots(2, 12)).toBe(true);
    expect(recorder.events).toEqual([]);
  });

  it("a log on the pool replays into exactly the set of cached hashes", () => {
    const { pool, kv } = setup(6);
    const log = new KvEventLog();
    pool.setEventSink(log);
    const mirror = new Set(log.take(() => kv.cachedBlockHashes()).stored);
    let seqId = 0;
    for (let round = 0; round < 20; round++) {
      const start = (round % 5) * 4 + 1; // prompts overlapping each other by whole blocks
      const tokens = range(start, 13);
      kv.startSequence(sequence({ seqId: ++seqId, tokenIds: tokens, root }));
      const n = tokens.length - kv.numComputedTokens(seqId);
      expect(kv.allocateSlots(seqId, n)).toBe(true);
      kv.markComputed(seqId, n);
      kv.freeSequence(seqId);
      if (round % 3 === 2) {
        const batch = log.take(() => kv.cachedBlockHashes());
        expect(batch.kind).toBe("delta");
        for (const x of batch.removed) mirror.delete(x);
        for (const x of batch.stored) mirror.add(x);
        expect([...mirror].sort()).toEqual([...kv.cachedBlockHashes()].map(shortBlockHash).sort());
      }
    }
  });
});
