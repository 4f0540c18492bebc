import { ModelLoadError } from "./model-load-error";
import { MODEL_TYPES, familyTraits, isModelType, type ModelType } from "./model-family";
import { parseRopeScaling, type RopeParams, type RopeScaling } from "./rope-config";

export type { RopeScaling } from "./rope-config";

/** How a layer attends: to every earlier token, or only to the last `slidingWindow` ones. */
export type LayerType = "full_attention" | "sliding_attention";

/** The mixture-of-experts settings of a `qwen3_moe` config. */
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

/** A validated model config (the fields of a Hugging Face config.json the engine uses). */
export interface ModelConfig {
  modelType: ModelType;
  hiddenSize: number;
  /** The dense MLP's width (for qwen3_moe: of its dense layers only). */
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
  /** Bias on the q/k/v projections (always true for qwen2). */
  attentionBias: boolean;
  /** `bos_token_id`, as a list (empty when absent or null). */
  bosTokenIds: number[];
  /** `eos_token_id`, as a list (empty when absent or null). */
  eosTokenIds: number[];
  /** `torch_dtype` (or `dtype`), e.g. "bfloat16"; null when absent. */
  torchDtype: string | null;
  /** `hidden_act` (`hidden_activation` for Gemma): SwiGLU's silu or GeGLU's tanh-approximated GELU. */
  hiddenAct: "silu" | "gelu_pytorch_tanh";
  /** Share of each head's dimensions that rotate (Phi-4-mini: 0.75). */
  partialRotaryFactor: number;
  /** Window of the sliding-window layers (null: none). */
  slidingWindow: number | null;
  /** One per layer. */
  layerTypes: LayerType[];
  /** Gemma 3: rotary base of the sliding-window layers (`rope_local_base_freq`; no scaling there). */
  ropeLocalTheta: number | null;
  /** Gemma 3: attention scores are scaled by query_pre_attn_scalar^-0.5 instead of head_dim^-0.5. */
  queryPreAttnScalar: number | null;
  moe: MoeConfig | null;
  /** Set when config.json wraps the text model (Gemma 3's multimodal `gemma3`, read from `text_config`). */
  wrapperModelType: string | null;
}

/**
 * Validates a parsed Hugging Face config.json of a supported family (see `MODEL_TYPES`).
 * Defaults follow transformers: `num_key_value_heads` = heads, `head_dim` = hidden / heads,
 * `rope_theta` 10000, `tie_word_embeddings` false (true for Gemma), `attention_bias` false (true for
 * qwen2). Newer configs that keep `rope_theta` and the scaling in `rope_parameters` are read too. A
 * Gemma 3 multimodal config (`gemma3`) is read through its `text_config`.
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
  if (json.model_type === "gemma3") {
    const text = json.text_config;
    if (!isRecord(text)) return fail("text_config must be an object (a gemma3 config keeps its text model there)");
    const inner: Record<string, unknown> = { model_type: "gemma3_text", ...text };
    for (const key of ["bos_token_id", "eos_token_id", "torch_dtype", "dtype"]) if (inner[key] === undefined && json[key] !== undefined) inner[key] = json[key];
    const prefixed = (detail: string): never => fail(`text_config.${detail}`);
    return { ...parseTextConfig(inner, prefixed), wrapperModelType: "gemma3" };
  }
  return parseTextConfig(json, fail);
}

/**
 * transformers' Gemma3TextConfig defaults: a multimodal Gemma 3 config.json lists only the fields
 * of its text_config that differ from them.
 */
const GEMMA3_TEXT_DEFAULTS: Record<string, unknown> = {
  vocab_size: 262208,
  hidden_size: 2304,
  intermediate_size: 9216,
  num_hidden_layers: 26,
  num_attention_heads: 8,
  num_key_value_heads: 4,
  head_dim: 256,
  max_position_embeddings: 131072,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000,
  sliding_window: 4096,
};

