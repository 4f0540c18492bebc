import { describe, expect, it } from "vitest";
import { SuffixTree } from "./suffix-tree";

const context = (tenant: string, tokenIds: readonly number[]) => ({ tenant, tokenIds, numPromptTokens: 1 });

/** The nodes a depth-bounded suffix trie of these replies has: distinct (tenant, path) pairs. */
function referenceNodes(replies: readonly { tenant: string; tokenIds: readonly number[] }[], maxDepth: number): number {
  const paths = new Set<string>();
  for (const { tenant, tokenIds } of replies) {
    for (let start = 0; start < tokenIds.length; start++) {
      for (let end = start + 1; end <= Math.min(tokenIds.length, start + maxDepth); end++) paths.add(`${tenant}|${tokenIds.slice(start, end).join(",")}`);
    }
  }
  return paths.size;
}

describe("SuffixTree", () => {
  it("drafts the continuation of the longest matching suffix, at most the match length long (max spec factor 1)", () => {
    const tree = new SuffixTree();
    tree.observe({ tenant: "a", tokenIds: [1, 2, 3, 4, 5, 6] });
    expect(tree.lookup(context("a", [9, 1, 2]), 8)).toEqual({ tokenIds: [3, 4], matchLength: 2 });
    expect(tree.lookup(context("a", [1, 2, 3]), 8)).toEqual({ tokenIds: [4, 5, 6], matchLength: 3 });
    expect(tree.propose(context("a", [1, 2, 3]), 2)).toEqual([4, 5]);
    expect(tree.propose(context("a", [7, 8]), 8)).toEqual([]);
    expect(new SuffixTree({ maxSpecFactor: 4 }).propose(context("a", [2]), 8)).toEqual([]);
  });

  it("follows the most frequent continuation, the most recent on a tie", () => {
    const tree = new SuffixTree({ maxSpecFactor: 4 });
    tree.observe({ tenant: "a", tokenIds: [1, 2, 3, 7] });
    tree.observe({ tenant: "a", tokenIds: [1, 2, 5, 7] });
    expect(tree.propose(context("a", [1, 2]), 2)).toEqual([5, 7]);
    tree.observe({ tenant: "a", tokenIds: [1, 2, 3, 8] });
    expect(tree.propose(context("a", [1, 2]), 2)).toEqual([3, 8]);
    tree.observe({ tenant: "a", tokenIds: [1, 2, 3, 7] });
    expect(tree.propose(context("a", [1, 2]), 2)).toEqual([3, 7]);
  });

  it("stops where the path's probability falls below minTokenProb, falling back to a shorter match", () => {
    const replies = [[1, 2, 3], [1, 2, 4], [1, 2, 5], [8, 2, 6], [8, 2, 6], [8, 2, 6]];
    const loose = new SuffixTree({ minTokenProb: 0.3 });
    const strict = new SuffixTree({ minTokenProb: 0.4 });
    for (const tokenIds of replies) {
      loose.observe({ tenant: "a", tokenIds });
      strict.observe({ tenant: "a", tokenIds });
    }
    // After [1 2]: 3, 4, 5 once each (1/3). After [2] alone: 6 three times of six (1/2).
    expect(loose.lookup(context("a", [1, 2]), 4)).toEqual({ tokenIds: [5], matchLength: 2 });
    expect(strict.lookup(context("a", [1, 2]), 4)).toEqual({ tokenIds: [6], matchLength: 1 });
  });

  it("never drafts one tenant's replies for another", () => {
    const tree = new SuffixTree();
    tree.observe({ tenant: "a", tokenIds: [1, 2, 3, 4] });
    tree.observe({ tenant: "b", tokenIds: [1, 2, 9, 9] });
    expect(tree.propose(context("a", [1, 2]), 2)).toEqual([3, 4]);
    expect(tree.propose(context("b", [1, 2]), 2)).toEqual([9, 9]);
    expect(tree.propose(context("c", [1, 2]), 2)).toEqual([]);
    expect(tree.stats().tenants).toBe(2);
  });

  it("evicts the oldest replies past maxTokens, and its nodes are those of the replies it holds", () => {
    const tree = new SuffixTree({ maxTokens: 10, maxDepth: 4 });
    tree.observe({ tenant: "a", tokenIds: [1, 2, 3, 4] });
    tree.observe({ tenant: "b", tokenIds: [5, 6, 7, 8] });
    expect(tree.propose(context("a", [1, 2]), 2)).toEqual([3, 4]);
    tree.observe({ tenant: "a", tokenIds: [9, 10, 11] });
    expect(tree.stats()).toEqual({ tenants: 2, replies: 2, tokens: 7, nodes: referenceNodes([{ tenant: "b", tokenIds: [5, 6, 7, 8] }, { tenant: "a", tokenIds: [9, 10, 11] }], 4) });
    expect(tree.propose(context("a", [1, 2]), 2)).toEqual([]);
    tree.observe({ tenant: "c", tokenIds: Array.from({ length: 25 }, (_, i) => i) });
    expect(tree.stats()).toEqual({ tenants: 1, replies: 1, tokens: 10, nodes: referenceNodes([{ tenant: "c", tokenIds: Array.from({ length: 10 }, (_, i) => i + 15) }], 4) });
  });

  it("counts the same nodes as a reference trie through random observations and evictions, within maxNodes", () => {
    let seed = 11;
    const next = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32);
    const tree = new SuffixTree({ maxTokens: 200, maxNodes: 300, maxDepth: 6 });
    const held: { tenant: string; tokenIds: number[] }[] = [];
    for (let r = 0; r < 150; r++) {
      const reply = { tenant: ["a", "b", "c"][Math.floor(next() * 3)]!, tokenIds: Array.from({ length: 1 + Math.floor(next() * 20) }, () => Math.floor(next() * 5)) };
      tree.observe(reply);
      held.push(reply);
      const stats = tree.stats();
      held.splice(0, held.length - stats.replies);
      expect(stats.tokens).toBe(held.reduce((sum, h) => sum + h.tokenIds.length, 0));
      expect(stats.tokens).toBeLessThanOrEqual(200);
      expect(stats.nodes).toBeLessThanOrEqual(300);
      expect(stats.nodes, `reply ${r}`).toBe(referenceNodes(held, 6));
      expect(stats.tenants).toBe(new Set(held.map((h) => h.tenant)).size);
    }
  });
});
