import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { REFERENCE, defaultTraceDir, loadTrace, parseTrace, replayTrace, type ReplayPolicy, type TraceRow } from "./trace-replay";

/** Rows in order, timestamps 0, 1, 2, ... */
function trace(...reqs: [inputLength: number, ids: number[]][]): TraceRow[] {
  return reqs.map(([input_length, hash_ids], i) => ({ timestamp: i, input_length, output_length: 1, hash_ids }));
}

function hits(rows: TraceRow[], policy: ReplayPolicy, capacity?: number): [number, number] {
  const r = replayTrace({ rows, policy, capacity });
  return [r.hitBlocks, r.hitTokens];
}

describe("trace replay, hand-computed", () => {
  // Capacity 3. A and B are the same request ending in a 76-token partial block; C pushes most of
  // A out; D shares A's first two blocks.
  //   lru (touch last first):  A -> [3 2 1] (LRU..MRU); B hits 1,2,3 (1100 tokens);
  //                            C -> [3 2 1 8 7] evict 3,2 -> [1 8 7]; D hits 1 (512) -> [9 2 1]
  //   tail-first: the partial block 3 is never cached, so B hits only 1,2 (1024); C evicts id 2;
  //                            D hits 1 (512)
  //   head-first (touch first first): B hits 3 (1100); C -> [1 2 3 7 8] evict 1,2; D hits nothing
  //   ideal: B hits 3 (1100), D hits 1,2 (1024)
  const t1 = trace([1100, [1, 2, 3]], [1100, [1, 2, 3]], [1024, [7, 8]], [1536, [1, 2, 9]]);

  it("counts blocks and tokens", () => {
    const r = replayTrace({ rows: t1, policy: "lru", capacity: 3 });
    expect(r).toMatchObject({ requests: 4, blocks: 11, tokens: 4760, hitBlocks: 4, hitTokens: 1612, capacity: 3 });
    expect(r.blockHitRate).toBeCloseTo(4 / 11, 12);
    expect(r.tokenHitRate).toBeCloseTo(1612 / 4760, 12);
  });

  it("a repeated partial block hits under lru, never under tail-first", () => {
    expect(hits(t1, "lru", 3)).toEqual([4, 1612]);
    expect(hits(t1, "lru-map", 3)).toEqual([4, 1612]);
    expect(hits(t1, "tail-first", 3)).toEqual([3, 1536]);
    expect(hits(t1, "head-first", 3)).toEqual([3, 1100]);
    expect(hits(t1, "ideal")).toEqual([5, 2124]);
  });

  // Capacity 4. P = two full blocks, then three one-block partial requests, then P again.
  //   lru: Q, R, S's partial blocks take cache slots: after S [2 1 3 4 5] evict 2 -> T hits 1 (512)
  //   tail-first: the partial blocks are released to the front of the free queue and reuse one
  //               uncached slot, so 1 and 2 survive: T hits 2 (1024)
  //   head-first: after P [1 2]; S evicts 1, the head: T hits nothing
  const t2 = trace([1024, [1, 2]], [100, [3]], [100, [4]], [100, [5]], [1024, [1, 2]]);

  it("partial blocks crowd out full ones under lru, not under tail-first", () => {
    expect(hits(t2, "lru", 4)).toEqual([1, 512]);
    expect(hits(t2, "lru-map", 4)).toEqual([1, 512]);
    expect(hits(t2, "tail-first", 4)).toEqual([2, 1024]);
    expect(hits(t2, "head-first", 4)).toEqual([0, 0]);
    expect(hits(t2, "ideal")).toEqual([2, 1024]);
  });

  it("a request longer than the pool keeps the blocks its order ranks most recent", () => {
    // Capacity 2, a 3-block request twice: lru keeps 1,2 (2 hits); head-first keeps 2,3 (none).
    const t3 = trace([1536, [1, 2, 3]], [1536, [1, 2, 3]]);
    expect(hits(t3, "lru", 2)).toEqual([2, 1024]);
    expect(hits(t3, "lru-map", 2)).toEqual([2, 1024]);
    expect(hits(t3, "tail-first", 2)).toEqual([2, 1024]);
    expect(hits(t3, "head-first", 2)).toEqual([0, 0]);
    expect(hits(t3, "ideal")).toEqual([3, 1536]);
  });

  it("lru on the BlockPool equals the Map LRU on random prefix-chained traces", () => {
    let seed = 12345;
    const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
    // A prefix tree of ids: a request walks down from the root, reusing a child or making one.
    const children = new Map<number, number[]>();
    let nextId = 1;
    const rows: TraceRow[] = [];
    for (let r = 0; r < 400; r++) {
      const len = 1 + Math.floor(rand() * 12);
      const ids: number[] = [];
      let parent = 0;
      for (let i = 0; i < len; i++) {
        const kids = children.get(parent) ?? [];
        children.set(parent, kids);
        const id = kids.length > 0 && rand() < 0.7 ? kids[Math.floor(rand() * kids.length)]! : nextId++;
        if (!kids.includes(id)) kids.push(id);
        ids.push(id);
        parent = id;
      }
      const inputLength = 512 * (len - 1) + 1 + Math.floor(rand() * 512);
      rows.push({ timestamp: r, input_length: inputLength, output_length: 1, hash_ids: ids });
    }
    for (const capacity of [1, 3, 8, 20, 50, 200, 5000]) {
      const pool = replayTrace({ rows, policy: "lru", capacity });
      const map = replayTrace({ rows, policy: "lru-map", capacity });
      expect([pool.hitBlocks, pool.hitTokens], `capacity ${capacity}`).toEqual([map.hitBlocks, map.hitTokens]);
      // Below the longest request (12 blocks) the Map also counts a request's own overflow blocks
      // (touched, then dropped) as evictions; the pool never caches them.
      if (capacity >= 12) expect(pool.evictions, `evictions at capacity ${capacity}`).toBe(map.evictions);
    }
    const ideal = replayTrace({ rows, policy: "ideal" });
    expect(replayTrace({ rows, policy: "lru", capacity: 5000 }).hitBlocks).toBe(ideal.hitBlocks);
  });

  it("parses and checks JSONL rows, sorting by timestamp", () => {
    const rows = parseTrace('{"timestamp":5,"input_length":600,"output_length":1,"hash_ids":[0,1]}\n\n{"timestamp":2,"input_length":512,"output_length":3,"hash_ids":[0]}\n');
    expect(rows.map((r) => r.timestamp)).toEqual([2, 5]);
    expect(() => parseTrace('{"timestamp":0,"input_length":513,"output_length":1,"hash_ids":[0]}')).toThrow(/line 1/);
    expect(() => replayTrace({ rows, policy: "lru" })).toThrow(/capacity/);
  });
});

