import { ModelLoadError } from "./model-load-error";

/** Rotary scaling of a Llama-family config (`rope_scaling` in config.json). */
export type RopeScaling =
  | { ropeType: "linear"; factor: number }
  | {
      ropeType: "llama3";
      factor: number;
      lowFreqFactor: number;
      highFreqFactor: number;
      originalMaxPositionEmbeddings: number;
    };

/** A validated Llama-family model config (the fields of a Hugging Face config.json we use). */
export interface LlamaConfig {
  /** `model_type`: "llama", "mistral" or "qwen2". */
  modelType: string;
  hiddenSize: number;
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
}

const SUPPORTED_MODEL_TYPES = ["llama", "mistral", "qwen2"] as const;

/**
 * Validates a parsed Hugging Face config.json of a Llama-family model. Defaults follow
 * transformers: `num_key_value_heads` = heads, `head_dim` = hidden / heads, `rope_theta` 10000,
 * `tie_word_embeddings` false, `attention_bias` false (true for qwen2). Newer configs that keep
 * `rope_theta` and the scaling in `rope_parameters` are read too.
 *
 * @param json the parsed file
 * @param fileName how errors name the file (a path or "config.json")
 * @throws ModelLoadError naming the file and the field
 * @example
 * const config = parseModelConfig(JSON.parse(text), "/models/x/config.json");
 * // bad input: ModelLoadError("config.json: num_hidden_layers must be a positive integer")
 */
export function parseModelConfig(json: unknown, fileName: string): LlamaConfig {
  const fail = (detail: string): never => {
    throw new ModelLoadError(fileName, detail);
  };
  if (!isRecord(json)) return fail("expected a JSON object");
  const field = fieldReader(json, fail);

  const modelType = field.string("model_type");
  if (!(SUPPORTED_MODEL_TYPES as readonly string[]).includes(modelType)) {
    fail(`model_type ${JSON.stringify(modelType)} is not supported (supported: ${SUPPORTED_MODEL_TYPES.join(", ")})`);
  }
  const hiddenAct = field.optionalString("hidden_act") ?? "silu";
  if (hiddenAct !== "silu") fail(`hidden_act ${JSON.stringify(hiddenAct)} is not supported (only "silu")`);
  if (json.mlp_bias === true) fail("mlp_bias true is not supported");
  if (modelType === "mistral" && json.sliding_window !== undefined && json.sliding_window !== null) {
    fail("sliding_window attention is not supported (sliding_window must be null)");
  }
  if (modelType === "qwen2" && json.use_sliding_window === true) {
    fail("sliding window attention is not supported (use_sliding_window must be false)");
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
  const partial = json.partial_rotary_factor ?? ropeSource?.partial_rotary_factor;
  if (partial !== undefined && partial !== null && partial !== 1) fail("partial_rotary_factor other than 1 is not supported");
  const ropeScaling =
    json.rope_scaling !== undefined && json.rope_scaling !== null
      ? parseRopeScaling(json.rope_scaling, "rope_scaling", fail)
      : ropeSource
        ? parseRopeScaling(ropeSource, "rope_parameters", fail)
        : null;

  const maxPositionEmbeddings = field.positiveInt("max_position_embeddings");
  const vocabSize = field.positiveInt("vocab_size");
  const tieWordEmbeddings = field.optionalBoolean("tie_word_embeddings") ?? false;
  const attentionBias = modelType === "qwen2" ? true : (field.optionalBoolean("attention_bias") ?? false);
  const bosTokenIds = field.tokenIds("bos_token_id");
  const eosTokenIds = field.tokenIds("eos_token_id");
  const torchDtype = field.optionalString("torch_dtype") ?? field.optionalString("dtype") ?? null;

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
  };
}

/**
 * The config as a Hugging Face config.json object (`LlamaForCausalLM`), the inverse of
 * `parseModelConfig`.
 *
 * @example
 * fs.writeFileSync("config.json", JSON.stringify(modelConfigToJson(config), null, 2));
 */