function parseTextConfig(raw: Record<string, unknown>, fail: (detail: string) => never): ModelConfig {
  const json = raw.model_type === "gemma3_text" ? withDefaults(raw, GEMMA3_TEXT_DEFAULTS) : raw;
  const field = fieldReader(json, fail);
  const rawType = field.string("model_type");
  if (!isModelType(rawType)) return fail(`model_type ${JSON.stringify(rawType)} is not supported (supported: ${[...MODEL_TYPES, "gemma3"].join(", ")})`);
  const modelType: ModelType = rawType;
  const traits = familyTraits(modelType);

  const actKey = traits.gemma && json.hidden_activation !== undefined ? "hidden_activation" : "hidden_act";
  const hiddenAct = field.optionalString(actKey) ?? (traits.gemma ? "gelu_pytorch_tanh" : "silu");
  const allowedAct = traits.gemma ? "gelu_pytorch_tanh" : "silu";
  if (hiddenAct !== allowedAct) fail(`${actKey} ${JSON.stringify(hiddenAct)} is not supported (only "${allowedAct}" for ${modelType})`);
  if (json.mlp_bias === true) fail("mlp_bias true is not supported");
  if ((modelType === "qwen2" || modelType === "qwen3" || modelType === "qwen3_moe") && json.use_sliding_window === true) {
    fail("sliding window attention is not supported (use_sliding_window must be false)");
  }
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
  const ropeThetaRaw = json.rope_theta ?? ropeSource?.rope_theta;
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

  const maxPositionEmbeddings = field.positiveInt("max_position_embeddings");
  const vocabSize = field.positiveInt("vocab_size");
  const tieWordEmbeddings = field.optionalBoolean("tie_word_embeddings") ?? traits.defaultTieWordEmbeddings;
  const attentionBias = traits.alwaysAttentionBias ? true : (field.optionalBoolean("attention_bias") ?? false);
  const bosTokenIds = field.tokenIds("bos_token_id");
  const eosTokenIds = field.tokenIds("eos_token_id");
  const torchDtype = field.optionalString("torch_dtype") ?? field.optionalString("dtype") ?? null;

  const { slidingWindow, layerTypes } = parseLayerTypes(json, modelType, numHiddenLayers, maxPositionEmbeddings, field, fail);
  const gemma = traits.gemma;
  const ropeLocalTheta = gemma ? (field.optionalPositiveNumber("rope_local_base_freq") ?? 10000) : null;
  const queryPreAttnScalar = gemma ? (field.optionalPositiveNumber("query_pre_attn_scalar") ?? 256) : null;
  const moe = modelType === "qwen3_moe" ? parseMoe(json, numHiddenLayers, field, fail) : null;

  return {
    modelType,
    hiddenSize,
    intermediateSize,
    numHiddenLayers,
    numAttentionHeads,
    numKeyValueHeads,
    headDim,
    rmsNormEps,
    ropeTheta,
    ropeScaling,
    maxPositionEmbeddings,
    vocabSize,
    tieWordEmbeddings,
    attentionBias,
    bosTokenIds,
    eosTokenIds,
    torchDtype,
    hiddenAct: hiddenAct as ModelConfig["hiddenAct"],
    partialRotaryFactor,
    slidingWindow,
    layerTypes,
    ropeLocalTheta,
    queryPreAttnScalar,
    moe,
    wrapperModelType: null,
  };
}

/**
 * Which layers slide: Gemma 3 by `layer_types` or every `sliding_window_pattern`-th layer global
 * (default 6); mistral and phi3 slide every layer when `sliding_window` is set and shorter than
 * the context. A window as long as the context is no window.
 */
