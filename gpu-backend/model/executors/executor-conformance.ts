import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DecoderSpec, WeightSource } from "../graph/decoder-spec";
import type { Executor, StepSequence } from "./executor";
import { executorGreedy } from "./executor-greedy";

export { executorGreedy };
import { randomWeights } from "../testing/random-weights";
import { referenceForward } from "../testing/reference-forward";
import { tinySpec } from "../testing/tiny-spec";

/**
 * One conformance suite for every executor: registers vitest tests for an executor factory.
 *
 * Checks, on a tiny random-weight model (default: a Llama of two layers, GQA 4 over 2 heads, vocab
 * 97; logits of magnitude ~1-3; `spec` gives another family's traits):
 *   1. a 40-token prefill (three blocks of 16, scattered block table) against the plain
 *      TypeScript reference forward pass (float64): max |diff| <= `tolerances.reference`, and the
 *      same argmax on every row whose reference top-2 margin exceeds 2 x that tolerance;
 *   2. cached vs computed from scratch: the same prompt with the first `split` tokens taken from
 *      the pool, for several splits (inside a block, on block boundaries): max |diff| <=
 *      `tolerances.cached`, identical argmax;
 *   3. one step batching decode tokens, prefill chunks and a "none" chunk of several sequences;
 *      one step of two prefill chunks after long contexts (the cpu executor's bundles apart);
 *   4. "argmax" and "argmax-all" sequences return no logits and the right argmax (of every row for "argmax-all");
 *   5. greedy generation, `greedyTokens` decode steps after a prompt, equal to greedy decoding of
 *      the reference; a divergence passes only where the reference's top-2 margin at that step is
 *      within 2 x `tolerances.reference` (a near tie that rounding may flip), and is reported;
 *   6. host <-> device bytes per decode step (from `transfer`), reported.
 *
 * @example
 * executorConformance({ name: "cpu", tolerances: { reference: 1e-4, cached: 1e-5 }, greedyTokens: 16,
 *   create: (o) => CpuExecutor.create({ ...o, threads: 1 }) });
 */
export interface ConformanceTarget {
  name: string;
  /** The model (default `tinySpec()`, a Llama); see testing/family-specs.ts for the other families. */
  spec?: DecoderSpec;
  create(options: { spec: DecoderSpec; weights: WeightSource; numBlocks: number; blockSize: number }): Promise<Executor>;
  /**
   * `rowPaths`: a token's logits computed as a decode row (one token) against the same token in a
   * prefill chunk, for an executor that multiplies the two groups by different products (the cpu
   * executor's int4 graphs: MatMulNBits and the integer GEMM); default `cached`. The argmax must
   * then agree only where the chunk's top-2 margin exceeds 2 x `rowPaths`.
   */
  tolerances: { reference: number; cached: number; rowPaths?: number };
  /**
   * The weights the reference forward pass uses, from the executor's (default: the same): a
   * quantized executor is checked against its dequantized weights (`testing/dequantized-weights.ts`).
   */
  referenceWeights?: (spec: DecoderSpec, weights: WeightSource) => WeightSource;
  greedyTokens: number;
  /** Where numbers for the docs go (default console.log). */
  report?: (line: string) => void;
}

export const CONFORMANCE_BLOCK_SIZE = 16;
export const CONFORMANCE_NUM_BLOCKS = 16;
const PROMPT = Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % 97);
const TABLE = [5, 2, 9]; // deliberately not in order: paging must not care
const SPLITS = [1, 7, 16, 17, 32, 39];

