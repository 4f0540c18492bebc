import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CpuExecutor } from "./cpu-executor";
import { randomWeights } from "../testing/random-weights";
import { referenceForward } from "../testing/reference-forward";
import { tinySpec } from "../testing/tiny-spec";
import type { DecoderSpec } from "../graph/decoder-spec";

/**
 * The ONNX decoder graph against the plain-TypeScript reference, and cached vs uncached runs.
 *
 * Tolerances: graph vs reference (float32 graph vs float64 reference) max |diff| <= 1e-4 on logits
 * of magnitude ~1-3; cached vs computed-from-scratch max |diff| <= 1e-5 (same float32 math,
 * different batch shapes), and identical argmax everywhere.
 */
const REF_TOL = 1e-4;
const CACHE_TOL = 1e-5;
const BLOCK = 4;

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

function argmaxRows(x: Float32Array, V: number): number[] {
  const out: number[] = [];
  for (let r = 0; r < x.length / V; r++) {
    let best = 0;
    for (let i = 1; i < V; i++) if (x[r * V + i]! > x[r * V + best]!) best = i;
    out.push(best);
  }
  return out;
}

const tokens = Array.from({ length: 23 }, (_, i) => (i * 37 + 11) % 97);
const table = [5, 2, 9, 0, 7, 3, 11]; // deliberately not in order: paging must not care

for (const variant of [
  { name: "tied, no bias", spec: tinySpec() },
  { name: "untied, qkv bias (Qwen2-style)", spec: tinySpec({ tieWordEmbeddings: false, attentionBias: true }) },
  { name: "no GQA (heads == kv heads)", spec: tinySpec({ numKvHeads: 4 }) },
] satisfies { name: string; spec: DecoderSpec }[]) {
  describe(`cpu executor: ${variant.name}`, () => {
    const weights = randomWeights(variant.spec, 1234);
    const V = variant.spec.vocabSize;
    let exec: CpuExecutor;
    let full: Float32Array;

    beforeAll(async () => {
      exec = await CpuExecutor.create({ spec: variant.spec, weights, numBlocks: 16, blockSize: BLOCK, threads: 1 });
      full = (await exec.run([{ tokenIds: tokens, startPos: 0, blockTable: table, logits: "all" }])).logits[0]!;
    });
    afterAll(() => exec.dispose());

    it("matches the TypeScript reference forward pass", () => {
      const ref = referenceForward(variant.spec, weights, tokens);
      expect(maxAbsDiff(full, ref)).toBeLessThan(REF_TOL);
      expect(argmaxRows(full, V)).toEqual(argmaxRows(ref, V));
    });

    for (const split of [1, 3, 4, 5, 8, 13, 22]) {
      it(`gives the same logits with the first ${split} tokens cached`, async () => {
        // The first run wrote every token's KV into `table`; reuse the first `split` positions.
        const { logits } = await exec.run([{ tokenIds: tokens.slice(split), startPos: split, blockTable: table, logits: "all" }]);
        const expected = full.subarray(split * V);
        expect(maxAbsDiff(logits[0]!, expected)).toBeLessThan(CACHE_TOL);
        expect(argmaxRows(logits[0]!, V)).toEqual(argmaxRows(expected, V));
      });
    }

    it("batches decode tokens and prefill chunks of several sequences in one step", async () => {
      const { logits } = await exec.run([
        { tokenIds: [tokens[20]!], startPos: 20, blockTable: table, logits: "last" },
        { tokenIds: tokens.slice(6, 10), startPos: 6, blockTable: table, logits: "all" },
        { tokenIds: [tokens[2]!], startPos: 2, blockTable: table, logits: "last" },
        { tokenIds: tokens.slice(12, 15), startPos: 12, blockTable: table, logits: "none" },
      ]);
      expect(maxAbsDiff(logits[0]!, full.subarray(20 * V, 21 * V))).toBeLessThan(CACHE_TOL);
      expect(maxAbsDiff(logits[1]!, full.subarray(6 * V, 10 * V))).toBeLessThan(CACHE_TOL);
      expect(maxAbsDiff(logits[2]!, full.subarray(2 * V, 3 * V))).toBeLessThan(CACHE_TOL);
      expect(logits[3]!.length).toBe(0);
    });

    it("returns the argmax of the last row without fetching logits", async () => {
      const { logits, argmax } = await exec.run([
        { tokenIds: [tokens[20]!], startPos: 20, blockTable: table, logits: "argmax" },
        { tokenIds: tokens.slice(6, 10), startPos: 6, blockTable: table, logits: "argmax" },
      ]);
      expect(logits.map((l) => l.length)).toEqual([0, 0]);
      expect(argmax).toEqual([argmaxRows(full.subarray(20 * V, 21 * V), V)[0], argmaxRows(full.subarray(9 * V, 10 * V), V)[0]]);
    });

    it("writes the same KV into the pool wherever the blocks are", async () => {
      const other = [14, 15, 1, 4, 6, 8];
      await exec.run([{ tokenIds: tokens.slice(0, 21), startPos: 0, blockTable: other, logits: "none" }]);
      const slotsA = Array.from({ length: 21 }, (_, p) => table[Math.floor(p / BLOCK)]! * BLOCK + (p % BLOCK));
      const slotsB = Array.from({ length: 21 }, (_, p) => other[Math.floor(p / BLOCK)]! * BLOCK + (p % BLOCK));
      for (let l = 0; l < variant.spec.numLayers; l++) {
        expect(maxAbsDiff(exec.readSlots(l, "k", slotsA), exec.readSlots(l, "k", slotsB))).toBeLessThan(CACHE_TOL);
        expect(maxAbsDiff(exec.readSlots(l, "v", slotsA), exec.readSlots(l, "v", slotsB))).toBeLessThan(CACHE_TOL);
      }
    });
  });
}

describe("cpu executor: greedy generation", () => {
  it("decodes step by step exactly as recomputing from scratch each time", async () => {
    const spec = tinySpec();
    const weights = randomWeights(spec, 99);
    const exec = await CpuExecutor.create({ spec, weights, numBlocks: 16, blockSize: BLOCK, threads: 1 });
    const prompt = tokens.slice(0, 9);
    const bt = [3, 1, 4, 6, 5, 9];
    const seq = [...prompt];
    let logits = (await exec.run([{ tokenIds: prompt, startPos: 0, blockTable: bt, logits: "last" }])).logits[0]!;
    for (let i = 0; i < 12; i++) {
      const next = argmaxRows(logits, spec.vocabSize)[0]!;
      const ref = referenceForward(spec, weights, seq);
      expect(next).toBe(argmaxRows(ref.subarray((seq.length - 1) * spec.vocabSize), spec.vocabSize)[0]);
      seq.push(next);
      logits = (await exec.run([{ tokenIds: [next], startPos: seq.length - 1, blockTable: bt, logits: "last" }])).logits[0]!;
    }
    await exec.dispose();
  });
});
