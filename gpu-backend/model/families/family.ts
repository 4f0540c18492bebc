import type { ConfigFields } from "../config/config-fields";
import type { ModelConfig } from "../config/model-config";
import type { GgufFamily } from "../gguf/gguf-family";
import type { TokenizerFiles } from "./tokenizer-files";

/**
 * What a model family file (model/families/<family>.ts) declares: everything that sets the family
 * apart, read by the generic code through the registry (registry.ts). The config parser, the
 * tensor list and fused splits, the decoder spec, the GGUF export, the demo models and the
 * tokenizer writer ask a family for its traits and tables, never for its name.
 */
export interface FamilyDefinition {
  /** config.json `model_type`. */
  modelType: string;
  /** transformers' `architectures[0]` for a config written by us. */
  architecture: string;
  /** What the decoder does differently from a plain Llama (`PLAIN_TRAITS`); only the differences. */
  traits?: Partial<FamilyTraits>;
  config?: FamilyConfig;
  /** How llama.cpp's converter writes the family (shared by families of one llama.cpp architecture). */
  gguf: GgufFamily;
  /** The seeded random demo model of the family, if it has one. */
  demo?: FamilyDemo;
  /** The real tokenizer a demo can carry, if the family brings one. */
  tokenizer?: FamilyTokenizer;
}

/** A family with every trait spelled out (what `familyOf` returns). */
export interface ModelFamily extends Omit<FamilyDefinition, "traits"> {
  traits: FamilyTraits;
}

/** What the decoder does, named for the behaviour. */
export interface FamilyTraits {
  /** Per-head RMSNorm on q and k before rotary (`self_attn.q_norm` / `k_norm`). */
  qkNorm: boolean;
  /** Added to every RMSNorm weight: 1 where the norm scales by (1 + weight) (Gemma). */
  normOffset: 0 | 1;
  /** Norms after attention and around the MLP: post_attention, pre_ and post_feedforward (Gemma). */
  sandwichNorms: boolean;
  /** Token embeddings are multiplied by sqrt(hidden) (Gemma). */
  scaledEmbeddings: boolean;
  /** The gated MLP's activation: SwiGLU's "silu" or gated GELU's "gelu_pytorch_tanh"; the only one the family accepts. */
  mlpActivation: "silu" | "gelu_pytorch_tanh";
  /** Biases on q/k/v regardless of `attention_bias` (Qwen2). */
  alwaysAttentionBias: boolean;
  /** Tensors the checkpoint stores fused, split when read (Phi-3's qkv_proj and gate_up_proj). */
  fusedTensors: readonly FusedTensor[];
}

/** A plain Llama decoder's traits: every family starts from these. */
export const PLAIN_TRAITS: FamilyTraits = {
  qkNorm: false,
  normOffset: 0,
  sandwichNorms: false,
  scaledEmbeddings: false,
  mlpActivation: "silu",
  alwaysAttentionBias: false,
  fusedTensors: [],
};

/** One fused checkpoint tensor of a layer and the decoder tensors it holds, stacked by rows. */
export interface FusedTensor {
  /** The fused tensor's name in layer `layer`. */
  name(layer: number): string;
  /** The decoder tensors (`layerWeightNames`) it holds, in row order. */
  parts(layer: number): string[];
  /** Rows of each part. */
  rows(config: ModelConfig): number[];
}

/** How a family's config.json differs from the generic one. */
export interface FamilyConfig {
  /**
   * transformers' config-class defaults for keys a config.json may leave out, where they differ
   * from the generic ones (rope_theta 10000, tie_word_embeddings false).
   */
  defaults?: Record<string, unknown>;
  /** The activation's key when it is not `hidden_act` (Gemma 3: `hidden_activation`). */
  activationKey?: string;
  /** `model_type` of a multimodal config.json that keeps this family's config in `text_config` (Gemma 3: "gemma3"). */
  wrapperModelType?: string;
  /**
   * Reads the family's own fields (windows and layer types, rotary per layer, experts, ...) over
   * the generic config `base` (no window, every layer full and rotating, no experts).
   */
  read?(json: Record<string, unknown>, field: ConfigFields, base: ModelConfig, fail: (detail: string) => never): Partial<ModelConfig>;
  /** The family's own config.json keys (inverse of `read`), written after the generic ones. */
  write?(config: ModelConfig): Record<string, unknown>;
}

/** What the demo config of a family is built from: the llama demo's shape over the tokenizer's ids. */
export interface FamilyDemo {
  /** The `--model` name ("gemma3"); the demo id is "demo-<name without _>-random". */
  name: string;
  /** The `FamilyTokenizer.name` the demo carries. */
  tokenizer: string;
  /** The demo config from the llama demo's (`base`: 8 layers, hidden 512, over the tokenizer's ids). */
  config(base: ModelConfig): ModelConfig;
  /** The tiny test config from `tiny` (the demo config in the tiny shape: 2 layers, hidden 64); default: `tiny` as it is. */
  tiny?(tiny: ModelConfig, full: ModelConfig): ModelConfig;
}

/** A real tokenizer a family brings: tokenizer.json and tokenizer_config.json with a tool-capable chat template. */
export interface FamilyTokenizer {
  /** How demos and tests name it ("qwen3"). */
  name: string;
  /** The files' text and what a config needs to know of them (built once per process). */
  files(): TokenizerFiles;
}

/**
 * A family with its traits filled from `PLAIN_TRAITS`.
 *
 * @example resolveFamily(gemma3).traits.normOffset; // 1
 */
export function resolveFamily(def: FamilyDefinition): ModelFamily {
  return { ...def, traits: { ...PLAIN_TRAITS, ...def.traits } };
}
