import { describe, expect, it } from "vitest";
import { hashRoot } from "../../protocol/block-hash";
import { BlockPool } from "../kv/block-pool";
import { KvCacheManager } from "../kv/kv-cache-manager";
import { Scheduler, type StepPlan } from "./scheduler";
import { Sequence } from "./sequence";

const root = hashRoot({ modelId: "m", salt: "" });
let nextId = 1;
const seqOf = (n: number, maxTokens = 4, offset = 0) =>
  new Sequence({ seqId: nextId++, tokenIds: Array.from({ length: n }, (_, i) => (i + offset) % 1000), maxTokens, hashRoot: root });

/** A stand-in for the engine's side of a step: mark computed, sample a fixed token, finish at max. */
function runStep(s: Scheduler, kv: KvCacheManager, plan: StepPlan): void {
  for (const item of plan.items) {
    kv.markComputed(item.seq.seqId, item.numTokens);
    if (item.samples) {
      item.seq.tokenIds.push(7);
      if (item.seq.numGenerated >= item.seq.maxTokens) s.finish(item.seq);
    }
  }
  kv.checkInvariants();
}

function setup(numBlocks: number, maxBatchTokens = 64, maxRunningSequences = 8, prefillWastePerToken = 1024) {
  const kv = new KvCacheManager({ pool: new BlockPool({ numBlocks, blockSize: 4 }), enablePrefixCache: true });
  return { kv, s: new Scheduler(kv, { maxBatchTokens, maxRunningSequences, blockSize: 4, prefillWastePerToken }) };
}

