import type { ChatMessage } from "../../protocol/messages";
import type { ChatCodec } from "../../gpu-backend/engine/chat-codec";
import type { DecoderSpec, WeightSource } from "../../gpu-backend/model/graph/decoder-spec";
import { CpuExecutor } from "../../gpu-backend/model/executors/cpu-executor";
import { executorGreedy } from "../../gpu-backend/model/executors/executor-greedy";
import type { QuantBits } from "../../gpu-backend/model/quant/block-quant";
import { QuantizedWeights } from "../../gpu-backend/model/quant/quantized-weights";
import { makeWorkload } from "../kit/workload";

/**
 * How far int8/int4 weights move a model from its float32 self:
 *   - mean KL(p_fp32 || p_quantized) of the next-token distribution over a fixed agent-text corpus
 *     (teacher-forced: both read the same tokens), in nats, with its maximum;
 *   - greedy agreement: 4 prompts, 128 greedy tokens each from both; the fraction of tokens
 *     produced before the first divergence (1 = identical outputs).
 * On seeded random weights the figures measure the arithmetic, not a trained model's sensitivity:
 * the closer the distributions are to flat, the smaller any KL (docs/quantization.md).
 *
 * @example
 * const corpus = accuracyCorpus(codec, 2000);
 * const figures = await precisionAccuracy({ spec, weights, bits: 4, corpus, prompts: accuracyPrompts(codec) });
 */
export interface AccuracyFigures {
  bits: QuantBits;
  corpusTokens: number;
  meanKl: number;
  maxKl: number;
  /** Mean over prompts of (tokens before the first divergence) / greedyTokens. */
  greedyAgreement: number;
  greedyTokens: number;
  prompts: number;
}

/** `tokens` tokens of rendered agent transcript (system prompt, tools, observations, replies). */
export function accuracyCorpus(codec: ChatCodec, tokens = 2000): number[] {
  const [trajectory] = makeWorkload({ trajectories: 1, turns: 12, systemTokens: 900, observationTokens: [100, 200], replyTokens: [16, 32], seed: 11, countTokens: (t) => codec.encode(t).length });
  // Before each tool observation, the assistant's call that asked for it (templates such as
  // Gemma 3's refuse a tool result that answers no call).
  const tool = trajectory!.tools[0]!.function.name;
  const messages: ChatMessage[] = trajectory!.turns.flatMap((t) =>
    t.newMessages.flatMap((m): ChatMessage[] =>
      m.role === "tool" ? [{ role: "assistant", content: "", tool_calls: [{ id: m.tool_call_id!, type: "function", function: { name: tool, arguments: "{}" } }] }, m] : [m],
    ),
  );
  const ids = codec.encode(codec.render({ messages, tools: trajectory!.tools, addGenerationPrompt: false }));
  if (ids.length < tokens) throw new Error(`accuracy corpus: only ${ids.length} tokens rendered, ${tokens} asked`);
  return ids.slice(0, tokens);
}

/** Four prompts: a user task under four different short system prompts, each with the generation prompt. */
export function accuracyPrompts(codec: ChatCodec): number[][] {
  const systems = ["You are a coding agent.", "You fix failing tests.", "You answer with tool calls.", "You summarize server logs."];
  return systems.map((system, i) =>
    codec.encode(codec.render({ messages: [{ role: "system", content: system }, { role: "user", content: `Task ${i + 1}: read the config file and report the cache block size.` }], addGenerationPrompt: true })),
  );
}

export async function precisionAccuracy(o: {
  spec: DecoderSpec;
  weights: WeightSource;
  bits: QuantBits;
  corpus: number[];
  prompts: number[][];
  greedyTokens?: number;
  threads?: number;
  /** The quantized executor's prefill rows on the integer GEMM (CpuExecutor's default) or on MatMulNBits. */
  integerPrefill?: boolean;
  onProgress?: (line: string) => void;
}): Promise<AccuracyFigures> {
  const greedyTokens = o.greedyTokens ?? 128;
  const longest = Math.max(o.corpus.length, ...o.prompts.map((p) => p.length + greedyTokens));
  const blockSize = 16;
  const numBlocks = Math.ceil(longest / blockSize) + 1;
  const table = Array.from({ length: numBlocks }, (_, i) => i);
  const make = (quantized: QuantizedWeights | null) => CpuExecutor.create({ spec: o.spec, weights: o.weights, quantized, integerPrefill: o.integerPrefill, numBlocks, blockSize, threads: o.threads });
  const fp32 = await make(null);
  const quant = await make(QuantizedWeights.open(o.bits));
  try {
    o.onProgress?.(`int${o.bits}: KL over ${o.corpus.length} corpus tokens`);
    const V = o.spec.vocabSize;
    let klSum = 0;
    let klMax = 0;
    const chunk = Math.max(16, Math.floor((64 << 20) / (4 * V)));
    for (let start = 0; start < o.corpus.length; start += chunk) {
      const step = { tokenIds: o.corpus.slice(start, start + chunk), startPos: start, blockTable: table, logits: "all" as const };
      const [a, b] = [(await fp32.run([step])).logits[0]!, (await quant.run([step])).logits[0]!];
      for (let r = 0; r < step.tokenIds.length; r++) {
        const kl = klDivergence(a.subarray(r * V, (r + 1) * V), b.subarray(r * V, (r + 1) * V));
        klSum += kl;
        klMax = Math.max(klMax, kl);
      }
    }
    o.onProgress?.(`int${o.bits}: greedy agreement, ${o.prompts.length} prompts x ${greedyTokens} tokens`);
    let agreement = 0;
    for (const prompt of o.prompts) {
      const [a, b] = [await executorGreedy(fp32, prompt, greedyTokens, table), await executorGreedy(quant, prompt, greedyTokens, table)];
      const first = a.findIndex((t, i) => t !== b[i]);
      agreement += (first < 0 ? greedyTokens : first) / greedyTokens;
    }
    return { bits: o.bits, corpusTokens: o.corpus.length, meanKl: klSum / o.corpus.length, maxKl: klMax, greedyAgreement: agreement / o.prompts.length, greedyTokens, prompts: o.prompts.length };
  } finally {
    await fp32.dispose();
    await quant.dispose();
  }
}

/**
 * KL(p || q) in nats for two logit rows, in three passes without allocating (the rows are a whole
 * vocabulary: 262,144 values for Gemma 3, 2,000 rows per precision):
 * KL = Σ softmax(p)_i · ((p_i - lse(p)) - (q_i - lse(q))).
 */
export function klDivergence(p: Float32Array, q: Float32Array): number {
  const lp = logSumExp(p);
  const lq = logSumExp(q);
  const shift = lq - lp;
  let kl = 0;
  for (let i = 0; i < p.length; i++) {
    const a = p[i]! - lp;
    kl += Math.exp(a) * (p[i]! - q[i]! + shift);
  }
  return Math.max(0, kl);
}

function logSumExp(x: Float32Array): number {
  let max = -Infinity;
  for (let i = 0; i < x.length; i++) if (x[i]! > max) max = x[i]!;
  let sum = 0;
  for (let i = 0; i < x.length; i++) sum += Math.exp(x[i]! - max);
  return max + Math.log(sum);
}
