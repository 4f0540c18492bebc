import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, LlamaLogLevel, readGgufFileInfo, type Llama, type LlamaContext, type LlamaModel, type Token } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decoderSpecOf } from "../../gpu-backend/model/checkpoint/decoder-spec-of";
import { loadCheckpoint, type Checkpoint } from "../../gpu-backend/model/checkpoint/checkpoint";
import { tinyFamilyConfig, type TokenizerIds } from "../../gpu-backend/model/checkpoint/demo-families";
import { materializeModel, tinyDemoConfig } from "../../gpu-backend/model/checkpoint/demo-model";
import { writeFamilyTokenizer, type TokenizerFamily } from "../../gpu-backend/model/checkpoint/family-tokenizers";
import type { ModelConfig } from "../../gpu-backend/model/config/model-config";
import { CpuExecutor } from "../../gpu-backend/model/executors/cpu-executor";
import { executorGreedy } from "../../gpu-backend/model/executors/executor-conformance";
import { exportGguf } from "../../gpu-backend/model/export/gguf-export";
import { GGUF_TOKEN_TYPES, ggufTokenizerMetadata } from "../../gpu-backend/model/gguf/gguf-vocab";
import { AGENT_TEXTS, KNOWN_TOKENIZER_DIFFERENCES, RETYPED_AT_LOAD, renderedPrompts } from "./agent-text-corpus";
import { llamaCppGreedy, llamaCppLogProbs, logSoftmax, randomizeBiases, topK, type LogProbRow } from "./oracle-support";

/**
 * llama.cpp as an independent oracle: a tiny seeded checkpoint is exported to GGUF (F32) with our
 * own converter and run by llama.cpp (node-llama-cpp's prebuilt CPU binary, never built or
 * downloaded), against our CPU executor on the same weights:
 *   a. tokenization of agent text (llama.cpp's tokenizer from the GGUF vs our tokenizer.json);
 *   b. greedy tokens for STEPS steps after a chat prompt;
 *   c. teacher-forced on our greedy tokens: top-5 log-probabilities at every position.
 *
 * Tolerance TOL = 1e-3 on log-probabilities. Both engines compute in float32 (llama.cpp with an
 * F32 KV cache and flash attention off: its CPU flash-attention path moved log-probs by up to
 * ~5e-2 here), with different accumulation orders, kernels and rotary tables (llama.cpp iterates
 * powers of the base in float32 and divides by rope_freqs; we take transformers' float32 inv_freq).
 * Measured differences are 1e-5 to 2e-4 (printed below); 1e-3 leaves 10x room for the other SIMD
 * variants llama.cpp picks per CPU. A broken conversion is far outside it: without the k row
 * permutation the max difference is ~29 and no greedy token matches; without rope_freqs it is ~1.5
 * and greedy decoding diverges at step 6.
 *
 * Weights ~N(0, WEIGHT_STD²) with WEIGHT_STD = 0.5: at the default 0.02 the tiny model's logits
 * have magnitude ~0.2 and its greedy output is one token repeated, a comparison that proves little.
 * Gemma 3 gets GEMMA_TOL = 3e-3: llama.cpp's CPU GeGLU rounds the gate to float16 and reads GELU
 * from a float16 table (ggml-cpu vec.h, GGML_GELU_FP16), a relative error of ~1e-3 per activation
 * (measured 8.1e-4 on the log-probs, against 1e-5 to 2e-4 for the SwiGLU families).
 *
 * The greedy path's top-1/top-2 margins are asserted to be at least 10 x the tolerance, so every
 * greedy step and top-5 set is decided by more than rounding; the seeds were picked for that.
 */
const TOL = 1e-3;
const GEMMA_TOL = 3e-3;
const STEPS = 32;
const WEIGHT_STD = 0.5;
const report = (line: string) => console.log(`[llama.cpp oracle] ${line}`);

/** llama.cpp's n_ctx, and the context our engine serves (LongRoPE picks its factors by it in both). */
const CONTEXT = 256;

interface OracleTarget {
  /** The GGUF architecture, also the target's label in the figures. */
  arch: string;
  name: string;
  config: ModelConfig;
  seed: number;
  tokenizer: TokenizerFamily;
  /** tokenizer_config.json's eos_token, which the export writes as tokenizer.ggml.eos_token_id. */
  eosText: string;
  /** Tolerance on log-probabilities (default TOL). */
  tol?: number;
  /** Std of the noise added to the RMSNorm weights (0: left at 1, as the first two targets were tuned). */
  normStd?: number;
}

