import type { ModelConfig } from "../config/model-config";
import { ropeScalingToJson } from "../config/rope-config";
import { familyOf } from "../families/registry";

/**
 * The config as a Hugging Face config.json object, the inverse of `parseModelConfig`. Llama-family
 * configs keep exactly the keys they always had (so an existing demo folder stays valid); the
 * other families add theirs (their `config.write`) after the generic ones.
 *
 * @example
 * fs.writeFileSync("config.json", JSON.stringify(modelConfigToJson(config), null, 2));
 */
export function modelConfigToJson(config: ModelConfig): Record<string, unknown> {
  const ids = (list: number[]) => (list.length === 0 ? null : list.length === 1 ? list[0] : list);
  const family = familyOf(config.modelType);
  const json: Record<string, unknown> = {
    architectures: [family.architecture],
    model_type: config.modelType,
    [family.config?.activationKey ?? "hidden_act"]: config.hiddenAct,
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
  return { ...json, ...family.config?.write?.(config) };
}