export function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  if (a.length !== b.length) throw new Error(`length ${a.length} vs ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i]! - b[i]!);
    if (!(d <= m)) m = Number.isNaN(d) ? Infinity : d;
  }
  return m;
}

/** Per row: argmax and the margin between the top two logits. */
export function topRows(x: Float32Array, V: number): { argmax: number; margin: number }[] {
  const out: { argmax: number; margin: number }[] = [];
  for (let r = 0; r < x.length / V; r++) {
    let best = 0;
    for (let i = 1; i < V; i++) if (x[r * V + i]! > x[r * V + best]!) best = i;
    let second = -Infinity;
    for (let i = 0; i < V; i++) if (i !== best) second = Math.max(second, x[r * V + i]!);
    out.push({ argmax: best, margin: x[r * V + best]! - second });
  }
  return out;
}

/** Rows of `got` have the argmax of `expected`'s rows wherever their top-2 margin exceeds 2 x `tol` (a near tie may flip). */
function expectSameArgmax(got: Float32Array, expected: Float32Array, V: number, tol: number): void {
  const rows = topRows(got, V);
  topRows(expected, V).forEach((r, i) => {
    if (r.margin > 2 * tol) expect(rows[i]!.argmax, `row ${i}`).toBe(r.argmax);
  });
}

/** Greedy decoding with the reference forward pass (recomputed from scratch each step). */
export function referenceGreedy(spec: DecoderSpec, weights: WeightSource, prompt: number[], n: number) {
  const seq = [...prompt];
  const steps: { token: number; margin: number }[] = [];
  for (let i = 0; i < n; i++) {
    const ref = referenceForward(spec, weights, seq);
    const top = topRows(ref.subarray((seq.length - 1) * spec.vocabSize), spec.vocabSize)[0]!;
    steps.push({ token: top.argmax, margin: top.margin });
    seq.push(top.argmax);
  }
  return steps;
}

export function executorConformance(target: ConformanceTarget): void {
  const report = target.report ?? ((line: string) => console.log(line));
  const spec = target.spec ?? tinySpec();
  const V = spec.vocabSize;
  const { reference: REF_TOL, cached: CACHE_TOL } = target.tolerances;
  const PATH_TOL = target.tolerances.rowPaths ?? CACHE_TOL;

  describe(`executor conformance: ${target.name}`, () => {
    const weights = randomWeights(spec, 1234);
    const refWeights = target.referenceWeights?.(spec, weights) ?? weights;
    const ref = referenceForward(spec, refWeights, PROMPT);
    let exec: Executor;
    let full: Float32Array;

    beforeAll(async () => {
      let t = performance.now();
      exec = await target.create({ spec, weights, numBlocks: CONFORMANCE_NUM_BLOCKS, blockSize: CONFORMANCE_BLOCK_SIZE });
      const createMs = performance.now() - t;
      t = performance.now();
      full = (await exec.run([{ tokenIds: PROMPT, startPos: 0, blockTable: TABLE, logits: "all" }])).logits[0]!;
      report(`[${target.name}] create ${createMs.toFixed(0)} ms, first 40-token prefill ${(performance.now() - t).toFixed(0)} ms`);
    });
    afterAll(() => exec?.dispose());

    it(`matches the TypeScript reference forward pass (max |diff| <= ${REF_TOL})`, () => {
      const diff = maxAbsDiff(full, ref);
      report(`[${target.name}] prefill logits vs reference: max |diff| ${diff.toExponential(2)} (tolerance ${REF_TOL})`);
      expect(diff).toBeLessThanOrEqual(REF_TOL);
      expectSameArgmax(full, ref, V, REF_TOL);
    });

    for (const split of SPLITS) {
      // The last split leaves one token: a decode row, against the chunk's row.
      const tol = split === PROMPT.length - 1 ? PATH_TOL : CACHE_TOL;
      it(`gives the same logits with the first ${split} tokens cached (max |diff| <= ${tol})`, async () => {
        const { logits } = await exec.run([{ tokenIds: PROMPT.slice(split), startPos: split, blockTable: TABLE, logits: "all" }]);
        const expected = full.subarray(split * V);
        const diff = maxAbsDiff(logits[0]!, expected);
        report(`[${target.name}] ${split} tokens cached: max |diff| vs uncached ${diff.toExponential(2)} (tolerance ${tol})`);
        expect(diff).toBeLessThanOrEqual(tol);
        expectSameArgmax(logits[0]!, expected, V, tol);
      });
    }

    it("batches decode tokens and prefill chunks of several sequences in one step", async () => {
      const { logits, argmax } = await exec.run([
        { tokenIds: [PROMPT[35]!], startPos: 35, blockTable: TABLE, logits: "last" },
        { tokenIds: PROMPT.slice(6, 20), startPos: 6, blockTable: TABLE, logits: "all" },
        { tokenIds: [PROMPT[2]!], startPos: 2, blockTable: TABLE, logits: "last" },
        { tokenIds: PROMPT.slice(12, 15), startPos: 12, blockTable: TABLE, logits: "none" },
        { tokenIds: PROMPT.slice(30, 33), startPos: 30, blockTable: TABLE, logits: "argmax" },
      ]);
      // Sequences 0 and 2 are decode rows, 1 and 4 prefill chunks.
      expect(maxAbsDiff(logits[0]!, full.subarray(35 * V, 36 * V))).toBeLessThanOrEqual(PATH_TOL);
      expect(maxAbsDiff(logits[1]!, full.subarray(6 * V, 20 * V))).toBeLessThanOrEqual(CACHE_TOL);
      expect(maxAbsDiff(logits[2]!, full.subarray(2 * V, 3 * V))).toBeLessThanOrEqual(PATH_TOL);
      expect(logits[3]!.length).toBe(0);
      expect(logits[4]!.length).toBe(0);
      const fullTop = topRows(full, V);
      expect([argmax[1], argmax[3], argmax[4]]).toEqual([fullTop[19]!.argmax, -1, fullTop[32]!.argmax]);
      expectSameArgmax(logits[0]!, full.subarray(35 * V, 36 * V), V, PATH_TOL);
      expectSameArgmax(logits[2]!, full.subarray(2 * V, 3 * V), V, PATH_TOL);
    });

    it("attends prefill chunks of two sequences after long contexts as each alone", async () => {
      // Each chunk against its own context scores fewer keys than both against both (the cpu
      // executor then pads them into two bundles: cpu-prefill-feeds.ts). The prompt is prefilled
      // again first: the step above wrote decode rows' KV (another product at int4) into the pool.
      await exec.run([{ tokenIds: PROMPT, startPos: 0, blockTable: TABLE, logits: "none" }]);
      const { logits } = await exec.run([
        { tokenIds: PROMPT.slice(30, 34), startPos: 30, blockTable: TABLE, logits: "all" },
        { tokenIds: PROMPT.slice(20, 23), startPos: 20, blockTable: TABLE, logits: "all" },
      ]);
      expect(maxAbsDiff(logits[0]!, full.subarray(30 * V, 34 * V))).toBeLessThanOrEqual(CACHE_TOL);
      expect(maxAbsDiff(logits[1]!, full.subarray(20 * V, 23 * V))).toBeLessThanOrEqual(CACHE_TOL);
    });

    it("returns the argmax of the last row without fetching logits", async () => {
      const before = exec.transfer.deviceToHostBytes - exec.transfer.kvDeviceToHostBytes;
      const { logits, argmax } = await exec.run([
        { tokenIds: [PROMPT[20]!], startPos: 20, blockTable: TABLE, logits: "argmax" },
        { tokenIds: PROMPT.slice(6, 10), startPos: 6, blockTable: TABLE, logits: "argmax" },
      ]);
      expect(logits.map((l) => l.length)).toEqual([0, 0]);
      const fullTop = topRows(full, V);
      expect(argmax).toEqual([fullTop[20]!.argmax, fullTop[9]!.argmax]);
      // Whatever else crosses the bus (new K/V rows for a host-resident pool), it is not a logits row.
      expect(exec.transfer.deviceToHostBytes - exec.transfer.kvDeviceToHostBytes - before).toBeLessThan(V * 4);
    });

    it('returns every row\'s argmax for "argmax-all" (a greedy verify run) without fetching logits', async () => {
      // The same step fetching its rows ("all") is the reference: a verify run's rows may take another
      // path than the prefill above (int8/int4: MatMulNBits, not the integer GEMM), so near ties may differ from it.
      const step = (mode: "all" | "argmax-all"): StepSequence[] => [
        { tokenIds: [PROMPT[20]!], startPos: 20, blockTable: TABLE, logits: "argmax" },
        { tokenIds: PROMPT.slice(30, 34), startPos: 30, blockTable: TABLE, logits: mode, verify: true },
      ];
      const withRows = await exec.run(step("all"));
      const rowTop = topRows(withRows.logits[1]!, V).map((r) => r.argmax);
      expect(Array.from(withRows.argmaxRows[1]!)).toEqual(rowTop);
      const before = exec.transfer.deviceToHostBytes - exec.transfer.kvDeviceToHostBytes;
      const { logits, argmax, argmaxRows } = await exec.run(step("argmax-all"));
      expect(logits.map((l) => l.length)).toEqual([0, 0]);
      expect(argmaxRows.map((rows) => Array.from(rows))).toEqual([[withRows.argmax[0]!], rowTop]);
      expect(argmax).toEqual([withRows.argmax[0]!, rowTop[3]!]);
      expect(exec.transfer.deviceToHostBytes - exec.transfer.kvDeviceToHostBytes - before).toBeLessThan(V * 4);
    });

    it(`generates ${target.greedyTokens} greedy tokens as the reference does`, async () => {
      const prompt = PROMPT.slice(0, 9);
      const expected = referenceGreedy(spec, refWeights, prompt, target.greedyTokens);
      const table = [3, 1]; // 9 + greedyTokens <= 32 positions
      const t = performance.now();
      const got = await executorGreedy(exec, prompt, target.greedyTokens, table);
      const ms = (performance.now() - t) / target.greedyTokens;
      const first = got.findIndex((tok, i) => tok !== expected[i]!.token);
      if (first < 0) {
        report(`[${target.name}] greedy: ${got.length}/${got.length} tokens equal to the reference (${ms.toFixed(1)} ms/step incl. prefill)`);
        return;
      }
      const margin = expected[first]!.margin;
      report(
        `[${target.name}] greedy: first divergence at token ${first} (reference ${expected[first]!.token}, got ${got[first]}), ` +
          `reference top-2 margin ${margin.toExponential(2)}`,
      );
      expect(margin, `divergence at token ${first} with a top-2 margin beyond 2 x tolerance`).toBeLessThanOrEqual(2 * REF_TOL);
    });

    it("reports host <-> device bytes per decode step", async () => {
      const h2d = exec.transfer.hostToDeviceBytes;
      const d2h = exec.transfer.deviceToHostBytes;
      await exec.run([{ tokenIds: [PROMPT[39]!], startPos: 39, blockTable: TABLE, logits: "argmax" }]);
      const up = exec.transfer.hostToDeviceBytes - h2d;
      const down = exec.transfer.deviceToHostBytes - d2h;
      report(
        `[${target.name}] one decode step (1 sequence at position 39, argmax only): host->device ${up} B, device->host ${down} B; ` +
          `pool ${exec.kvBytes} B`,
      );
      expect(up).toBeGreaterThan(0);
      expect(down).toBeGreaterThan(0);
    });
  });
}

/**
 * Registers one test: greedy decoding on the executor `create` builds gives the cpu executor's
 * `tokens` tokens for three prompts (tiny model, the same random weights on both).
 *
 * @example greedyMatchesCpu((o) => DevicePoolExecutor.create(o));
 */
export function greedyMatchesCpu(create: ConformanceTarget["create"], tokens = 16): void {
  it(`greedy decoding gives the cpu executor's ${tokens} tokens for several prompts`, async () => {
    const spec = tinySpec();
    const o = { spec, weights: randomWeights(spec, 7), numBlocks: 8, blockSize: CONFORMANCE_BLOCK_SIZE };
    const { CpuExecutor } = await import("./cpu-executor");
    const cpu = await CpuExecutor.create({ ...o, threads: 1 });
    const gpu = await create(o);
    try {
      for (const [k, prompt] of [[1, 5, 9], [42, 17, 3, 88, 60, 2, 71, 19, 33, 50, 11], [96]].entries()) {
        const table = [2 * k, 2 * k + 1];
        expect(await executorGreedy(gpu, prompt, tokens, table)).toEqual(await executorGreedy(cpu, prompt, tokens, table));
      }
    } finally {
      await Promise.all([cpu.dispose(), gpu.dispose()]);
    }
  });
}
