import { join } from "node:path";
import type { ModelConfig } from "../config/model-config";
import { DEMO_FAMILIES, demoOf, type DemoFamily, type TokenizerFamily } from "../families/registry";
import { DEMO_MODEL_ID, DEMO_MODEL_SEED, TINY_SHAPE, demoModelConfig, materializeDemoModel, materializeModel, modelCacheDir } from "./demo-model";
import { writeFamilyTokenizer } from "./family-tokenizers";

export { DEMO_FAMILIES, type DemoFamily } from "../families/registry";

/**
 * The seeded random demo models of each family that has one (its `demo`), for tests and
 * benchmarks without downloads. Every demo has the shape of the llama demo (8 layers, hidden 512,
 * 8 query heads over 2 KV heads of 64, MLP 1536) with its family's traits, so benchmarks compare
 * families at equal size.
 */

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
  return demoOf(family).config(base);
}

/**
 * A tiny config of a family for tests (hidden 64, 2 layers, 4 heads over 2 KV heads of 16, MLP
 * 128), with what the family's `demo.tiny` changes so its traits show in short prompts (Gemma's
 * window 8, Phi-3's window 24, 8 experts of 32, SmolLM3's 4 layers).
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
  return demoOf(family).tiny?.(tiny, full) ?? tiny;
}

/** The tokenizer each family's demo carries. */
export const TOKENIZER_OF = Object.fromEntries(DEMO_FAMILIES.map((f) => [f, demoOf(f).tokenizer])) as Record<DemoFamily, TokenizerFamily>;

/**
 * A family's demo model id: "demo-llama-random" (the embedded default), "demo-qwen3-random",
 * "demo-qwen3moe-random", "demo-gemma3-random", "demo-phi3-random", "demo-smollm3-random".
 */
export function demoModelId(family: DemoFamily): string {
  return `demo-${family.replace("_", "")}-random`;
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
 * `materializeModel`. The demo whose id is the embedded default's (llama) is that model.
 *
 * @example
 * const dir = await materializeFamilyDemo("gemma3", { onProgress: console.log });
 */
export async function materializeFamilyDemo(family: DemoFamily, options: { dir?: string; onProgress?: (line: string) => void } = {}): Promise<string> {
  const id = demoModelId(family);
  if (id === DEMO_MODEL_ID) return materializeDemoModel(options);
  const tokenizer = TOKENIZER_OF[family];
  const tokenizerDir = join(modelCacheDir(), "tokenizers", tokenizer);
  const info = await writeFamilyTokenizer(tokenizer, tokenizerDir);
  return materializeModel({
    dir: options.dir ?? join(modelCacheDir(), id),
    config: familyDemoConfig(family, info),
    seed: DEMO_MODEL_SEED,
    tokenizerFrom: tokenizerDir,
    modelId: id,
    onProgress: options.onProgress,
  });
}
