import { describe, expect, it } from "vitest";
import { SuffixSource } from "./suffix-source";
import { SuffixTree } from "./suffix-tree";

const context = (tenant: string, tokenIds: readonly number[]) => ({ tenant, tokenIds, numPromptTokens: tokenIds.length - 1 });

describe("SuffixSource", () => {
  it("takes the sequence's own draft on a longer or equal match, the tenant tree's on a longer one or when the sequence has none", () => {
    const source = new SuffixSource(new SuffixTree({ maxSpecFactor: 4 }));
    source.observe({ tenant: "a", tokenIds: [1, 2, 3, 4, 5] });
    // The sequence has [2 3] -> 9 9 (match 2); the tree has [1 2 3] -> 4 5 (match 3).
    expect(source.lookup(context("a", [2, 3, 9, 9, 1, 2, 3]), 2)).toEqual({ tokenIds: [4, 5], matchLength: 3 });
    // Equal matches ([2 3]): the sequence's own.
    expect(source.lookup(context("a", [2, 3, 9, 9, 7, 2, 3]), 2)).toEqual({ tokenIds: [9, 9], matchLength: 2 });
    // Nothing in the sequence: the tree's.
    expect(source.propose(context("a", [8, 3]), 2)).toEqual([4, 5]);
    // A longer own match wins.
    expect(source.lookup(context("a", [7, 1, 2, 3, 6, 7, 1, 2, 3]), 2)).toEqual({ tokenIds: [6, 7], matchLength: 4 });
  });

  it("shares the tree between sequences of a tenant and never across tenants", () => {
    const tree = new SuffixTree({ maxSpecFactor: 4 });
    const one = new SuffixSource(tree);
    const two = new SuffixSource(tree);
    one.observe({ tenant: "a", tokenIds: [10, 11, 12, 13] });
    expect(two.propose(context("a", [5, 10, 11]), 4)).toEqual([12, 13]);
    expect(two.propose(context("b", [5, 10, 11]), 4)).toEqual([]);
  });
});
