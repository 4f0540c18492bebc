import { join } from "node:path";
import type { LlamaContextSequence, Token } from "node-llama-cpp";
import { openSafetensors, writeSafetensors, type SafetensorsTensorToWrite } from "../../gpu-backend/model/checkpoint/safetensors";

/** One position of a teacher-forced run in llama.cpp. */
export interface LogProbRow {
  /** Log-probability (log-softmax) of a token. */
  logProb(token: number): number;
  /** The 5 most probable tokens, most probable first. */
  top5: number[];
}

/**
 * Replaces the zero biases `materializeModel` writes with seeded N(0, std²) values (BF16), so a
 * comparison exercises the bias tensors (and, for llama, their q/k row permutation). With
 * `normStd`, also adds N(0, normStd²) to every RMSNorm weight (all 1, or 0 for Gemma, as written),
 * so the norms (Gemma's 1 + w, per-head q/k norms) are exercised too.
 *
 * @example
 * randomizeBiases(dir, 7, 0.5);
 */
export function randomizeBiases(dir: string, seed: number, std: number, normStd = 0): void {
  const path = join(dir, "model.safetensors");
  const file = openSafetensors(path);
  const tensors: Record<string, SafetensorsTensorToWrite> = {};
  let state = seed >>> 0 || 1;
  const uniform = () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return ((state >>> 0) + 0.5) / 2 ** 32;
  };
  for (const name of file.tensorNames) {
    const data = file.read(name);
    const normal = () => Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform());
    if (name.endsWith(".bias")) {
      for (let i = 0; i < data.length; i++) data[i] = std * normal();
    } else if (normStd > 0 && name.endsWith("norm.weight")) {
      for (let i = 0; i < data.length; i++) data[i] = data[i]! + normStd * normal();
    }
    tensors[name] = { dtype: "BF16", shape: file.info(name).shape, data };
  }
  writeSafetensors(path, tensors, { format: "pt" });
}

/**
 * Log-softmax of one float32 logits row, in float64. Indexed loops: the same operations in the same
 * order as iterators and `Float64Array.from(row, fn)` (so the same values), ~7x faster on 151k-wide
 * rows (the oracles call it for every teacher-forced position).
 */
export function logSoftmax(row: Float32Array): Float64Array {
  const n = row.length;
  let max = -Infinity;
  for (let i = 0; i < n; i++) if (row[i]! > max) max = row[i]!;
  let sum = 0;
  for (let i = 0; i < n; i++) sum += Math.exp(row[i]! - max);
  const lse = max + Math.log(sum);
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) out[i] = row[i]! - lse;
  return out;
}

/** The ids of the k largest values, largest first. */
export function topK(values: ArrayLike<number>, k: number): number[] {
  const best: number[] = [];
  for (let i = 0; i < values.length; i++) {
    if (best.length === k && values[i]! <= values[best[k - 1]!]!) continue;
    let j = best.length === k ? k - 1 : best.length;
    while (j > 0 && values[best[j - 1]!]! < values[i]!) j--;
    best.splice(j, 0, i);
    if (best.length > k) best.pop();
  }
  return best;
}

/**
 * llama.cpp greedy decoding through node-llama-cpp: `evaluate` at temperature 0 (llama.cpp's
 * greedy sampler: the argmax of the last logits), one sampler for the whole generation.
 */
export async function llamaCppGreedy(sequence: LlamaContextSequence, prompt: number[], steps: number): Promise<number[]> {
  const out: number[] = [];
  for await (const token of sequence.evaluate(prompt as Token[], { temperature: 0 })) {
    out.push(token);
    if (out.length === steps) break;
  }
  return out;
}

/**
 * Log-probabilities from llama.cpp for the next token after each of `tokens[from..]`, in one
 * teacher-forced evaluation. node-llama-cpp returns float32 probabilities over the whole vocabulary,
 * normalized by a float32 running sum of 151,680 terms (off by up to ~5e-4 relative here); the
 * row is renormalized in float64 so that log p is llama.cpp's log-softmax of its logits to float32
 * rounding.
 */
export async function llamaCppLogProbs(sequence: LlamaContextSequence, tokens: number[], from: number, vocabSize: number): Promise<LogProbRow[]> {
  const input = tokens.map((t, i) => (i >= from ? ([t, { generateNext: { probabilities: true } }] as const) : t)) as Parameters<LlamaContextSequence["controlledEvaluate"]>[0];
  const results = await sequence.controlledEvaluate(input);
  const rows: LogProbRow[] = [];
  for (let i = from; i < tokens.length; i++) {
    const probabilities = results[i]?.next.probabilities;
    if (!probabilities || probabilities.size !== vocabSize) throw new Error(`llama.cpp returned ${probabilities?.size ?? 0} probabilities at position ${i}, expected ${vocabSize}`);
    // Kept as one dense row, not the map (a 151k-entry map per position, for every target of a
    // file, was most of the oracle's memory); the same sum, in the map's order, and the same values.
    const dense = new Float64Array(vocabSize);
    const top5: number[] = [];
    let sum = 0;
    for (const [token, p] of probabilities) {
      if (!(token >= 0 && token < vocabSize)) throw new Error(`llama.cpp returned token ${token} at position ${i}, outside the vocabulary of ${vocabSize}`);
      dense[token] = p;
      sum += p;
      // The first 5 keys: the map is in decreasing probability.
      if (top5.length < 5) top5.push(Number(token));
    }
    const logSum = Math.log(sum);
    rows.push({ logProb: (token) => Math.log(dense[token] ?? 0) - logSum, top5 });
  }
  return rows;
}
