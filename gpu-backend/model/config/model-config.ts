import type { RopeParams, RopeScaling } from "./rope-config";

/**
 * A validated model config: the fields of a Hugging Face config.json the engine uses, the same for
 * every family (`parseModelConfig` in checkpoint/parse-model-config.ts reads it; each family file
 * in model/families/ fills its own fields).
 */

/** How a layer attends: to every earlier token, or only to the last `slidingWindow` ones. */
export type LayerType = "full_attention" | "sliding_attention";

/** The mixture-of-experts settings of a sparse config (Qwen3-MoE). */
export interface MoeConfig {
  numExperts: number;
  /** Experts each token is routed to (`num_experts_per_tok`). */
  numExpertsPerTok: number;
  moeIntermediateSize: number;
  /** Renormalize the chosen experts' router probabilities to sum to 1. */
  normTopkProb: boolean;
  decoderSparseStep: number;
  /** Layers whose MLP stays dense. */
  mlpOnlyLayers: number[];
}

export interface ModelConfig {
  /** config.json `model_type` of a registered family (model/families/registry.ts). */
  modelType: string;
  hiddenSize: number;
  /** The dense MLP's width (for a mixture of experts: of its dense layers only). */
  intermediateSize: number;
  numHiddenLayers: number;
  numAttentionHeads: number;
  numKeyValueHeads: number;
  headDim: number;
  rmsNormEps: number;
  ropeTheta: number;
  ropeScaling: RopeScaling | null;
  maxPositionEmbeddings: number;
  vocabSize: number;
  tieWordEmbeddings: boolean;
  /** Bias on the q/k/v projections (always true for a family with the `alwaysAttentionBias` trait). */
  attentionBias: boolean;
  /** `bos_token_id`, as a list (empty when absent or null). */
  bosTokenIds: number[];
  /** `eos_token_id`, as a list (empty when absent or null). */
  eosTokenIds: number[];
  /** `torch_dtype` (or `dtype`), e.g. "bfloat16"; null when absent. */
  torchDtype: string | null;
  /** The gated MLP's activation: SwiGLU's silu or gated GELU's tanh approximation. */
  hiddenAct: "silu" | "gelu_pytorch_tanh";
  /** Share of each head's dimensions that rotate (Phi-4-mini: 0.75). */
  partialRotaryFactor: number;
  /** Window of the sliding-window layers (null: none). */
  slidingWindow: number | null;
  /** One per layer. */
  layerTypes: LayerType[];
  /** One per layer: whether q and k rotate (SmolLM3's `no_rope_layers` 0 marks a layer without rotary). */
  ropeLayers: boolean[];
  /** Rotary base of the sliding-window layers when they have their own (Gemma 3's `rope_local_base_freq`; no scaling there). */
  ropeLocalTheta: number | null;
  /** Attention scores scaled by query_pre_attn_scalar^-0.5 instead of head_dim^-0.5 (Gemma 3); null: head_dim. */
  queryPreAttnScalar: number | null;
  moe: MoeConfig | null;
  /** Set when config.json wraps the text model (Gemma 3's multimodal `gemma3`, read from `text_config`). */
  wrapperModelType: string | null;
}

/**
 * Whether layer `layer`'s MLP is a mixture of experts (transformers' Qwen3MoeDecoderLayer rule).
 *
 * @example isSparseLayer(config.moe, 3);
 */
export function isSparseLayer(moe: MoeConfig | null, layer: number): boolean {
  if (moe === null) return false;
  return !moe.mlpOnlyLayers.includes(layer) && (layer + 1) % moe.decoderSparseStep === 0;
}

/** The rotary parameters of the full-attention layers. */
export function globalRope(config: ModelConfig): RopeParams {
  return {
    headDim: config.headDim,
    rotaryDim: Math.floor(config.headDim * config.partialRotaryFactor),
    ropeTheta: config.ropeTheta,
    ropeScaling: config.ropeScaling,
    maxPositionEmbeddings: config.maxPositionEmbeddings,
  };
}
