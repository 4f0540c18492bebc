import { describe, expect, it } from "vitest";
import { CpuExecutor } from "./cpu-executor";
import type { StepSequence } from "./executor";
import { randomWeights } from "../testing/random-weights";
import { familySpecs } from "../testing/family-specs";
import { QuantizedWeights } from "../quant/quantized-weights";
import { tinySpec } from "../testing/tiny-spec";

/**
 * Speculative decoding's exactness on the cpu executor (issue 37): a verify run's rows (the last
 * token and a draft, `verify: true`) give the logits of the same tokens decoded one by one, bit for
 * bit, alone or beside other sequences (longer contexts, another draft, a prefill chunk). Int8
 * weights are where a difference showed (MatMulNBits quantizes activations per block, so a 1e-7
 * difference in attention became other quantization steps); sliding-window layers (gemma3's window
 * of 8, phi3's of 24) past their window, where each row's visible past starts elsewhere; one query
 * head per KV head (Phi-3-mini's shape), where MLAS's one-row products sum differently by width.
 */
const BLOCK = 4;
const specs = familySpecs();
const cases = [
  { name: "llama fp32", spec: tinySpec(), bits: null },
  { name: "llama int8", spec: tinySpec(), bits: 8 },
  { name: "llama int8, no GQA (one query head per KV head)", spec: tinySpec({ numKvHeads: 4 }), bits: 8 },
  { name: "qwen3 int4", spec: specs.qwen3, bits: 4 },
  { name: "gemma3 int8 (sliding window 8)", spec: specs.gemma3, bits: 8 },
  { name: "phi3 fp32 (sliding window 24)", spec: specs.phi3, bits: null },
  { name: "phi3 fp32, no GQA (sliding window 24)", spec: { ...specs.phi3, numKvHeads: 4 }, bits: null },
] as const;

const blocks = (first: number, n: number) => Array.from({ length: n }, (_, i) => first + i);

describe("cpu executor: verify runs are attended like decode steps", () => {
  for (const c of cases) {
    it(`${c.name}: each verify row equals the token decoded alone, bit for bit, alone and batched`, async () => {
      const V = c.spec.vocabSize;
      const exec = await CpuExecutor.create({
        spec: c.spec,
        weights: randomWeights(c.spec, 11),
        numBlocks: 48,
        blockSize: BLOCK,
        threads: 1,
        quantized: c.bits === null ? null : QuantizedWeights.open(c.bits),
      });
      try {
        const prompt = Array.from({ length: 30 }, (_, i) => (i * 29 + 3) % V);
        const table = blocks(0, 10);
        await exec.run([{ tokenIds: prompt.slice(0, -1), startPos: 0, blockTable: table, logits: "none" }]);
        // Six tokens decoded one by one: the reference rows.
        const decoded: Float32Array[] = [];
        const tokens = [prompt.at(-1)!];
        for (let i = 0; i < 6; i++) {
          const r = await exec.run([{ tokenIds: [tokens[i]!], startPos: prompt.length - 1 + i, blockTable: table, logits: "last" }]);
          decoded.push(r.logits[0]!.slice());
          tokens.push(r.argmax[0]!);
        }
        const verify: StepSequence = { tokenIds: tokens.slice(0, 6), startPos: prompt.length - 1, blockTable: table, logits: "all", verify: true };
        const rowsOf = (all: Float32Array) => decoded.map((_, i) => Array.from(all.subarray(i * V, (i + 1) * V)));
        const alone = await exec.run([verify]);
        expect(rowsOf(alone.logits[0]!)).toEqual(decoded.map((d) => Array.from(d)));

        // Beside a longer context decoding one token, another sequence verifying a 3-token draft
        // and a prefill chunk (their pool contents do not matter to the rows compared).
        const batched = await exec.run([
          { tokenIds: [5], startPos: 41, blockTable: blocks(10, 11), logits: "last" },
          verify,
          { tokenIds: [7, 8, 9, 10], startPos: 37, blockTable: blocks(21, 11), logits: "all", verify: true },
          { tokenIds: [1, 2, 3, 4, 5], startPos: 12, blockTable: blocks(32, 5), logits: "last" },
        ]);
        expect(rowsOf(batched.logits[1]!)).toEqual(decoded.map((d) => Array.from(d)));
        expect(batched.argmax[1]).toBe(tokens[6]);
      } finally {
        await exec.dispose();
      }
    });
  }
});
