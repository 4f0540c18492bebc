import { describe, expect, it } from "vitest";
import { hashBlock, hashBlocks, hashRoot, type HashExtra } from "./block-hash";

const EXTRA: HashExtra = { modelId: "demo-llama-random", salt: "tenant-a" };
const TOKENS_48 = Array.from({ length: 48 }, (_, i) => i);

// Golden values: any change to the hash function breaks these on purpose (the edge and every
// backend must agree on them, and cached blocks are named by them).
const GOLDEN_ROOT_NO_SALT = "175ea155388ca7e9d8a3ef414685d1fd";
const GOLDEN_ROOT = "43d4e6184d740b1a3010fd5cc96144c6";
const GOLDEN_BLOCKS_0_TO_47 = [
  "b983496407b3ad95c153bfb08bdbd359",
  "bc7fb66876e40fd033713cba82fd9935",
  "26f493ab099112e07a8fd5721d78fa08",
];

describe("hashRoot", () => {
  it("length-prefixes its fields, so they cannot run into each other", () => {
    expect(hashRoot({ modelId: "a\u0000", salt: "b" })).not.toBe(hashRoot({ modelId: "a", salt: "\u0000b" }));
  });

  it("rejects bad block sizes, parents and token ids", () => {
    expect(() => hashBlocks(hashRoot(EXTRA), TOKENS_48, 0)).toThrow(/blockSize/);
    expect(() => hashBlock("xyz", [1])).toThrow(/hex/);
    expect(() => hashBlock(hashRoot(EXTRA), [-1])).toThrow(/u32/);
  });

  it("matches the pinned values", () => {
    expect(hashRoot({ modelId: "demo-llama-random", salt: "" })).toBe(GOLDEN_ROOT_NO_SALT);
    expect(hashRoot(EXTRA)).toBe(GOLDEN_ROOT);
  });

  it("is 32 lowercase hex characters and depends on the model id and the salt", () => {
    expect(hashRoot(EXTRA)).toMatch(/^[0-9a-f]{32}$/);
    expect(hashRoot({ ...EXTRA, modelId: "other-model" })).not.toBe(GOLDEN_ROOT);
    expect(hashRoot({ ...EXTRA, salt: "tenant-b" })).not.toBe(GOLDEN_ROOT);
  });
});

describe("hashBlocks", () => {
  it("matches the pinned hashes of tokens 0..47 in blocks of 16", () => {
    expect(hashBlocks(hashRoot(EXTRA), TOKENS_48, 16)).toEqual(GOLDEN_BLOCKS_0_TO_47);
  });

  it("chains hashBlock from the root", () => {
    const root = hashRoot(EXTRA);
    const h0 = hashBlock(root, TOKENS_48.slice(0, 16));
    const h1 = hashBlock(h0, TOKENS_48.slice(16, 32));
    const h2 = hashBlock(h1, TOKENS_48.slice(32, 48));
    expect([h0, h1, h2]).toEqual(GOLDEN_BLOCKS_0_TO_47);
  });

  it("gives the same hashes for a typed array of the same tokens", () => {
    expect(hashBlocks(hashRoot(EXTRA), Uint32Array.from(TOKENS_48), 16)).toEqual(GOLDEN_BLOCKS_0_TO_47);
  });

  it("gives different hashes everywhere for a different salt", () => {
    const a = hashBlocks(hashRoot(EXTRA), TOKENS_48, 16);
    const b = hashBlocks(hashRoot({ ...EXTRA, salt: "tenant-b" }), TOKENS_48, 16);
    const c = hashBlocks(hashRoot({ ...EXTRA, salt: "" }), TOKENS_48, 16);
    for (let i = 0; i < 3; i++) {
      expect(b[i]).not.toBe(a[i]);
      expect(c[i]).not.toBe(a[i]);
      expect(c[i]).not.toBe(b[i]);
    }
  });

  it("does not hash a partial trailing block", () => {
    const root = hashRoot(EXTRA);
    expect(hashBlocks(root, [...TOKENS_48, 48, 49, 50], 16)).toEqual(GOLDEN_BLOCKS_0_TO_47);
    expect(hashBlocks(root, TOKENS_48.slice(0, 47), 16)).toEqual(GOLDEN_BLOCKS_0_TO_47.slice(0, 2));
    expect(hashBlocks(root, TOKENS_48.slice(0, 15), 16)).toEqual([]);
    expect(hashBlocks(root, [], 16)).toEqual([]);
  });

  it("changes the hash of a changed token's block and of every later block, never an earlier one", () => {
    const root = hashRoot(EXTRA);
    for (const i of [0, 7, 15, 16, 31, 32, 47]) {
      const tokens = TOKENS_48.slice();
      tokens[i] = 1000 + i;
      const hashes = hashBlocks(root, tokens, 16);
      const block = Math.floor(i / 16);
      for (let b = 0; b < 3; b++) {
        if (b < block) expect(hashes[b], `token ${i}, block ${b}`).toBe(GOLDEN_BLOCKS_0_TO_47[b]);
        else expect(hashes[b], `token ${i}, block ${b}`).not.toBe(GOLDEN_BLOCKS_0_TO_47[b]);
      }
    }
  });

  it("depends on the block size", () => {
    const root = hashRoot(EXTRA);
    const by8 = hashBlocks(root, TOKENS_48, 8);
    expect(by8).toHaveLength(6);
    expect(by8).not.toContain(GOLDEN_BLOCKS_0_TO_47[0]);
  });
});
