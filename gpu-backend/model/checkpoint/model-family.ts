/**
 * The model families the engine serves, by config.json `model_type`, and what sets each apart.
 * The one place that says which family has which trait: the config parser, the tensor list, the
 * decoder spec and the GGUF export read it from here.
 */

export const MODEL_TYPES = ["llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gemma3_text", "phi3"] as const;
export type ModelType = (typeof MODEL_TYPES)[number];

export interface FamilyTraits {
  /** transformers' `architectures[0]` for a config written by us. */
  architecture: string;
  /** Per-head RMSNorm on q and k before rotary (`self_attn.q_norm` / `k_norm`). */
  qkNorm: boolean;
  /**
   * Gemma's conventions: RMSNorm scaled by (1 + weight), norms before and after both the
   * attention and the feed-forward block, embeddings scaled by sqrt(hidden).
   */
  gemma: boolean;
  /** Phi-3's fused `qkv_proj` and `gate_up_proj` weights. */
  fusedProjections: boolean;
  /** Biases on q/k/v regardless of `attention_bias` (qwen2). */
  alwaysAttentionBias: boolean;
  /** `tie_word_embeddings` when the config does not say. */
  defaultTieWordEmbeddings: boolean;
}

const TRAITS: Record<ModelType, FamilyTraits> = {
  llama: { architecture: "LlamaForCausalLM", qkNorm: false, gemma: false, fusedProjections: false, alwaysAttentionBias: false, defaultTieWordEmbeddings: false },
  mistral: { architecture: "MistralForCausalLM", qkNorm: false, gemma: false, fusedProjections: false, alwaysAttentionBias: false, defaultTieWordEmbeddings: false },
  qwen2: { architecture: "Qwen2ForCausalLM", qkNorm: false, gemma: false, fusedProjections: false, alwaysAttentionBias: true, defaultTieWordEmbeddings: false },
  qwen3: { architecture: "Qwen3ForCausalLM", qkNorm: true, gemma: false, fusedProjections: false, alwaysAttentionBias: false, defaultTieWordEmbeddings: false },
  qwen3_moe: { architecture: "Qwen3MoeForCausalLM", qkNorm: true, gemma: false, fusedProjections: false, alwaysAttentionBias: false, defaultTieWordEmbeddings: false },
  gemma3_text: { architecture: "Gemma3ForCausalLM", qkNorm: true, gemma: true, fusedProjections: false, alwaysAttentionBias: false, defaultTieWordEmbeddings: true },
  phi3: { architecture: "Phi3ForCausalLM", qkNorm: false, gemma: false, fusedProjections: true, alwaysAttentionBias: false, defaultTieWordEmbeddings: false },
};

/** @example familyTraits("gemma3_text").gemma; // true */
export function familyTraits(modelType: ModelType): FamilyTraits {
  return TRAITS[modelType];
}

export function isModelType(value: string): value is ModelType {
  return (MODEL_TYPES as readonly string[]).includes(value);
}