export function modelConfigToJson(config: LlamaConfig): Record<string, unknown> {
  const ids = (list: number[]) => (list.length === 0 ? null : list.length === 1 ? list[0] : list);
  const s = config.ropeScaling;
  const ropeScaling =
    s === null
      ? null
      : s.ropeType === "linear"
        ? { rope_type: "linear", factor: s.factor }
        : {
            rope_type: "llama3",
            factor: s.factor,
            low_freq_factor: s.lowFreqFactor,
            high_freq_factor: s.highFreqFactor,
            original_max_position_embeddings: s.originalMaxPositionEmbeddings,
          };
  const architecture = { llama: "LlamaForCausalLM", mistral: "MistralForCausalLM", qwen2: "Qwen2ForCausalLM" }[config.modelType];
  return {
    architectures: [architecture ?? "LlamaForCausalLM"],
    model_type: config.modelType,
    hidden_act: "silu",
    hidden_size: config.hiddenSize,
    intermediate_size: config.intermediateSize,
    num_hidden_layers: config.numHiddenLayers,
    num_attention_heads: config.numAttentionHeads,
    num_key_value_heads: config.numKeyValueHeads,
    head_dim: config.headDim,
    rms_norm_eps: config.rmsNormEps,
    rope_theta: config.ropeTheta,
    rope_scaling: ropeScaling,
    max_position_embeddings: config.maxPositionEmbeddings,
    vocab_size: config.vocabSize,
    tie_word_embeddings: config.tieWordEmbeddings,
    attention_bias: config.attentionBias,
    mlp_bias: false,
    bos_token_id: ids(config.bosTokenIds),
    eos_token_id: ids(config.eosTokenIds),
    torch_dtype: config.torchDtype,
  };
}

/**
 * Rotary inverse frequencies (length headDim / 2) with the config's rope scaling applied,
 * computed as transformers does (`_compute_default_rope_parameters`,
 * `_compute_linear_scaling_rope_parameters`, `_compute_llama3_parameters`), each step rounded
 * to float32 as torch computes it in float32.
 *
 * Llama 3 scaling, with wavelen = 2π / invFreq, lowWavelen = original / lowFreqFactor and
 * highWavelen = original / highFreqFactor:
 *   wavelen < highWavelen            → invFreq              (high frequencies kept)
 *   wavelen > lowWavelen             → invFreq / factor     (low frequencies interpolated)
 *   otherwise, s = (original / wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor)
 *                                    → (1 - s) · invFreq / factor + s · invFreq
 *
 * @example
 * const invFreq = ropeInvFreq(config); // Float32Array(config.headDim / 2)
 */
export function ropeInvFreq(config: Pick<LlamaConfig, "headDim" | "ropeTheta" | "ropeScaling">): Float32Array {
  const f = Math.fround;
  const dim = config.headDim;
  const half = dim / 2;
  const out = new Float32Array(half);
  for (let i = 0; i < half; i++) {
    out[i] = f(1 / f(Math.pow(config.ropeTheta, f((2 * i) / dim))));
  }
  const s = config.ropeScaling;
  if (s === null) return out;
  if (s.ropeType === "linear") {
    for (let i = 0; i < half; i++) out[i] = f(out[i]! / s.factor);
    return out;
  }
  const lowFreqWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor;
  const highFreqWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor;
  for (let i = 0; i < half; i++) {
    const invFreq = out[i]!;
    const wavelen = f((2 * Math.PI) / invFreq);
    if (wavelen < highFreqWavelen) continue;
    if (wavelen > lowFreqWavelen) {
      out[i] = f(invFreq / s.factor);
      continue;
    }
    const smooth = f(f(f(s.originalMaxPositionEmbeddings / wavelen) - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor));
    out[i] = f(f(f(f(1 - smooth) * invFreq) / s.factor) + f(smooth * invFreq));
  }
  return out;
}

function parseRopeScaling(raw: unknown, key: string, fail: (detail: string) => never): RopeScaling | null {
  if (!isRecord(raw)) return fail(`${key} must be an object or null`);
  const type = raw.rope_type ?? raw.type;
  if (type === undefined || type === null || type === "default") return null;
  const num = (name: string): number => {
    const v = raw[name];
    if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) return fail(`${key}.${name} must be a positive number`);
    return v;
  };
  if (type === "linear") return { ropeType: "linear", factor: num("factor") };
  if (type === "llama3") {
    const scaling: RopeScaling = {
      ropeType: "llama3",
      factor: num("factor"),
      lowFreqFactor: num("low_freq_factor"),
      highFreqFactor: num("high_freq_factor"),
      originalMaxPositionEmbeddings: num("original_max_position_embeddings"),
    };
    if (scaling.highFreqFactor <= scaling.lowFreqFactor) fail(`${key}.high_freq_factor must be greater than low_freq_factor`);
    return scaling;
  }
  return fail(`${key}.rope_type ${JSON.stringify(type)} is not supported (supported: default, linear, llama3)`);
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

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
