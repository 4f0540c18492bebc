import { describe, expect, it } from "vitest";
import { hashRoot } from "../../protocol/block-hash";
import { ProtocolError } from "../../protocol/errors";
import { BlockPool } from "../kv/block-pool";
import { KvCacheManager } from "../kv/kv-cache-manager";
import { PrefillRate } from "./prefill-rate";
import { Scheduler } from "./scheduler";
import { Sequence } from "./sequence";

const root = hashRoot({ modelId: "m", salt: "" });
let nextId = 1;
const seqOf = (n: number, offset = 0) => new Sequence({ seqId: nextId++, tokenIds: Array.from({ length: n }, (_, i) => (i + offset) % 1000), maxTokens: 2, hashRoot: root });

function setup(maxQueuedTokens: number, prefillRate?: PrefillRate) {
  const kv = new KvCacheManager({ pool: new BlockPool({ numBlocks: 256, blockSize: 4 }), enablePrefixCache: true });
  return { kv, s: new Scheduler(kv, { maxBatchTokens: 16, maxRunningSequences: 8, blockSize: 4, maxQueuedTokens }, prefillRate) };
}

/** Runs steps until nothing is left, marking tokens computed and finishing sequences at their max tokens. */
function drain(s: Scheduler, kv: KvCacheManager): void {
  while (s.hasWork) {
    for (const item of s.schedule().items) {
      kv.markComputed(item.seq.seqId, item.numTokens);
      if (item.samples) {
        item.seq.tokenIds.push(7);
        if (item.seq.numGenerated >= item.seq.maxTokens) s.finish(item.seq);
      }
    }
  }
}

function refusal(fn: () => void): ProtocolError | undefined {
  try {
    fn();
    return undefined;
  } catch (e) {
    return e as ProtocolError;
  }
}

describe("Scheduler queue bound (maxQueuedTokens)", () => {
  it("refuses a sequence that would take the queued prompt tokens past the bound, as overloaded (429), and queues nothing", () => {
    const { s } = setup(100);
    s.add(seqOf(60));
    expect(s.queuedTokens()).toBe(60);
    const late = seqOf(41, 300);
    const err = refusal(() => s.add(late));
    expect(err).toBeInstanceOf(ProtocolError);
    expect([err!.code, err!.httpStatus, err!.retryable]).toEqual(["overloaded", 429, true]);
    expect(err!.message).toContain("60 prompt tokens queued; 41 more would pass its bound of 100");
    expect(s.waiting).toHaveLength(1);
    expect(s.refused).toBe(1);
    // Exactly up to the bound is still taken.
    s.add(seqOf(40, 500));
    expect(s.queuedTokens()).toBe(100);
  });

  it("takes a sequence larger than the bound when nothing is queued (the context limit bounds it, not the queue)", () => {
    const { s } = setup(10);
    s.add(seqOf(50));
    expect(s.waiting).toHaveLength(1);
    expect(refusal(() => s.add(seqOf(1, 700)))?.code).toBe("overloaded");
  });

  it("counts a running prefill's rest and frees room as it computes", () => {
    const { kv, s } = setup(40);
    s.add(seqOf(40));
    s.schedule(); // admitted: 16 of 40 tokens in this step's chunk, not yet computed
    expect(s.queuedTokens()).toBe(40);
    expect(refusal(() => s.add(seqOf(8, 400)))?.code).toBe("overloaded");
    drain(s, kv);
    expect(s.queuedTokens()).toBe(0);
    s.add(seqOf(8, 400));
    expect(s.queuedTokens()).toBe(8);
  });

  it("does not count a cached prefix: a delta turn over a long cached transcript is cheap work", () => {
    const { kv, s } = setup(20);
    const first = seqOf(64);
    s.add(first);
    drain(s, kv); // its full blocks are now cached
    s.add(seqOf(12, 900)); // unrelated queued work
    const next = new Sequence({ seqId: nextId++, tokenIds: [...first.tokenIds.slice(0, 64), 1, 2, 3, 4], maxTokens: 2, hashRoot: root });
    s.add(next);
    expect(next.queuedTokens).toBe(4);
    expect(s.queuedTokens()).toBe(16);
  });

  it("says in the refusal when to retry: the queue's drain time at the measured prefill rate (retryAfterS)", () => {
    const rate = new PrefillRate(16);
    const { s } = setup(100, rate);
    s.add(seqOf(90));
    // No step measured yet: no estimate (the edge answers Retry-After: 1).
    expect(refusal(() => s.add(seqOf(20, 300)))?.retryAfterS).toBeUndefined();
    rate.noteStep(16, 800); // 20 prompt tokens/s: 90 queued drain in 4.5 s
    const err = refusal(() => s.add(seqOf(20, 300)));
    expect([err?.code, err?.retryAfterS, err?.toFrame().retryAfterS]).toEqual(["overloaded", 5, 5]);
  });
});
