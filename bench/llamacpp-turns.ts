import type { LlamaContextSequence, Token } from "node-llama-cpp";

/**
 * Generation on a node-llama-cpp sequence as the llama.cpp bench runs it: greedy (llama.cpp's
 * greedy sampler, temperature 0), EOS ignored, exactly the asked number of tokens.
 */

/**
 * Evaluates `tokens` after what the sequence holds and generates `count` tokens greedily, EOS
 * ignored; returns when each token arrived, in ms since `t0`. The last token is sampled, not
 * evaluated (the sequence then holds `tokens` and the first count - 1 generated tokens).
 *
 * @example
 * const times = await generateGreedy(sequence, prompt, 32, performance.now());
 * const decodeTokensPerS = (times.length - 1) / (times[31] - times[0]) * 1000;
 */
export async function generateGreedy(sequence: LlamaContextSequence, tokens: readonly number[], count: number, t0: number): Promise<number[]> {
  const times: number[] = [];
  if (count <= 0) return times;
  for await (const _token of sequence.evaluate(tokens as Token[], { temperature: 0, yieldEogToken: true })) {
    times.push(performance.now() - t0);
    if (times.length === count) break;
  }
  if (times.length !== count) throw new Error(`llama.cpp generated ${times.length} of ${count} tokens`);
  return times;
}

/**
 * One agent turn on a sequence that holds an earlier turn: keeps the KV of the longest common
 * prefix of what the sequence holds and `prompt` (at most all but its last token, which must be
 * evaluated for the next token's logits), erases the rest (the previous turn's discarded
 * generated tokens), evaluates only the new suffix and generates `generate` tokens.
 *
 * @example
 * for (const prompt of trajectory.prompts) await runTurn(sequence, prompt, 16);
 */
export async function runTurn(sequence: LlamaContextSequence, prompt: readonly number[], generate: number): Promise<{ ttftMs: number; evaluatedPromptTokens: number }> {
  const t0 = performance.now();
  const keep = Math.min(sequence.compareContextTokens(prompt as Token[]).firstDifferentIndex, prompt.length - 1);
  if (keep < sequence.nextTokenIndex) await sequence.eraseContextTokenRanges([{ start: keep, end: sequence.nextTokenIndex }]);
  const times = await generateGreedy(sequence, prompt.slice(keep), generate, t0);
  return { ttftMs: times[0]!, evaluatedPromptTokens: prompt.length - keep };
}