describe("Scheduler", () => {
  it("chunks a long prefill under the token budget, then decodes", () => {
    const { kv, s } = setup(64, 16);
    const a = seqOf(40, 2);
    s.add(a);
    const sizes: number[] = [];
    while (s.hasWork) {
      const plan = s.schedule();
      sizes.push(plan.items[0]!.numTokens);
      runStep(s, kv, plan);
    }
    expect(sizes).toEqual([16, 16, 8, 1]);
    expect(a.numPrefilledTokens).toBe(40);
  });

  it("puts decode tokens first and fills the rest of the budget with prefill", () => {
    const { kv, s } = setup(64, 16);
    const a = seqOf(6, 8);
    s.add(a);
    runStep(s, kv, s.schedule()); // a prefilled, sampled once
    const b = seqOf(30, 2, 500);
    s.add(b);
    const plan = s.schedule();
    expect(plan.items.map((i) => [i.seq.seqId, i.numTokens])).toEqual([
      [a.seqId, 1],
      [b.seqId, 15],
    ]);
    expect(plan.items[0]!.samples).toBe(true);
    expect(plan.items[1]!.samples).toBe(false);
  });

  it("admits first come first served and respects the running cap", () => {
    const { s } = setup(64, 100, 2);
    const seqs = [seqOf(5), seqOf(5, 4, 100), seqOf(5, 4, 200)];
    seqs.forEach((q) => s.add(q));
    const plan = s.schedule();
    expect(plan.items.map((i) => i.seq)).toEqual(seqs.slice(0, 2));
    expect(s.waiting).toEqual([seqs[2]]);
  });

  it("admits a sequence past its cached prefix", () => {
    const { kv, s } = setup(64, 100);
    const a = seqOf(20, 1);
    s.add(a);
    while (s.hasWork) runStep(s, kv, s.schedule());
    const b = new Sequence({ seqId: nextId++, tokenIds: [...a.tokenIds.slice(0, 20), 1, 2, 3], maxTokens: 1, hashRoot: root });
    s.add(b);
    const plan = s.schedule();
    expect(b.numCachedTokens).toBe(20);
    expect(plan.items[0]!.startPos).toBe(20);
    expect(plan.items[0]!.numTokens).toBe(3);
  });

  it("preempts the newest running sequence when blocks run out, and it finishes later", () => {
    // 6 blocks of 4 tokens; two sequences of 8 tokens generating 8 tokens each need 4 blocks each.
    const { kv, s } = setup(6, 64);
    const a = seqOf(8, 8);
    const b = seqOf(8, 8, 300);
    s.add(a);
    s.add(b);
    let preempted = 0;
    let steps = 0;
    while (s.hasWork && steps++ < 100) {
      const plan = s.schedule();
      preempted += plan.preempted.length;
      expect(plan.preempted.every((p) => p === b)).toBe(true);
      expect(plan.rejected).toEqual([]);
      runStep(s, kv, plan);
    }
    expect(preempted).toBeGreaterThan(0);
    expect(a.numGenerated).toBe(8);
    expect(b.numGenerated).toBe(8);
    expect(b.numPreemptions).toBeGreaterThan(0);
    expect(kv.numSequences).toBe(0);
  });

  it("holds back a sequence whose prefix another sequence is prefilling, then admits it past that prefix", () => {
    const { kv, s } = setup(64, 16);
    const a = seqOf(40, 1);
    const b = new Sequence({ seqId: nextId++, tokenIds: [...a.tokenIds.slice(0, 36), 901, 902, 903], maxTokens: 1, hashRoot: root });
    const c = seqOf(8, 1, 700); // unrelated: admitted right away
    s.add(a);
    s.add(b);
    s.add(c);
    let plan = s.schedule();
    expect(plan.items.map((i) => i.seq)).toEqual([a]); // budget 16 all used by a's first chunk
    runStep(s, kv, plan);
    plan = s.schedule();
    expect(plan.items.map((i) => i.seq)).toEqual([a]);
    runStep(s, kv, plan);
    plan = s.schedule(); // a: last 8 tokens; b still waits; c fills the rest
    expect(plan.items.map((i) => i.seq)).toEqual([a, c]);
    runStep(s, kv, plan);
    plan = s.schedule();
    expect(plan.items.map((i) => i.seq)).toContain(b);
    expect(b.numCachedTokens).toBe(36);
  });

  it("batches prefill chunks whose layout wastes little, and lets one that would waste take its turn", () => {
    const { kv, s } = setup(512, 512, 8, 100);
    const long = Array.from({ length: 3 }, (_, k) => seqOf(400, 1, k * 300 + 7));
    long.forEach((q) => s.add(q));
    while (s.hasWork) runStep(s, kv, s.schedule()); // all three computed and finished: cached
    const turn = (q: Sequence, k: number) => new Sequence({ seqId: nextId++, tokenIds: [...q.tokenIds.slice(0, 400), ...Array.from({ length: 8 }, (_, i) => 5 + i + k)], maxTokens: 1, hashRoot: root });
    const next = long.map((q, k) => turn(q, k));
    next.forEach((q) => s.add(q));
    const plan = s.schedule();
    expect(next.every((q) => q.numCachedTokens === 400)).toBe(true);
    // 8-token turns on 400 cached tokens each: attended apart (prefillBundles), nothing wasted.
    expect(plan.items.map((i) => i.seq)).toEqual(next);
    runStep(s, kv, plan);
    // Another such turn beside a fresh 100-token prompt: in one bundle 108 x 508 entries, apart
    // 2 x 100 x 500; alone 8 x 408 + 100 x 100: 41,600 wasted > 100 x 108: the prompt waits.
    const later = turn(long[0]!, 20);
    const fresh = seqOf(100, 1, 2000);
    s.add(later);
    s.add(fresh);
    expect(s.schedule().items.map((i) => i.seq)).toEqual([later]);
  });

  it("rejects a sequence that cannot fit even alone", () => {
    const { kv, s } = setup(4, 64);
    const big = seqOf(40);
    const small = seqOf(4, 1, 900);
    s.add(big);
    s.add(small);
    const plan = s.schedule();
    expect(plan.rejected).toEqual([big]);
    expect(big.status).toBe("finished");
    runStep(s, kv, plan);
    while (s.hasWork) runStep(s, kv, s.schedule());
    expect(small.numGenerated).toBe(1);
  });

  it("runs a decoding sequence's draft as lookahead in the token budget, cut to what is left, dropped rather than preempting", () => {
    const { kv, s } = setup(64, 12);
    const a = seqOf(6, 20);
    const b = seqOf(6, 20, 50);
    s.add(a);
    s.add(b);
    runStep(s, kv, s.schedule()); // both prefilled, one token sampled each
    a.draft = [1, 2, 3, 4, 5];
    b.draft = [9, 9, 9, 9, 9, 9, 9, 9];
    const plan = s.schedule();
    expect(plan.items.map((i) => [i.numTokens, i.draft.length])).toEqual([[1, 5], [1, 5]]); // 6 + 6 = the budget of 12
    expect(kv.blockTable(a.seqId)).toHaveLength(3); // 6 computed + 1 + 5 lookahead = 12 slots
    runStep(s, kv, plan);
    // A pool with no block left for the draft: it is dropped, nobody is preempted.
    const tiny = setup(2, 64);
    const c = seqOf(7, 20);
    tiny.s.add(c);
    runStep(tiny.s, tiny.kv, tiny.s.schedule());
    c.draft = [1, 2, 3];
    const p2 = tiny.s.schedule();
    expect(p2.items.map((i) => [i.numTokens, i.draft.length])).toEqual([[1, 0]]);
    expect(p2.preempted).toEqual([]);
  });

  it("adds verify runs to no prefill group: drafts of long-context sequences and a prefill chunk share a step", () => {
    const { kv, s } = setup(128, 256, 8, 0); // no attention waste allowed in the prefill group
    const long = [seqOf(100, 20), seqOf(120, 20, 300)];
    for (const q of long) s.add(q);
    while (long.some((q) => q.numGenerated === 0)) runStep(s, kv, s.schedule());
    for (const q of long) q.draft = [1, 2, 3, 4];
    const fresh = seqOf(30, 4, 600);
    s.add(fresh);
    const plan = s.schedule();
    expect(plan.items.map((i) => [i.seq, i.numTokens, i.draft.length])).toEqual([[long[0], 1, 4], [long[1], 1, 4], [fresh, 30, 0]]);
  });
});
