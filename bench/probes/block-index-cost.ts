/**
 * Block-index probe (issue 38): the pool's `BlockIndex` at fleet sizes, in Node (V8, as workerd):
 * N backends, each holding its own trajectories' chains plus one of 8 shared system prompts
 * (64 blocks each), 131,072 hashes in all at most; then `leadingBlocks` for a 256-block chain over
 * all N backends (what one placement asks), and one backend's delta of 16 stored + 16 removed
 * hashes (what one heartbeat applies). Prints microseconds per call (median of 200).
 *
 *   npx tsx bench/probes/block-index-cost.ts
 */
import { BlockIndex } from "../../durable-objects/routing/block-index";

const hx = (i: number) => i.toString(16).padStart(16, "0");
const median = (f: () => void) => {
  const t: number[] = [];
  for (let i = 0; i < 200; i++) {
    const t0 = performance.now();
    f();
    t.push(performance.now() - t0);
  }
  t.sort((a, b) => a - b);
  return (t[100]! * 1000).toFixed(1);
};
for (const N of [8, 32, 128, 512, 1000]) {
  const index = new BlockIndex();
  const perBackend = Math.floor(131_072 / N) - 64;
  const urls = Array.from({ length: N }, (_, b) => `http://b${b}`);
  let next = 1_000_000;
  urls.forEach((u, b) => {
    const shared = Array.from({ length: 64 }, (_, i) => hx((b % 8) * 64 + i));
    const own = Array.from({ length: perBackend }, () => hx(next++));
    index.apply(u, { seq: 1, kind: "snapshot", stored: [...shared, ...own], removed: [] });
  });
  const chain = [...Array.from({ length: 64 }, (_, i) => hx(3 * 64 + i)), ...Array.from({ length: 192 }, (_, i) => hx(9_000_000 + i))];
  const place = median(() => index.leadingBlocks(chain, urls));
  let seq = 1;
  const beat = median(() => {
    seq++;
    index.apply(urls[0]!, { seq, kind: "delta", stored: Array.from({ length: 16 }, () => hx(next++)), removed: [] });
  });
  console.log(`${N} backends, ${index.size} hashes: placement query ${place} us, one heartbeat's delta ${beat} us`);
}