const tokenizerDirs = new Map<TokenizerFamily, string>();
const QWEN3_IDS: TokenizerIds = { vocabSize: tinyDemoConfig().vocabSize, bosTokenId: tinyDemoConfig().bosTokenIds[0]!, eosTokenIds: tinyDemoConfig().eosTokenIds };

const TARGETS: OracleTarget[] = [
  {
    arch: "llama",
    name: "llama (Llama 3 rope scaling -> rope_freqs, tied embeddings, GQA 4/2, q/k/v biases permuted)",
    config: { ...tinyDemoConfig(), attentionBias: true },
    seed: 3,
    tokenizer: "qwen3",
    eosText: "<|im_end|>",
  },
  {
    arch: "qwen2",
    name: "qwen2 (NEOX rope, linear rope scaling, untied lm_head, q/k/v biases)",
    config: {
      ...tinyDemoConfig(),
      modelType: "qwen2",
      attentionBias: true,
      tieWordEmbeddings: false,
      ropeTheta: 1_000_000,
      ropeScaling: { ropeType: "linear", factor: 2 },
    },
    seed: 5,
    tokenizer: "qwen3",
    eosText: "<|im_end|>",
  },
  {
    arch: "qwen3",
    name: "qwen3 (per-head q/k RMSNorm, NEOX rope, untied lm_head)",
    config: { ...tinyFamilyConfig("qwen3", QWEN3_IDS), tieWordEmbeddings: false },
    seed: 7,
    tokenizer: "qwen3",
    eosText: "<|im_end|>",
    normStd: 0.3,
  },
  {
    arch: "qwen3moe",
    name: "qwen3_moe (8 experts stacked into ffn_*_exps, top-2, norm_topk_prob)",
    config: tinyFamilyConfig("qwen3_moe", QWEN3_IDS),
    seed: 11,
    tokenizer: "qwen3",
    eosText: "<|im_end|>",
    normStd: 0.3,
  },
  {
    arch: "gemma3",
    name: "gemma3 (untied, norms as 1 + w, sandwich norms, window 8 on layer 0 with the local rope base, GeGLU, Gemma 3 tokenizer)",
    // Untied: with tied embeddings scaled by sqrt(hidden) the residual is the input token's embedding
    // and this untrained model repeats its input token. query_pre_attn_scalar = head_dim: llama.cpp
    // derives the scale from head_dim.
    config: { ...tinyFamilyConfig("gemma3", { vocabSize: 262145, bosTokenId: 2, eosTokenIds: [1, 106] }), queryPreAttnScalar: 16, tieWordEmbeddings: false },
    seed: 13,
    tokenizer: "gemma3",
    eosText: "<end_of_turn>",
    tol: GEMMA_TOL,
    normStd: 0.3,
  },
  {
    arch: "phi3",
    name: "phi3 (fused qkv / gate_up, partial rotary 0.75, LongRoPE short factors + attention factor, SPM tokenizer)",
    config: { ...tinyFamilyConfig("phi3", { vocabSize: 32011, bosTokenId: 1, eosTokenIds: [32007, 32001, 32000] }), slidingWindow: null, layerTypes: ["full_attention", "full_attention"] },
    seed: 17,
    tokenizer: "phi3",
    eosText: "<|endoftext|>",
    normStd: 0.3,
  },
  {
    arch: "smollm3",
    name: "smollm3 (layer 3 of 4 without rotary, q/k permuted for norm rope, no rope_freqs, tied embeddings)",
    config: tinyFamilyConfig("smollm3", QWEN3_IDS),
    seed: 23,
    tokenizer: "qwen3",
    eosText: "<|im_end|>",
    normStd: 0.3,
  },
];

let work: string;
let llama: Llama;

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "llama-cpp-oracle-"));
  const t = performance.now();
  llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, logger: () => {} });
  report(`node-llama-cpp CPU backend ready in ${(performance.now() - t).toFixed(0)} ms`);
});
afterAll(async () => {
  await llama?.dispose();
  if (work) rmSync(work, { recursive: true, force: true });
});

