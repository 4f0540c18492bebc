import { familyTraits } from "./model-family";
import type { ModelConfig } from "./model-config";
import { ropeScalingToJson } from "./rope-config";

/**
 * The config as a Hugging Face config.json object, the inverse of `parseModelConfig`. Llama-family
 * configs keep exactly the keys they always had (so an existing demo folder stays valid); the
 * other families add theirs.
 *
 * @example
 * fs.writeFileSync("config.json", JSON.stringify(modelConfigToJson(config), null, 2));
 */
export function modelConfigToJson(config: ModelConfig): Record<string, unknown> {
  const ids = (list: number[]) => (list.length === 0 ? null : list.length === 1 ? list[0] : list);
  const traits = familyTraits(config.modelType);
  const json: Record<string, unknown> = {
    architectures: [traits.architecture],
    model_type: config.modelType,
    [traits.gemma ? "hidden_activation" : "hidden_act"]: config.hiddenAct,
    hidden_size: config.hiddenSize,
    intermediate_size: config.intermediateSize,
    num_hidden_layers: config.numHiddenLayers,
    num_attention_heads: config.numAttentionHeads,
    num_key_value_heads: config.numKeyValueHeads,
    head_dim: config.headDim,
    rms_norm_eps: config.rmsNormEps,
    rope_theta: config.ropeTheta,
    rope_scaling: ropeScalingToJson(config.ropeScaling),
    max_position_embeddings: config.maxPositionEmbeddings,
    vocab_size: config.vocabSize,
    tie_word_embeddings: config.tieWordEmbeddings,
    attention_bias: config.attentionBias,
    mlp_bias: false,
    bos_token_id: ids(config.bosTokenIds),
    eos_token_id: ids(config.eosTokenIds),
    torch_dtype: config.torchDtype,
  };
  if (config.partialRotaryFactor !== 1) json.partial_rotary_factor = config.partialRotaryFactor;
  if (config.ropeScaling?.ropeType === "longrope") json.original_max_position_embeddings = config.ropeScaling.originalMaxPositionEmbeddings;
  if (config.modelType === "gemma3_text") {
    json.sliding_window = config.slidingWindow;
    json.layer_types = config.layerTypes;
    json.rope_local_base_freq = config.ropeLocalTheta;
    json.query_pre_attn_scalar = config.queryPreAttnScalar;
    json.attn_logit_softcapping = null;
    json.final_logit_softcapping = null;
  } else if (config.modelType === "mistral" || config.modelType === "phi3") {
    if (config.slidingWindow !== null || config.modelType === "phi3") json.sliding_window = config.slidingWindow;
  }
  if (config.moe) {
    json.num_experts = config.moe.numExperts;
    json.num_experts_per_tok = config.moe.numExpertsPerTok;
    json.moe_intermediate_size = config.moe.moeIntermediateSize;
    json.norm_topk_prob = config.moe.normTopkProb;
    json.decoder_sparse_step = config.moe.decoderSparseStep;
    json.mlp_only_layers = config.moe.mlpOnlyLayers;
  }
  return json;
}
