import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, LlamaLogLevel, readGgufFileInfo, type Llama, type LlamaContext, type LlamaModel } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decoderSpecOf } from "../../gpu-backend/model/checkpoint/decoder-spec-of";
import { loadCheckpoint, type Checkpoint } from "../../gpu-backend/model/checkpoint/checkpoint";
import { materializeModel, tinyDemoConfig } from "../../gpu-backend/model/checkpoint/demo-model";
import type { ModelConfig } from "../../gpu-backend/model/checkpoint/model-config";
import { CpuExecutor } from "../../gpu-backend/model/executors/cpu-executor";
import { executorGreedy } from "../../gpu-backend/model/executors/executor-conformance";
import { exportGguf } from "../../gpu-backend/model/gguf/gguf-export";
import { AGENT_TEXTS, KNOWN_TOKENIZER_DIFFERENCES, renderedPrompts } from "./agent-text-corpus";
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
 * Measured differences are 4e-5 to 1e-4 (printed below); 1e-3 leaves 10x room for the other SIMD
 * variants llama.cpp picks per CPU. A broken conversion is far outside it: without the k row
 * permutation the max difference is ~29 and no greedy token matches; without rope_freqs it is ~1.5
 * and greedy decoding diverges at step 6.
 *
 * Weights ~N(0, WEIGHT_STD²) with WEIGHT_STD = 0.5: at the default 0.02 the tiny model's logits
 * have magnitude ~0.2 and its greedy output is one token repeated, a comparison that proves little.
 * The greedy path's top-1/top-2 margins are asserted to be at least MIN_MARGIN = 10 x TOL, so every
 * greedy step and top-5 set is decided by more than rounding; the seeds were picked for that.
 */
const TOL = 1e-3;
const MIN_MARGIN = 10 * TOL;
const STEPS = 32;
const WEIGHT_STD = 0.5;
const report = (line: string) => console.log(`[llama.cpp oracle] ${line}`);

interface OracleTarget {
  name: string;
  config: ModelConfig;
  seed: number;
}

const TARGETS: OracleTarget[] = [
  {
    name: "llama (Llama 3 rope scaling -> rope_freqs, tied embeddings, GQA 4/2, q/k/v biases permuted)",
    config: { ...tinyDemoConfig(), attentionBias: true },
    seed: 3,
  },
  {
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
    const arch = target.config.modelType === "qwen2" ? "qwen2" : "llama";

    beforeAll(async () => {
      const t0 = performance.now();
      const dir = await materializeModel({ dir: join(work, arch), config: target.config, seed: target.seed, weightStd: WEIGHT_STD, modelId: `oracle-${arch}` });
      randomizeBiases(dir, target.seed, WEIGHT_STD);
      checkpoint = await loadCheckpoint(dir);
      const ggufPath = exportGguf(checkpoint, join(work, `${arch}.gguf`)).path;
      const t1 = performance.now();
      model = await llama.loadModel({ modelPath: ggufPath });
      context = await model.createContext({
        contextSize: 256,
        sequences: 1,
        threads: 1,
        flashAttention: false,
        experimentalKvCacheKeyType: "F32",
        experimentalKvCacheValueType: "F32",
      });
      const t2 = performance.now();
      const spec = decoderSpecOf(checkpoint.modelId, checkpoint.config, 4096);
      const names = new Set(checkpoint.tensorNames);
      exec = await CpuExecutor.create({ spec, weights: { has: (n) => names.has(n), take: (n) => checkpoint.getTensor(n).data }, numBlocks: 16, blockSize: 16, threads: 1 });

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
      expect(model.tokens.eos).toBe(checkpoint.tokenizer.tokenId("<|im_end|>"));
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

    it("still differs where llama.cpp's tokenizer differs by design (NFC, </s> as control)", () => {
      for (const { text, why } of KNOWN_TOKENIZER_DIFFERENCES) {
        expect(Array.from(model.tokenize(text, true), Number), why).not.toEqual(checkpoint.tokenizer.encode(text));
      }
      const retyped: string[] = [];
      const types = new Map([...Array(checkpoint.config.vocabSize).keys()].map((id) => [id, model.getTokenAttributes(id as never).control]));
      for (const [id, control] of types) {
        const special = checkpoint.tokenizer.specialTokenIds.has(id) || /^<\|.*\|>$/.test(checkpoint.tokenizer.idToToken(id) ?? "");
        if (control !== special) retyped.push(checkpoint.tokenizer.idToToken(id) ?? `#${id}`);
      }
      report(`${arch}: tokens llama.cpp re-types as control at load: ${JSON.stringify(retyped)}`);
      expect(retyped).toEqual(["</s>"]);
    });

    it(`has top-1/top-2 margins of at least ${MIN_MARGIN} on the greedy path (so the comparison decides something)`, () => {
      const margins = oursLogProbs.map((row) => {
        const [a, b] = topK(row, 2);
        return row[a!]! - row[b!]!;
      });
      const sorted = [...margins].sort((x, y) => x - y);
      report(
        `${arch}: top-1/top-2 margins over ${STEPS} steps: min ${sorted[0]!.toFixed(4)}, median ${sorted[STEPS >> 1]!.toFixed(3)}; ` +
          `${new Set(ours).size} distinct tokens`,
      );
      expect(sorted[0]).toBeGreaterThanOrEqual(MIN_MARGIN);
      expect(new Set(ours).size).toBeGreaterThan(STEPS / 2);
    });

    it(`generates the same ${STEPS} greedy tokens`, () => {
      const first = ours.findIndex((t, i) => t !== theirsGreedy[i]);
      report(`${arch}: greedy: ${first < 0 ? STEPS : first}/${STEPS} tokens equal before the first difference`);
      expect(theirsGreedy).toEqual(ours);
    });

    it(`gives the same top-5 log-probabilities within ${TOL} at every teacher-forced position`, () => {
      let maxDiff = 0;
      let sameSets = 0;
      let comparedSets = 0;
      for (let i = 0; i < STEPS; i++) {
        const row = oursLogProbs[i]!;
        const theirs = theirsLogProbs[i]!;
        const top = topK(row, 6);
        for (const t of new Set([...top.slice(0, 5), ...theirs.top5])) maxDiff = Math.max(maxDiff, Math.abs(row[t]! - theirs.logProb(t)));
        if (row[top[4]!]! - row[top[5]!]! > 2 * TOL) {
          comparedSets++;
          const sorted = (ids: number[]) => [...ids].sort((x, y) => x - y).join(",");
          if (sorted(top.slice(0, 5)) === sorted(theirs.top5)) sameSets++;
        }
      }
      report(`${arch}: teacher-forced top-5 log-probs over ${STEPS} positions: max |diff| ${maxDiff.toExponential(2)} (tolerance ${TOL}); top-5 sets equal at ${sameSets}/${comparedSets} positions with a 5th/6th margin > ${2 * TOL}`);
      expect(maxDiff).toBeLessThanOrEqual(TOL);
      expect(sameSets).toBe(comparedSets);
      expect(comparedSets).toBeGreaterThan(STEPS / 2);
    });
  });
}