const dir = defaultTraceDir();
const synthetic = join(dir, "mooncake_synthetic_trace.jsonl");
const conversation = join(dir, "mooncake_conversation_trace.jsonl");

// The traces live in the workplace's shared/ folder beside the checkout (CI has it); a checkout
// without them (someone else's machine) skips only these two data-dependent tests.
describe.skipIf(!existsSync(synthetic) || !existsSync(conversation))("Mooncake traces against SOURCES.md", () => {
  for (const file of [synthetic, conversation]) {
    const name = file.split("/").at(-1)!;
    it(`${name}: lru within 0.5 points of every reference point, ideal exact`, () => {
      const rows = loadTrace(file);
      const ref = REFERENCE[name]!;
      const ideal = replayTrace({ rows, policy: "ideal" });
      expect(Math.abs(100 * ideal.blockHitRate - ref.ideal[0])).toBeLessThan(0.006);
      expect(Math.abs(100 * ideal.tokenHitRate - ref.ideal[1])).toBeLessThan(0.006);
      for (const [capacity, [block, token]] of Object.entries(ref.lru)) {
        const r = replayTrace({ rows, policy: "lru", capacity: Number(capacity) });
        expect(Math.abs(100 * r.blockHitRate - block), `block hit rate at ${capacity}`).toBeLessThan(0.5);
        if (token !== null) expect(Math.abs(100 * r.tokenHitRate - token), `token hit rate at ${capacity}`).toBeLessThan(0.5);
      }
    });
  }
});
