import { fieldReader, isRecord } from "../config/config-fields";
import type { LayerType, ModelConfig } from "../config/model-config";
import { parseRopeScaling } from "../config/rope-config";
import { FAMILIES, MODEL_TYPES, findFamily, wrappedFamily } from "../families/registry";
import { ModelLoadError } from "./model-load-error";

/**
 * Validates a parsed Hugging Face config.json of a registered family (model/families/registry.ts).
 * Defaults follow transformers: `num_key_value_heads` = heads, `head_dim` = hidden / heads,
 * `rope_theta` 10000, `tie_word_embeddings` false and `attention_bias` false, unless the family
 * says otherwise (its `config.defaults` and traits). Newer configs that keep `rope_theta` and the
 * scaling in `rope_parameters` are read too. A multimodal config that wraps a family's text model
 * (the family's `config.wrapperModelType`, e.g. Gemma 3's `gemma3`) is read through `text_config`.
 * The family reads its own fields (windows, rotary per layer, experts) over the generic ones.
 *
 * @param json the parsed file
 * @param fileName how errors name the file (a path or "config.json")
 * @throws ModelLoadError naming the file and the field
 * @example
 * const config = parseModelConfig(JSON.parse(text), "/models/x/config.json");
 * // bad input: ModelLoadError("config.json: num_hidden_layers must be a positive integer")
 */
export function parseModelConfig(json: unknown, fileName: string): ModelConfig {
  const fail = (detail: string): never => {
    throw new ModelLoadError(fileName, detail);
  };
  if (!isRecord(json)) return fail("expected a JSON object");
  const wrapped = wrappedFamily(json.model_type);
  if (wrapped) {
    const text = json.text_config;
    if (!isRecord(text)) return fail(`text_config must be an object (a ${String(json.model_type)} config keeps its text model there)`);
    const inner: Record<string, unknown> = { model_type: wrapped.modelType, ...text };
    for (const key of ["bos_token_id", "eos_token_id", "torch_dtype", "dtype"]) if (inner[key] === undefined && json[key] !== undefined) inner[key] = json[key];
    const prefixed = (detail: string): never => fail(`text_config.${detail}`);
    return { ...parseTextConfig(inner, prefixed), wrapperModelType: json.model_type as string };
  }
  return parseTextConfig(json, fail);
}