function parseLayerTypes(
  json: Record<string, unknown>,
  modelType: ModelType,
  numLayers: number,
  maxPositions: number,
  field: ReturnType<typeof fieldReader>,
  fail: (detail: string) => never,
): { slidingWindow: number | null; layerTypes: LayerType[] } {
  const allFull = (): LayerType[] => Array.from({ length: numLayers }, () => "full_attention");
  if (modelType === "gemma3_text") {
    const slidingWindow = field.positiveInt("sliding_window");
    const raw = json.layer_types;
    if (raw !== undefined && raw !== null) {
      if (!Array.isArray(raw) || raw.length !== numLayers || !raw.every((t) => t === "full_attention" || t === "sliding_attention")) {
        return fail(`layer_types must list "full_attention" or "sliding_attention" for each of the ${numLayers} layers`);
      }
      return { slidingWindow, layerTypes: raw as LayerType[] };
    }
    const pattern = field.optionalPositiveInt("sliding_window_pattern") ?? 6;
    return { slidingWindow, layerTypes: Array.from({ length: numLayers }, (_, i) => ((i + 1) % pattern === 0 ? "full_attention" : "sliding_attention")) };
  }
  if (modelType === "mistral" || modelType === "phi3") {
    const window = field.optionalPositiveInt("sliding_window");
    if (window === undefined || window >= maxPositions) return { slidingWindow: null, layerTypes: allFull() };
    return { slidingWindow: window, layerTypes: Array.from({ length: numLayers }, () => "sliding_attention") };
  }
  return { slidingWindow: null, layerTypes: allFull() };
}

function parseMoe(json: Record<string, unknown>, numLayers: number, field: ReturnType<typeof fieldReader>, fail: (detail: string) => never): MoeConfig {
  const numExperts = field.positiveInt("num_experts");
  const numExpertsPerTok = field.positiveInt("num_experts_per_tok");
  if (numExpertsPerTok > numExperts) fail(`num_experts_per_tok (${numExpertsPerTok}) must not exceed num_experts (${numExperts})`);
  const raw = json.mlp_only_layers ?? [];
  if (!Array.isArray(raw) || !raw.every((l) => typeof l === "number" && Number.isInteger(l) && l >= 0 && l < numLayers)) {
    return fail(`mlp_only_layers must be a list of layer indices below ${numLayers}`);
  }
  return {
    numExperts,
    numExpertsPerTok,
    moeIntermediateSize: field.positiveInt("moe_intermediate_size"),
    normTopkProb: field.optionalBoolean("norm_topk_prob") ?? false,
    decoderSparseStep: field.optionalPositiveInt("decoder_sparse_step") ?? 1,
    mlpOnlyLayers: raw as number[],
  };
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

function fieldReader(json: Record<string, unknown>, fail: (detail: string) => never) {
  const present = (name: string) => json[name] !== undefined && json[name] !== null;
  const isPositiveInt = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v > 0;
  return {
    string(name: string): string {
      const v = json[name];
      if (typeof v !== "string" || v === "") return fail(`${name} must be a non-empty string`);
      return v;
    },
    optionalString(name: string): string | undefined {
      if (!present(name)) return undefined;
      const v = json[name];
      if (typeof v !== "string") return fail(`${name} must be a string`);
      return v;
    },
    positiveInt(name: string): number {
      const v = json[name];
      if (!isPositiveInt(v)) return fail(`${name} must be a positive integer`);
      return v;
    },
    optionalPositiveInt(name: string): number | undefined {
      if (!present(name)) return undefined;
      const v = json[name];
      if (!isPositiveInt(v)) return fail(`${name} must be a positive integer`);
      return v;
    },
    optionalPositiveNumber(name: string): number | undefined {
      if (!present(name)) return undefined;
      const v = json[name];
      if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) return fail(`${name} must be a positive number`);
      return v;
    },
    positiveNumber(name: string): number {
      const v = json[name];
      if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) return fail(`${name} must be a positive number`);
      return v;
    },
    optionalBoolean(name: string): boolean | undefined {
      if (!present(name)) return undefined;
      const v = json[name];
      if (typeof v !== "boolean") return fail(`${name} must be true or false`);
      return v;
    },
    tokenIds(name: string): number[] {
      if (!present(name)) return [];
      const v = json[name];
      const list = Array.isArray(v) ? v : [v];
      if (!list.every((x) => typeof x === "number" && Number.isInteger(x) && x >= 0)) {
        return fail(`${name} must be a token id or a list of token ids`);
      }
      return list as number[];
    },
  };
}

function withDefaults(json: Record<string, unknown>, defaults: Record<string, unknown>): Record<string, unknown> {
  const out = { ...json };
  for (const [key, value] of Object.entries(defaults)) if (out[key] === undefined) out[key] = value;
  return out;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
