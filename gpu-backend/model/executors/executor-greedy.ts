import type { Executor } from "./executor";

/**
 * Greedy decoding straight on an executor (no engine, no sampler): prefills `prompt` into the
 * blocks of `table`, then feeds each argmax back one token per step; returns the `n` tokens.
 * For conformance tests and accuracy benchmarks that compare executors token by token.
 *
 * @example
 * const tokens = await executorGreedy(exec, [1, 2, 3], 16, [0, 1]);
 */
export async function executorGreedy(exec: Executor, prompt: number[], n: number, table: number[]): Promise<number[]> {
  const tokens: number[] = [];
  let next = (await exec.run([{ tokenIds: prompt, startPos: 0, blockTable: table, logits: "argmax" }])).argmax[0]!;
  tokens.push(next);
  for (let i = 1; i < n; i++) {
    next = (await exec.run([{ tokenIds: [next], startPos: prompt.length + i - 1, blockTable: table, logits: "argmax" }])).argmax[0]!;
    tokens.push(next);
  }
  return tokens;
}