for (const target of TARGETS) {
  describe(`llama.cpp oracle: ${target.name}`, () => {
    let checkpoint: Checkpoint;
    let model: LlamaModel;
    let context: LlamaContext;
    let exec: CpuExecutor;
    let prompt: number[];
    let ours: number[];
    let oursLogProbs: Float64Array[];
    let theirsGreedy: number[];
    let theirsLogProbs: LogProbRow[];
    const arch = target.arch;
    const tol = target.tol ?? TOL;
    const minMargin = 10 * tol;

    beforeAll(async () => {
      const t0 = performance.now();
      if (!tokenizerDirs.has(target.tokenizer)) {
        const tokenizerDir = join(work, `tokenizer-${target.tokenizer}`);
        await writeFamilyTokenizer(target.tokenizer, tokenizerDir);
        tokenizerDirs.set(target.tokenizer, tokenizerDir);
      }
      const dir = await materializeModel({
        dir: join(work, arch),
        config: target.config,
        seed: target.seed,
        weightStd: WEIGHT_STD,
        // "oracle-phi3": llama.cpp gives Phi-3's special tokens rstrip only when general.name says phi3.
        modelId: `oracle-${arch}`,
        tokenizerFrom: tokenizerDirs.get(target.tokenizer),
      });
      randomizeBiases(dir, target.seed, WEIGHT_STD, target.normStd);
      checkpoint = await loadCheckpoint(dir);
      const ggufPath = exportGguf(checkpoint, join(work, `${arch}.gguf`)).path;
      const t1 = performance.now();
      model = await llama.loadModel({ modelPath: ggufPath });
      context = await model.createContext({
        contextSize: CONTEXT,
        sequences: 1,
        threads: 1,
        flashAttention: false,
        experimentalKvCacheKeyType: "F32",
        experimentalKvCacheValueType: "F32",
      });
      const t2 = performance.now();
      const spec = decoderSpecOf(checkpoint.modelId, checkpoint.config, CONTEXT);
      exec = await CpuExecutor.create({ spec, weights: checkpoint.weights, numBlocks: CONTEXT / 16, blockSize: 16, threads: 1 });

      prompt = checkpoint.tokenizer.encode(renderedPrompts(checkpoint.template)[1]!);
      ours = await executorGreedy(exec, prompt, STEPS, [0, 1, 2, 3, 4]);
      const forced = [...prompt, ...ours.slice(0, STEPS - 1)];
      const { logits } = await exec.run([{ tokenIds: forced, startPos: 0, blockTable: [5, 6, 7, 8, 9], logits: "all" }]);
      const V = spec.vocabSize;
      oursLogProbs = Array.from({ length: STEPS }, (_, i) => logSoftmax(logits[0]!.subarray((prompt.length - 1 + i) * V, (prompt.length + i) * V)));

      const sequence = context.getSequence();
      theirsGreedy = await llamaCppGreedy(sequence, prompt, STEPS);
      await sequence.clearHistory();
      theirsLogProbs = await llamaCppLogProbs(sequence, forced, prompt.length - 1, V);
      sequence.dispose();
      report(
        `${arch}: materialize + export ${(t1 - t0).toFixed(0)} ms, llama.cpp load ${(t2 - t1).toFixed(0)} ms, ` +
          `both runs ${(performance.now() - t2).toFixed(0)} ms (prompt ${prompt.length} tokens, ${STEPS} steps)`,
      );
    });
    afterAll(async () => {
      // This target's rows (32 positions over the whole vocabulary, both engines) are not needed any more.
      oursLogProbs = [];
      theirsLogProbs = [];
      await context?.dispose();
      await model?.dispose();
      await exec?.dispose();
    });

    it("llama.cpp reads the exported file as the expected architecture", async () => {
      const info = await readGgufFileInfo(join(work, `${arch}.gguf`), { logWarnings: false });
      expect(info.version).toBe(3);
      expect(info.metadata.general.architecture).toBe(arch);
      expect(model.fileInfo.tensorInfo?.some((t) => t.name === "output.weight")).toBe(!target.config.tieWordEmbeddings);
      expect(model.tokens.bos).toBe(checkpoint.config.bosTokenIds[0]);
      expect(model.tokens.eos).toBe(checkpoint.tokenizer.tokenId(target.eosText));
    });

    it("tokenizes agent text and chat prompts exactly as our tokenizer.json does", () => {
      const texts = [...AGENT_TEXTS, ...renderedPrompts(checkpoint.template)];
      let compared = 0;
      const mismatches: string[] = [];
      for (const text of texts) {
        const a = checkpoint.tokenizer.encode(text);
        const b = Array.from(model.tokenize(text, true), Number);
        compared += a.length;
        if (a.length !== b.length || a.some((x, i) => x !== b[i])) mismatches.push(JSON.stringify(text).slice(0, 60));
      }
      report(`${arch}: tokenization: ${texts.length} texts, ${compared} tokens, ${mismatches.length} mismatches`);
      expect(mismatches).toEqual([]);
    });

    it("still differs where llama.cpp's tokenizer differs by design, and re-types only the expected tokens", () => {
      for (const { text, why } of KNOWN_TOKENIZER_DIFFERENCES[target.tokenizer]) {
        expect(Array.from(model.tokenize(text, true), Number), why).not.toEqual(checkpoint.tokenizer.encode(text));
      }
      const written = ggufTokenizerMetadata(checkpoint.dir, checkpoint.config, checkpoint.chatTemplate)["tokenizer.ggml.token_type"]!.value as number[];
      const retyped: string[] = [];
      for (let id = 0; id < checkpoint.config.vocabSize; id++) {
        if (model.getTokenAttributes(id as Token).control !== (written[id] === GGUF_TOKEN_TYPES.control)) retyped.push(checkpoint.tokenizer.idToToken(id) ?? `#${id}`);
      }
      report(`${arch}: tokens llama.cpp re-types as control at load: ${JSON.stringify(retyped)}`);
      expect(retyped).toEqual(RETYPED_AT_LOAD[target.tokenizer]);
    });

    it(`has top-1/top-2 margins of at least ${minMargin} on the greedy path (so the comparison decides something)`, () => {
      const margins = oursLogProbs.map((row) => {
        const [a, b] = topK(row, 2);
        return row[a!]! - row[b!]!;
      });
      const sorted = [...margins].sort((x, y) => x - y);
      report(
        `${arch}: top-1/top-2 margins over ${STEPS} steps: min ${sorted[0]!.toFixed(4)}, median ${sorted[STEPS >> 1]!.toFixed(3)}; ` +
          `${new Set(ours).size} distinct tokens`,
      );
      expect(sorted[0]).toBeGreaterThanOrEqual(minMargin);
      expect(new Set(ours).size).toBeGreaterThan(STEPS / 2);
    });

    it(`generates the same ${STEPS} greedy tokens`, () => {
      const first = ours.findIndex((t, i) => t !== theirsGreedy[i]);
      report(`${arch}: greedy: ${first < 0 ? STEPS : first}/${STEPS} tokens equal before the first difference`);
      expect(theirsGreedy).toEqual(ours);
    });

    it(`gives the same top-5 log-probabilities within ${tol} at every teacher-forced position`, () => {
      let maxDiff = 0;
      let sameSets = 0;
      let comparedSets = 0;
      for (let i = 0; i < STEPS; i++) {
        const row = oursLogProbs[i]!;
        const theirs = theirsLogProbs[i]!;
        const top = topK(row, 6);
        for (const t of new Set([...top.slice(0, 5), ...theirs.top5])) maxDiff = Math.max(maxDiff, Math.abs(row[t]! - theirs.logProb(t)));
        if (row[top[4]!]! - row[top[5]!]! > 2 * tol) {
          comparedSets++;
          const sorted = (ids: number[]) => [...ids].sort((x, y) => x - y).join(",");
          if (sorted(top.slice(0, 5)) === sorted(theirs.top5)) sameSets++;
        }
      }
      report(`${arch}: teacher-forced top-5 log-probs over ${STEPS} positions: max |diff| ${maxDiff.toExponential(2)} (tolerance ${tol}); top-5 sets equal at ${sameSets}/${comparedSets} positions with a 5th/6th margin > ${2 * tol}`);
      expect(maxDiff).toBeLessThanOrEqual(tol);
      expect(sameSets).toBe(comparedSets);
      expect(comparedSets).toBeGreaterThan(STEPS / 2);
    });
  });
}