function parseTextConfig(raw: Record<string, unknown>, fail: (detail: string) => never): ModelConfig {
  const rawType = fieldReader(raw, fail).string("model_type");
  const family = findFamily(rawType);
  if (!family) {
    const supported = [...MODEL_TYPES, ...FAMILIES.flatMap((f) => (f.config?.wrapperModelType ? [f.config.wrapperModelType] : []))];
    return fail(`model_type ${JSON.stringify(rawType)} is not supported (supported: ${supported.join(", ")})`);
  }
  const json = withDefaults(raw, family.config?.defaults ?? {});
  const field = fieldReader(json, fail);
  const traits = family.traits;

  const familyKey = family.config?.activationKey;
  const actKey = familyKey !== undefined && json[familyKey] !== undefined ? familyKey : "hidden_act";
  const hiddenAct = field.optionalString(actKey) ?? traits.mlpActivation;
  if (hiddenAct !== traits.mlpActivation) fail(`${actKey} ${JSON.stringify(hiddenAct)} is not supported (only "${traits.mlpActivation}" for ${family.modelType})`);
  if (json.mlp_bias === true) fail("mlp_bias true is not supported");
  if (json.use_sliding_window === true) fail("sliding window attention is not supported (use_sliding_window must be false)");
  for (const key of ["attn_logit_softcapping", "final_logit_softcapping"]) {
    if (json[key] !== undefined && json[key] !== null) fail(`${key} is not supported (must be null)`);
  }

  const hiddenSize = field.positiveInt("hidden_size");
  const intermediateSize = field.positiveInt("intermediate_size");
  const numHiddenLayers = field.positiveInt("num_hidden_layers");
  const numAttentionHeads = field.positiveInt("num_attention_heads");
  const numKeyValueHeads = field.optionalPositiveInt("num_key_value_heads") ?? numAttentionHeads;
  if (numAttentionHeads % numKeyValueHeads !== 0) {
    fail(`num_attention_heads (${numAttentionHeads}) must be a multiple of num_key_value_heads (${numKeyValueHeads})`);
  }
  let headDim = field.optionalPositiveInt("head_dim");
  if (headDim === undefined) {
    if (hiddenSize % numAttentionHeads !== 0) {
      fail(`hidden_size (${hiddenSize}) is not a multiple of num_attention_heads (${numAttentionHeads}) and head_dim is not given`);
    }
    headDim = hiddenSize / numAttentionHeads;
  }
  if (headDim % 2 !== 0) fail(`head_dim must be even for rotary embeddings, got ${headDim}`);
  const rmsNormEps = field.positiveNumber("rms_norm_eps");

  const ropeParameters = json.rope_parameters;
  if (ropeParameters !== undefined && ropeParameters !== null && !isRecord(ropeParameters)) fail("rope_parameters must be an object or null");
  const ropeSource = isRecord(ropeParameters) ? ropeParameters : undefined;
  // The file's own rope_theta, then rope_parameters', then the family's default.
  const ropeThetaRaw = raw.rope_theta ?? ropeSource?.rope_theta ?? json.rope_theta;
  let ropeTheta = 10000;
  if (ropeThetaRaw !== undefined && ropeThetaRaw !== null) {
    if (typeof ropeThetaRaw !== "number" || !(ropeThetaRaw > 0) || !Number.isFinite(ropeThetaRaw)) fail("rope_theta must be a positive number");
    ropeTheta = ropeThetaRaw as number;
  }
  const partialRaw = json.partial_rotary_factor ?? ropeSource?.partial_rotary_factor ?? 1;
  if (typeof partialRaw !== "number" || !(partialRaw > 0 && partialRaw <= 1)) fail("partial_rotary_factor must be a number in (0, 1]");
  const partialRotaryFactor = partialRaw as number;
  const rotaryDim = Math.floor(headDim * partialRotaryFactor);
  if (rotaryDim % 2 !== 0) fail(`head_dim x partial_rotary_factor must be even, got ${rotaryDim}`);
  const originalMax = field.optionalPositiveInt("original_max_position_embeddings");
  const ropeCtx = { rotaryDim, originalMax };
  const ropeScaling =
    json.rope_scaling !== undefined && json.rope_scaling !== null
      ? parseRopeScaling(json.rope_scaling, "rope_scaling", ropeCtx, fail)
      : ropeSource
        ? parseRopeScaling(ropeSource, "rope_parameters", ropeCtx, fail)
        : null;

  const base: ModelConfig = {
    modelType: family.modelType,
    hiddenSize,
    intermediateSize,
    numHiddenLayers,
    numAttentionHeads,
    numKeyValueHeads,
    headDim,
    rmsNormEps,
    ropeTheta,
    ropeScaling,
    maxPositionEmbeddings: field.positiveInt("max_position_embeddings"),
    vocabSize: field.positiveInt("vocab_size"),
    tieWordEmbeddings: field.optionalBoolean("tie_word_embeddings") ?? false,
    attentionBias: traits.alwaysAttentionBias ? true : (field.optionalBoolean("attention_bias") ?? false),
    bosTokenIds: field.tokenIds("bos_token_id"),
    eosTokenIds: field.tokenIds("eos_token_id"),
    torchDtype: field.optionalString("torch_dtype") ?? field.optionalString("dtype") ?? null,
    hiddenAct: hiddenAct as ModelConfig["hiddenAct"],
    partialRotaryFactor,
    slidingWindow: null,
    layerTypes: Array.from({ length: numHiddenLayers }, (): LayerType => "full_attention"),
    ropeLayers: Array.from({ length: numHiddenLayers }, () => true),
    ropeLocalTheta: null,
    queryPreAttnScalar: null,
    moe: null,
    wrapperModelType: null,
  };
  return { ...base, ...family.config?.read?.(json, field, base, fail) };
}

function withDefaults(json: Record<string, unknown>, defaults: Record<string, unknown>): Record<string, unknown> {
  const out = { ...json };
  for (const [key, value] of Object.entries(defaults)) if (out[key] === undefined) out[key] = value;
  return out;
}
