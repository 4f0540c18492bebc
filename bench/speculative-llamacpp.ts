import { availableParallelism } from "node:os";
import { getLlama, InputLookupTokenPredictor, LlamaLogLevel, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";
import { Progress } from "./kit/progress";
import type { RunRecord, Setting, TurnCheck } from "./speculative-report";
import { copiedFraction, type TokenTurn } from "./speculative-workload";

/** llama.cpp's lookup: node-llama-cpp's InputLookupTokenPredictor at its defaults (patterns of >= 1 token, drafts of 1 to 3). */
const LOOKUP = { patternLength: { min: 1 }, predictionLength: { min: 1, max: 3 } } as const;

export interface LlamaCppSpeculationOptions {
  ggufPath: string;
  /** CPU threads (default every core, as ours). */
  threads?: number;
  turns: readonly TokenTurn[];
  batches: readonly number[];
  reps: number;
  log: (line: string) => void;
}

/**
 * llama.cpp's half of the speculative bench, on the GGUF our engine loaded, through node-llama-cpp
 * 3.21.1's prebuilt CPU build (`gpu: false`, `build: "never"`): the same token prompts, greedy
 * (temperature 0), the reply ending at an end-of-generation token or at the kind's `maxTokens`.
 * "on" is prompt lookup as llama.cpp is offered it from Node: a sequence whose `tokenPredictor` is
 * node-llama-cpp's `InputLookupTokenPredictor` (the last generated tokens looked up in the prompt,
 * the tokens after the match drafted, verified by llama.cpp in one batched llama_decode; the
 * predictor runs in JavaScript, llama.cpp verifies). llama.cpp's C++ `lookup` example (its n-gram
 * cache) is not reachable through node-llama-cpp.
 *
 * Per batch size, one context of 2 x batch sequences (n_batch 512, flash attention off, F16 KV):
 * half plain, half with a predictor each; a run uses one half. Between runs of a kind each sequence
 * keeps its prompt's KV and erases the reply (llamacpp-turns.ts's `runTurn` way), so a run decodes
 * from its first token; the first pass of each kind (prefill) is not measured. Drafted and accepted
 * come from `sequence.tokenPredictions` (validated + refuted, validated).
 *
 * @example
 * const r = await runLlamaCppSpeculation({ ggufPath, turns, batches: [1, 8], reps: 3, log });
 */
export async function runLlamaCppSpeculation(o: LlamaCppSpeculationOptions): Promise<{ runs: RunRecord[]; checks: TurnCheck[]; setup: string }> {
  const threads = o.threads ?? availableParallelism();
  const llama = await getLlama({ gpu: false, build: "never", maxThreads: threads, logLevel: LlamaLogLevel.error, logger: () => {} });
  try {
    const model = await llama.loadModel({ modelPath: o.ggufPath, gpuLayers: 0 });
    try {
      const runs: RunRecord[] = [];
      const checks: TurnCheck[] = [];
      const progress = new Progress("speculative llama.cpp", o.batches.length * o.turns.length * o.reps * 2);
      for (const batch of o.batches) {
        const contextSize = Math.max(...o.turns.flatMap((t) => t.prompts.slice(0, batch).map((p) => p.length + t.maxTokens))) + 16;
        const context = await model.createContext({ contextSize, sequences: 2 * batch, batchSize: 512, flashAttention: false, threads: { ideal: threads, min: threads } });
        try {
          const plain = Array.from({ length: batch }, () => context.getSequence());
          const lookup = Array.from({ length: batch }, () => context.getSequence({ tokenPredictor: new InputLookupTokenPredictor(LOOKUP) }));
          for (const turn of o.turns) {
            const prompts = turn.prompts.slice(0, batch);
            // Prefill pass (unmeasured): every sequence holds its prompt afterwards.
            for (const seqs of [plain, lookup]) await Promise.all(prompts.map((p, i) => generate(model, seqs[i]!, p, 1, performance.now())));
            for (let rep = 0; rep < o.reps; rep++) {
              for (const setting of (rep % 2 === 0 ? ["off", "on"] : ["on", "off"]) as Setting[]) {
                const seqs = setting === "on" ? lookup : plain;
                const before = seqs.map((s) => ({ ...s.tokenPredictions }));
                const t0 = performance.now();
                const outs = await Promise.all(prompts.map((p, i) => generate(model, seqs[i]!, p, turn.maxTokens, t0)));
                const first = Math.min(...outs.map((x) => x.times[0]!));
                const last = Math.max(...outs.map((x) => x.times.at(-1)!));
                const validated = seqs.reduce((a, s, i) => a + s.tokenPredictions.validated - before[i]!.validated, 0);
                const refuted = seqs.reduce((a, s, i) => a + s.tokenPredictions.refuted - before[i]!.refuted, 0);
                const record: RunRecord = {
                  side: "llamacpp",
                  kind: turn.kind,
                  class: turn.class,
                  batch,
                  setting,
                  rep,
                  decodeTokens: outs.reduce((a, x) => a + x.tokens.length - 1, 0),
                  decodeMs: last - first,
                  drafted: validated + refuted,
                  accepted: validated,
                  outputs: outs.map((x) => x.tokens),
                };
                runs.push(record);
                if (rep === 0 && setting === "off") checks.push({ side: "llamacpp", kind: turn.kind, class: turn.class, batch, copied: outs.map((x, i) => copiedFraction(prompts[i]!, x.tokens)), tokens: outs.map((x) => x.tokens.length) });
                progress.tick(`batch ${batch} ${turn.kind} ${setting} ${((record.decodeTokens / record.decodeMs) * 1000).toFixed(1)} tok/s`);
              }
            }
          }
        } finally {
          await context.dispose();
        }
      }
      const setup = `llama.cpp ${llama.llamaCppRelease.release} via node-llama-cpp (prebuilt CPU build, gpu: false), ${model.typeDescription}, ${threads} threads, n_batch 512, flash attention off, F16 KV; on: InputLookupTokenPredictor (patterns >= 1 token, drafts of 1-3 tokens)`;
      return { runs, checks, setup };
    } finally {
      await model.dispose();
    }
  } finally {
    await llama.dispose();
  }
}

/**
 * One reply on a sequence holding an earlier one: keeps the prompt's KV (all but its last token,
 * whose logits the first generated token needs), erases the rest, tells the predictor the prompt,
 * and generates greedily until an end-of-generation token (kept) or `maxTokens`. Times in ms since `t0`.
 */
async function generate(model: LlamaModel, sequence: LlamaContextSequence, prompt: readonly number[], maxTokens: number, t0: number): Promise<{ tokens: number[]; times: number[] }> {
  const keep = Math.min(sequence.compareContextTokens(prompt as Token[]).firstDifferentIndex, prompt.length - 1);
  if (keep < sequence.nextTokenIndex) await sequence.eraseContextTokenRanges([{ start: keep, end: sequence.nextTokenIndex }]);
  sequence.tokenPredictor?.updateInputTokens?.(prompt as Token[]);
  const tokens: number[] = [];
  const times: number[] = [];
  for await (const token of sequence.evaluate(prompt.slice(keep) as Token[], { temperature: 0, yieldEogToken: true })) {
    tokens.push(token);
    times.push(performance.now() - t0);
    if (tokens.length >= maxTokens || model.isEogToken(token)) break;
  }
  return { tokens, times };
}
