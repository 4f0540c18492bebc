import { join } from "node:path";
import type { ModelConfig } from "./model-config";
import { DEMO_MODEL_ID, DEMO_MODEL_SEED, TINY_SHAPE, demoModelConfig, materializeDemoModel, materializeModel, modelCacheDir } from "./demo-model";
import { writeFamilyTokenizer, type TokenizerFamily } from "./family-tokenizers";

/**
 * The seeded random demo models of each supported family, for tests and benchmarks without
 * downloads. Every demo has the shape of the llama demo (8 layers, hidden 512, 8 query heads over
 * 2 KV heads of 64, MLP 1536) with its family's traits, so benchmarks compare families at equal
 * size; the mixture of experts has 16 experts of 384, 4 per token: the same ACTIVE MLP parameters
 * as the dense 1536 (its total is 4x).
 */
export const DEMO_FAMILIES = ["llama", "qwen3", "qwen3_moe", "gemma3", "phi3"] as const;
export type DemoFamily = (typeof DEMO_FAMILIES)[number];

/** What a config needs from its tokenizer. */
export interface TokenizerIds {
  vocabSize: number;
  bosTokenId: number | null;
  eosTokenIds: number[];
}

/** Vocabulary sizes are padded up to a multiple of this (as the llama demo's). */
const VOCAB_MULTIPLE = 128;

/**
 * The demo config of a family over its tokenizer's ids.
 *
 * @example
 * familyDemoConfig("gemma3", { vocabSize: 262144, bosTokenId: 2, eosTokenIds: [1, 106] });
 */
export function familyDemoConfig(family: DemoFamily, tok: TokenizerIds): ModelConfig {
  const base: ModelConfig = {
    ...demoModelConfig(),
    vocabSize: Math.ceil(tok.vocabSize / VOCAB_MULTIPLE) * VOCAB_MULTIPLE,
    bosTokenIds: tok.bosTokenId === null ? [] : [tok.bosTokenId],
    eosTokenIds: tok.eosTokenIds,
  };
  const layers = base.numHiddenLayers;
  switch (family) {
    case "llama":
      return base;
    case "qwen3":
      return { ...base, modelType: "qwen3", ropeTheta: 1000000, ropeScaling: null, maxPositionEmbeddings: 40960 };
    case "qwen3_moe":
      return {
        ...familyDemoConfig("qwen3", tok),
        modelType: "qwen3_moe",
        moe: { numExperts: 16, numExpertsPerTok: 4, moeIntermediateSize: 384, normTopkProb: true, decoderSparseStep: 1, mlpOnlyLayers: [] },
      };
    case "gemma3":
      // Gemma 3 1B's pattern: five sliding layers (window 512) per global one.
      return {
        ...base,
        modelType: "gemma3_text",
        hiddenAct: "gelu_pytorch_tanh",
        ropeTheta: 1000000,
        ropeScaling: null,
        ropeLocalTheta: 10000,
        queryPreAttnScalar: 64,
        slidingWindow: 512,
        layerTypes: Array.from({ length: layers }, (_, i) => ((i + 1) % 6 === 0 ? "full_attention" : "sliding_attention")),
      };
    case "phi3":
      // Phi-4-mini's rotary: 3/4 of each head, LongRoPE over a 4096-token pretrained context.
      return {
        ...base,
        modelType: "phi3",
        ropeTheta: 10000,
        partialRotaryFactor: 0.75,
        ropeScaling: {
          ropeType: "longrope",
          shortFactor: Array.from({ length: 24 }, (_, i) => 1 + i / 48),
          longFactor: Array.from({ length: 24 }, (_, i) => 1 + i),
          originalMaxPositionEmbeddings: 4096,
          attentionFactor: null,
        },
        maxPositionEmbeddings: 131072,
      };
  }
}

/**
 * A tiny config of a family for tests (hidden 64, 2 layers, 4 heads over 2 KV heads of 16, MLP
 * 128; Gemma's window 8 and Phi-3's window 24 so windows matter in short prompts; 8 experts of 32,
 * 2 per token).
 *
 * @example materializeModel({ dir, config: tinyFamilyConfig("phi3", ids), seed: 1 });
 */
export function tinyFamilyConfig(family: DemoFamily, tok: TokenizerIds): ModelConfig {
  const full = familyDemoConfig(family, tok);
  const tiny: ModelConfig = {
    ...full,
    ...TINY_SHAPE,
    maxPositionEmbeddings: full.ropeScaling?.ropeType === "longrope" ? full.maxPositionEmbeddings : 4096,
  };
  switch (family) {
    case "gemma3":
      return { ...tiny, slidingWindow: 8, layerTypes: ["sliding_attention", "full_attention"], queryPreAttnScalar: 24 };
    case "phi3": {
      const scaling = full.ropeScaling as Extract<ModelConfig["ropeScaling"], { ropeType: "longrope" }>;
      return {
        ...tiny,
        slidingWindow: 24,
        layerTypes: ["sliding_attention", "sliding_attention"],
        ropeScaling: { ...scaling, shortFactor: scaling.shortFactor.slice(0, 6), longFactor: scaling.longFactor.slice(0, 6) },
      };
    }
    case "qwen3_moe":
      return { ...tiny, moe: { ...full.moe!, numExperts: 8, numExpertsPerTok: 2, moeIntermediateSize: 32 } };
    default:
      return tiny;
  }
}

/** The tokenizer each family's demo carries. */
export const TOKENIZER_OF: Record<DemoFamily, TokenizerFamily> = { llama: "qwen3", qwen3: "qwen3", qwen3_moe: "qwen3", gemma3: "gemma3", phi3: "phi3" };

/**
 * A family's demo model id: "demo-llama-random" (the embedded default), "demo-qwen3-random",
 * "demo-qwen3moe-random", "demo-gemma3-random", "demo-phi3-random".
 */
export function demoModelId(family: DemoFamily): string {
  return family === "llama" ? DEMO_MODEL_ID : `demo-${family.replace("_", "")}-random`;
}

/**
 * The demo family a `--model` value names: a family ("qwen3") or a demo model id
 * ("demo-qwen3-random"); undefined for anything else (a folder).
 *
 * @example demoFamilyOf("gemma3"); // "gemma3"
 */
export function demoFamilyOf(name: string): DemoFamily | undefined {
  return DEMO_FAMILIES.find((f) => f === name || demoModelId(f) === name);
}

/**
 * Writes a family's demo model (seeded random weights, the family's tokenizer and tool-capable
 * chat template) under the model cache and returns its folder; idempotent like
 * `materializeModel`. The llama family is the embedded default model.
 *
 * @example
 * const dir = await materializeFamilyDemo("gemma3", { onProgress: console.log });
 */
export async function materializeFamilyDemo(family: DemoFamily, options: { dir?: string; onProgress?: (line: string) => void } = {}): Promise<string> {
  if (family === "llama") return materializeDemoModel(options);
  const tokenizerDir = join(modelCacheDir(), "tokenizers", TOKENIZER_OF[family]);
  const info = await writeFamilyTokenizer(TOKENIZER_OF[family], tokenizerDir);
  const id = demoModelId(family);
  return materializeModel({
    dir: options.dir ?? join(modelCacheDir(), id),
    config: familyDemoConfig(family, info),
    seed: DEMO_MODEL_SEED,
    tokenizerFrom: tokenizerDir,
    modelId: id,
    onProgress: options.onProgress,
  });
}
