import { describe, expect, it } from "vitest";
import { SequenceLookup } from "./sequence-lookup";

const context = (tokenIds: readonly number[], numPromptTokens = tokenIds.length) => ({ tenant: "t", tokenIds, numPromptTokens });

describe("SequenceLookup", () => {
  it("drafts from the sequence's own prompt and output, following the array as it grows", () => {
    const lookup = new SequenceLookup();
    // The prompt holds an id (40 41 42 43) after a key (9); the reply repeats the key.
    const tokenIds = [1, 9, 40, 41, 42, 43, 2, 3];
    expect(lookup.propose(context(tokenIds), 4)).toEqual([]);
    tokenIds.push(9);
    expect(lookup.lookup(context(tokenIds, 8), 4)).toEqual({ tokenIds: [40, 41, 42, 43], matchLength: 1 });
    tokenIds.push(40, 41);
    expect(lookup.propose(context(tokenIds, 8), 4)).toEqual([42, 43, 2, 3]);
    expect(lookup.propose(context(tokenIds, 8), 2)).toEqual([42, 43]);
  });

  it("keeps one index per sequence array, and forgets one on request", () => {
    const lookup = new SequenceLookup();
    const a = [1, 2, 3, 1];
    const b = [1, 5, 6, 1];
    expect(lookup.propose(context(a), 2)).toEqual([2, 3]);
    expect(lookup.propose(context(b), 2)).toEqual([5, 6]);
    expect(lookup.has(a) && lookup.has(b)).toBe(true);
    lookup.forget(a);
    expect(lookup.has(a)).toBe(false);
    expect(lookup.has(b)).toBe(true);
    expect(lookup.propose(context(a), 2)).toEqual([2, 3]);
  });

  it("gives the same drafts for a fresh copy of the context every call (indexed from scratch)", () => {
    const lookup = new SequenceLookup({ maxNgram: 3 });
    const tokenIds = [4, 5, 6, 7, 4, 5, 8, 4, 5];
    expect(lookup.propose(context([...tokenIds]), 3)).toEqual([8, 4, 5]);
    expect(lookup.propose(context([...tokenIds, 8]), 3)).toEqual([4, 5, 8]);
  });
});
