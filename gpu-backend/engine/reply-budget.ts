import { ProtocolError } from "../../protocol/errors";
import type { SamplingParams } from "../../protocol/messages";

/** Sampling parameters with the reply's budget decided: `maxTokens` always set. */
export type BudgetedSampling = SamplingParams & { maxTokens: number };

export interface ReplyBudget {
  sampling: BudgetedSampling;
  /** The cap (`demo-agent`'s N) is what ends the reply: a free-text reply ends with the end-of-turn token there. */
  capped: boolean;
}

/**
 * The number of tokens a reply may generate after a prompt of `promptTokens` in a context of
 * `contextTokens`:
 *
 * - `sampling.maxTokens` absent: what the context leaves (OpenAI's default);
 * - larger than what the context leaves: clamped to it (llama.cpp and Ollama do the same), so a
 *   reply that reaches it finishes with `length`, as for any budget;
 * - `cap` (demo agent mode's N), when given and smaller than both, is the budget, and `capped`
 *   says so.
 *
 * A prompt that leaves no room for one token is refused: `context_length_exceeded`.
 *
 * @example replyBudget({ ...sampling, maxTokens: undefined }, 100, 4096).sampling.maxTokens // 3996
 */
export function replyBudget(sampling: SamplingParams, promptTokens: number, contextTokens: number, cap?: number): ReplyBudget {
  const left = contextTokens - promptTokens;
  if (left < 1) throw new ProtocolError("context_length_exceeded", `the prompt (${promptTokens} tokens) leaves no room for a reply in the model's context of ${contextTokens} tokens`);
  const asked = Math.min(sampling.maxTokens ?? left, left);
  const capped = cap !== undefined && cap < asked;
  return { sampling: { ...sampling, maxTokens: capped ? cap : asked }, capped };
}
