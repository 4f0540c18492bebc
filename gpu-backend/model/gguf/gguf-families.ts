import { globalRope, type ModelConfig } from "../checkpoint/model-config";
import { ropeAttentionFactor } from "../checkpoint/rope-config";
import { gguf, type GgufValue } from "./gguf-writer";

/**
 * How one model family converts from a Hugging Face checkpoint to llama.cpp's GGUF, following
 * llama.cpp's converter (convert_hf_to_gguf.py and its conversion/ modules, gguf-py's
 * constants.py and tensor_mapping.py) and what its loader expects (src/llama-arch.cpp,
 * src/models/<arch>.cpp, src/llama-model.cpp) in the llama.cpp that node-llama-cpp 3.21.1 bundles.
 * One entry per llama.cpp architecture; `exportGguf` (gguf-export.ts) does the rest the same way
 * for every family: general.* and tokenizer.* metadata, F32/F16 types, alignment.
 */
export interface GgufFamily {
  /** `general.architecture`, also the prefix of the hyper-parameter keys ("llama.block_count"). */
  arch: string;
  /** config.json `model_type` values converted as this family. */
  modelTypes: readonly string[];
  /**
   * llama.cpp's rotary layout for the arch. "norm" rotates adjacent pairs (2i, 2i+1), while Hugging
   * Face rotates halves (i, i + headDim/2): the q and k projection rows (and biases) are permuted
   * per head (see `ropePermuteRows`). "neox" rotates halves like Hugging Face: no permutation.
   */
  rope: "norm" | "neox";
  /** Whether the arch loads `rope_freqs.weight` (Llama 3 rope scaling as per-dimension factors). */
  ropeFreqsTensor: boolean;
  /**
   * Throws for a config the arch cannot express in this llama.cpp (a value its loader hard-codes
   * differently); the message says which field and why.
   */
  check?(config: ModelConfig): void;
  /** Hyper-parameters, keys without the `<arch>.` prefix, in the converter's order. */
  hparams(config: ModelConfig): Record<string, GgufValue>;
  /** Tensor renames; `.weight` / `.bias` suffixes carry over. Names with {bid} are per layer. */
  tensors: readonly TensorRule[];
  /** Tensors the converter adds that the checkpoint does not have (Phi-3's LongRoPE factors). */
  extraTensors?(config: ModelConfig): { name: string; data: Float32Array }[];
}

/**
 * One Hugging Face tensor (without .weight/.bias) and its GGUF name ({bid}: the layer index).
 * A rule whose `hf` has `{xid}` (an expert index) stacks the tensors of every expert, in index
 * order, along a new leading dimension into the one GGUF tensor named by `gguf`:
 *
 *   experts.0.gate_proj [mi, h], experts.1.gate_proj [mi, h], ...  →  ffn_gate_exps [E, mi, h]
 *   (GGUF ne = {h, mi, E}, as llama.cpp's qwen3moe loader creates it)
 */
export interface TensorRule {
  hf: string;
  gguf: string;
  /** Rows permuted for a "norm" rope arch: "q" in blocks of the attention heads, "k" of the KV heads. */
  ropePermute?: "q" | "k";
  /** Applied to the values before writing (Gemma's RMSNorm weights are stored as 1 + w). */
  transform?: (data: Float32Array) => Float32Array;
}

/** The decoder tensors shared by the Llama-like families (gguf-py tensor_mapping.py). */
const LLAMA_LIKE_TENSORS: readonly TensorRule[] = [
  { hf: "model.embed_tokens", gguf: "token_embd" },
  { hf: "model.norm", gguf: "output_norm" },
  { hf: "lm_head", gguf: "output" },
  { hf: "model.layers.{bid}.input_layernorm", gguf: "blk.{bid}.attn_norm" },
  { hf: "model.layers.{bid}.self_attn.q_proj", gguf: "blk.{bid}.attn_q", ropePermute: "q" },
  { hf: "model.layers.{bid}.self_attn.k_proj", gguf: "blk.{bid}.attn_k", ropePermute: "k" },
  { hf: "model.layers.{bid}.self_attn.v_proj", gguf: "blk.{bid}.attn_v" },
  { hf: "model.layers.{bid}.self_attn.o_proj", gguf: "blk.{bid}.attn_output" },
  { hf: "model.layers.{bid}.post_attention_layernorm", gguf: "blk.{bid}.ffn_norm" },
  { hf: "model.layers.{bid}.mlp.gate_proj", gguf: "blk.{bid}.ffn_gate" },
  { hf: "model.layers.{bid}.mlp.up_proj", gguf: "blk.{bid}.ffn_up" },
  { hf: "model.layers.{bid}.mlp.down_proj", gguf: "blk.{bid}.ffn_down" },
];

const QK_NORM_TENSORS: readonly TensorRule[] = [
  { hf: "model.layers.{bid}.self_attn.q_norm", gguf: "blk.{bid}.attn_q_norm" },
  { hf: "model.layers.{bid}.self_attn.k_norm", gguf: "blk.{bid}.attn_k_norm" },
];

/** Qwen2MoeModel / Qwen3MoeModel: the router and the experts stacked per layer. */
const QWEN3_MOE_TENSORS: readonly TensorRule[] = [
  ...LLAMA_LIKE_TENSORS.filter((r) => !/ffn_(gate|up|down)$/.test(r.gguf)),
  ...QK_NORM_TENSORS,
  { hf: "model.layers.{bid}.mlp.gate", gguf: "blk.{bid}.ffn_gate_inp" },
  { hf: "model.layers.{bid}.mlp.experts.{xid}.gate_proj", gguf: "blk.{bid}.ffn_gate_exps" },
  { hf: "model.layers.{bid}.mlp.experts.{xid}.up_proj", gguf: "blk.{bid}.ffn_up_exps" },
  { hf: "model.layers.{bid}.mlp.experts.{xid}.down_proj", gguf: "blk.{bid}.ffn_down_exps" },
];

/** Gemma3Model.modify_tensors: every `*norm.weight` is stored as 1 + w (Gemma3RMSNorm scales by 1 + w). */
const plusOne = (data: Float32Array): Float32Array => Float32Array.from(data, (x) => x + 1);

/** Gemma 3's sandwich norms (tensor_mapping.py: post_attention_layernorm is ATTN_POST_NORM there). */
const GEMMA3_TENSORS: readonly TensorRule[] = [
  { hf: "model.embed_tokens", gguf: "token_embd" },
  { hf: "model.norm", gguf: "output_norm", transform: plusOne },
  { hf: "lm_head", gguf: "output" },
  { hf: "model.layers.{bid}.input_layernorm", gguf: "blk.{bid}.attn_norm", transform: plusOne },
  { hf: "model.layers.{bid}.self_attn.q_proj", gguf: "blk.{bid}.attn_q" },
  { hf: "model.layers.{bid}.self_attn.k_proj", gguf: "blk.{bid}.attn_k" },
  { hf: "model.layers.{bid}.self_attn.v_proj", gguf: "blk.{bid}.attn_v" },
  { hf: "model.layers.{bid}.self_attn.o_proj", gguf: "blk.{bid}.attn_output" },
  ...QK_NORM_TENSORS.map((r) => ({ ...r, transform: plusOne })),
  { hf: "model.layers.{bid}.post_attention_layernorm", gguf: "blk.{bid}.post_attention_norm", transform: plusOne },
  { hf: "model.layers.{bid}.pre_feedforward_layernorm", gguf: "blk.{bid}.ffn_norm", transform: plusOne },
  { hf: "model.layers.{bid}.post_feedforward_layernorm", gguf: "blk.{bid}.post_ffw_norm", transform: plusOne },
  { hf: "model.layers.{bid}.mlp.gate_proj", gguf: "blk.{bid}.ffn_gate" },
  { hf: "model.layers.{bid}.mlp.up_proj", gguf: "blk.{bid}.ffn_up" },
  { hf: "model.layers.{bid}.mlp.down_proj", gguf: "blk.{bid}.ffn_down" },
];

/** Phi-3 keeps qkv_proj and gate_up_proj fused (llama.cpp splits q|k|v and gate|up at run time). */
const PHI3_TENSORS: readonly TensorRule[] = [
  { hf: "model.embed_tokens", gguf: "token_embd" },
  { hf: "model.norm", gguf: "output_norm" },
  { hf: "lm_head", gguf: "output" },
  { hf: "model.layers.{bid}.input_layernorm", gguf: "blk.{bid}.attn_norm" },
  { hf: "model.layers.{bid}.self_attn.qkv_proj", gguf: "blk.{bid}.attn_qkv" },
  { hf: "model.layers.{bid}.self_attn.o_proj", gguf: "blk.{bid}.attn_output" },
  { hf: "model.layers.{bid}.post_attention_layernorm", gguf: "blk.{bid}.ffn_norm" },
  { hf: "model.layers.{bid}.mlp.gate_up_proj", gguf: "blk.{bid}.ffn_up" },
  { hf: "model.layers.{bid}.mlp.down_proj", gguf: "blk.{bid}.ffn_down" },
];

/** TextModel.set_gguf_parameters: what every decoder writes. */
function commonHparams(c: ModelConfig): Record<string, GgufValue> {
  const out: Record<string, GgufValue> = {
    block_count: gguf.uint32(c.numHiddenLayers),
    context_length: gguf.uint32(c.maxPositionEmbeddings),
    embedding_length: gguf.uint32(c.hiddenSize),
    feed_forward_length: gguf.uint32(c.intermediateSize),
    "attention.head_count": gguf.uint32(c.numAttentionHeads),
    "attention.head_count_kv": gguf.uint32(c.numKeyValueHeads),
    "rope.freq_base": gguf.float32(c.ropeTheta),
    "attention.layer_norm_rms_epsilon": gguf.float32(c.rmsNormEps),
    "attention.key_length": gguf.uint32(c.headDim),
    "attention.value_length": gguf.uint32(c.headDim),
  };
  if (c.ropeScaling?.ropeType === "linear") {
    out["rope.scaling.type"] = gguf.string("linear");
    out["rope.scaling.factor"] = gguf.float32(c.ropeScaling.factor);
  }
  return out;
}

const refuse = (c: ModelConfig, detail: string): never => {
  throw new Error(`GGUF export: ${c.modelType} ${detail}`);
};

/** The families `exportGguf` converts, by llama.cpp architecture. */
export const GGUF_FAMILIES: readonly GgufFamily[] = [
  {
    // conversion/llama.py LlamaModel (LlamaForCausalLM, MistralForCausalLM): LLM_ARCH_LLAMA.
    arch: "llama",
    modelTypes: ["llama", "mistral"],
    rope: "norm",
    ropeFreqsTensor: true,
    hparams: (c) => ({
      ...commonHparams(c),
      vocab_size: gguf.uint32(c.vocabSize),
      "rope.dimension_count": gguf.uint32(c.headDim),
    }),
    tensors: LLAMA_LIKE_TENSORS,
  },
  {
    // conversion/qwen.py Qwen2Model: LLM_ARCH_QWEN2, NEOX rope, q/k/v biases.
    arch: "qwen2",
    modelTypes: ["qwen2"],
    rope: "neox",
    ropeFreqsTensor: false,
    hparams: commonHparams,
    tensors: LLAMA_LIKE_TENSORS,
  },
  {
    // conversion/qwen.py Qwen3Model (a Qwen2Model): LLM_ARCH_QWEN3, per-head q/k RMSNorm.
    arch: "qwen3",
    modelTypes: ["qwen3"],
    rope: "neox",
    ropeFreqsTensor: false,
    hparams: commonHparams,
    tensors: [...LLAMA_LIKE_TENSORS, ...QK_NORM_TENSORS],
  },
  {
    // conversion/qwen.py Qwen3MoeModel (a Qwen2MoeModel): LLM_ARCH_QWEN3MOE. src/models/qwen3moe.cpp
    // makes every layer sparse and always renormalizes the top-k weights (build_moe_ffn norm_w = true).
    arch: "qwen3moe",
    modelTypes: ["qwen3_moe"],
    rope: "neox",
    ropeFreqsTensor: false,
    check(c) {
      const moe = c.moe ?? refuse(c, "config has no mixture of experts");
      if (!moe.normTopkProb) refuse(c, "norm_topk_prob false: llama.cpp's qwen3moe always renormalizes the chosen experts' weights");
      if (moe.mlpOnlyLayers.length > 0 || moe.decoderSparseStep !== 1) refuse(c, "dense layers (mlp_only_layers / decoder_sparse_step): llama.cpp's qwen3moe makes every layer sparse");
    },
    hparams: (c) => ({
      ...commonHparams(c),
      expert_count: gguf.uint32(c.moe!.numExperts),
      expert_used_count: gguf.uint32(c.moe!.numExpertsPerTok),
      expert_feed_forward_length: gguf.uint32(c.moe!.moeIntermediateSize),
    }),
    tensors: QWEN3_MOE_TENSORS,
  },
  {
    // conversion/gemma.py Gemma3Model: LLM_ARCH_GEMMA3 (src/models/gemma3.cpp).
    arch: "gemma3",
    modelTypes: ["gemma3_text"],
    rope: "neox",
    ropeFreqsTensor: false,
    check(c) {
      // gemma3.cpp: f_attention_scale = 1/sqrt(head_dim), or 1/sqrt(hidden/heads) for the 62-layer 27B.
      const scalar = c.numHiddenLayers === 62 ? c.hiddenSize / c.numAttentionHeads : c.headDim;
      if (c.queryPreAttnScalar !== scalar) {
        refuse(c, `query_pre_attn_scalar ${c.queryPreAttnScalar}: llama.cpp derives the attention scale from ${c.numHiddenLayers === 62 ? "hidden_size / heads" : "head_dim"} (${scalar}) and reads no query_pre_attn_scalar`);
      }
      gemmaSlidingPeriod(c);
    },
    hparams: (c) => {
      const out = commonHparams(c);
      const period = gemmaSlidingPeriod(c);
      if (period !== null) {
        out["attention.sliding_window"] = gguf.uint32(c.slidingWindow!);
        // Not written by the converter (the loader defaults to 6); this loader reads it.
        if (period !== 6) out["attention.sliding_window_pattern"] = gguf.uint32(period);
        out["rope.freq_base_swa"] = gguf.float32(c.ropeLocalTheta ?? 10000);
      }
      return out;
    },
    tensors: GEMMA3_TENSORS,
  },
  {
    // conversion/phi.py Phi3MiniModel: LLM_ARCH_PHI3 (src/models/phi3.cpp). The converter writes
    // no key/value length: llama.cpp takes head_dim = hidden / heads.
    arch: "phi3",
    modelTypes: ["phi3"],
    rope: "neox",
    ropeFreqsTensor: false,
    check(c) {
      if (c.headDim * c.numAttentionHeads !== c.hiddenSize) refuse(c, `head_dim ${c.headDim} x ${c.numAttentionHeads} heads differs from hidden_size ${c.hiddenSize} (llama.cpp's phi3 takes head_dim = hidden / heads)`);
      if (c.ropeScaling !== null && c.ropeScaling.ropeType !== "longrope") refuse(c, `rope scaling ${c.ropeScaling.ropeType}: llama.cpp's phi3 loads LongRoPE factors only`);
    },
    hparams: (c) => {
      const rope = globalRope(c);
      const out: Record<string, GgufValue> = {
        context_length: gguf.uint32(c.maxPositionEmbeddings),
        "rope.scaling.original_context_length": gguf.uint32(c.ropeScaling?.ropeType === "longrope" ? c.ropeScaling.originalMaxPositionEmbeddings : c.maxPositionEmbeddings),
        embedding_length: gguf.uint32(c.hiddenSize),
        feed_forward_length: gguf.uint32(c.intermediateSize),
        block_count: gguf.uint32(c.numHiddenLayers),
        "attention.head_count": gguf.uint32(c.numAttentionHeads),
        "attention.head_count_kv": gguf.uint32(c.numKeyValueHeads),
        "attention.layer_norm_rms_epsilon": gguf.float32(c.rmsNormEps),
        "rope.dimension_count": gguf.uint32(rope.rotaryDim),
        "rope.freq_base": gguf.float32(c.ropeTheta),
        // Read and then ignored by this llama.cpp ("Phi SWA is currently disabled").
        "attention.sliding_window": gguf.uint32(c.slidingWindow ?? 0),
      };
      if (c.ropeScaling?.ropeType === "longrope") out["rope.scaling.attn_factor"] = gguf.float32(ropeAttentionFactor(rope));
      return out;
    },
    tensors: PHI3_TENSORS,
    extraTensors(c) {
      const s = c.ropeScaling;
      if (s?.ropeType !== "longrope") return [];
      return [
        { name: "rope_factors_long.weight", data: Float32Array.from(s.longFactor) },
        { name: "rope_factors_short.weight", data: Float32Array.from(s.shortFactor) },
      ];
    },
  },
];

/**
 * Gemma 3's sliding layers as llama.cpp's period (`set_swa_pattern`: layer il slides when
 * il % period < period - 1, i.e. every period-th layer is global; 0: every layer slides), or
 * null when no layer slides.
 *
 * @throws Error when the layer types follow no such period
 */
export function gemmaSlidingPeriod(c: ModelConfig): number | null {
  const n = c.numHiddenLayers;
  if (c.slidingWindow === null || c.layerTypes.every((t) => t === "full_attention")) return null;
  const candidates = [0, ...Array.from({ length: n }, (_, i) => i + 1)];
  for (const p of candidates) {
    if (c.layerTypes.every((t, il) => (t === "sliding_attention") === (p === 0 || il % p < p - 1))) return p;
  }
  return refuse(c, `layer_types ${JSON.stringify(c.layerTypes)} are not "every k-th layer global", the only pattern llama.cpp's gemma3 expresses`);
}

/**
 * The family for a config's model_type.
 *
 * @throws Error naming the model_type when no family converts it
 * @example
 * ggufFamilyOf(config).arch; // "llama" for model_type "mistral"
 */
export function ggufFamilyOf(config: Pick<ModelConfig, "modelType">): GgufFamily {
  const family = GGUF_FAMILIES.find((f) => f.modelTypes.includes(config.modelType));
  if (!family) {
    const known = GGUF_FAMILIES.flatMap((f) => f.modelTypes).join(", ");
    throw new Error(`GGUF export: model_type ${JSON.stringify(config.modelType)} has no GGUF family (known: ${known})`);
  }
  return family;
}

/**
 * The rows of a q or k projection (or bias) of a Hugging Face checkpoint reordered for llama.cpp's
 * "norm" rotary layout (LlamaModel.permute in the converter). Per head of `headDim` rows:
 *
 *   HF rows:    [ x0 x1 ... x(d/2-1) | y0 y1 ... y(d/2-1) ]     rotated pairs (x_i, y_i)
 *   GGUF rows:  [ x0 y0 x1 y1 ... x(d/2-1) y(d/2-1) ]            new row 2i = x_i, 2i+1 = y_i
 *
 * @example
 * ropePermuteRows(new Float32Array([0, 1, 2, 3]), 1, 4, 1); // [0, 2, 1, 3]
 */
export function ropePermuteRows(data: Float32Array, numHeads: number, headDim: number, cols: number): Float32Array {
  if (data.length !== numHeads * headDim * cols) throw new Error(`ropePermuteRows: ${data.length} values for ${numHeads} x ${headDim} x ${cols}`);
  const half = headDim / 2;
  const out = new Float32Array(data.length);
  for (let h = 0; h < numHeads; h++) {
    for (let i = 0; i < half; i++) {
      for (let j = 0; j < 2; j++) {
        const src = (h * headDim + j * half + i) * cols;
        const dst = (h * headDim + 2 * i + j) * cols;
        out.set(data.subarray(src, src + cols), dst);
      }
    }
  }
  return out;
}

/**
 * Llama 3 rope scaling as llama.cpp's `rope_freqs.weight`: per rotary dimension pair i, the factor
 * f_i that divides the default frequency (llama.cpp: theta_i = pos · base^(-2i/d) / f_i), so
 * f_i = invFreqDefault_i / invFreqScaled_i with `ropeInvFreq`'s scaled frequencies:
 *
 *   wavelen < original / highFreqFactor  → 1
 *   wavelen > original / lowFreqFactor   → factor
 *   otherwise                            → 1 / ((1 - s) / factor + s),
 *                                          s = (original / wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor)
 *
 * (LlamaModel.generate_extra_tensors; the converter takes `original_max_position_embeddings`
 * from the top level of config.json, default 8192; we take rope_scaling's, as transformers does.)
 *
 * @example
 * llama3RopeFactors(demoModelConfig()); // Float32Array(32): 1 ... 8
 */
export function llama3RopeFactors(config: Pick<ModelConfig, "headDim" | "ropeTheta" | "ropeScaling">): Float32Array {
  const s = config.ropeScaling;
  if (s?.ropeType !== "llama3") throw new Error("llama3RopeFactors: the config has no llama3 rope scaling");
  const f = Math.fround;
  const half = config.headDim / 2;
  const out = new Float32Array(half);
  const low = s.originalMaxPositionEmbeddings / s.lowFreqFactor;
  const high = s.originalMaxPositionEmbeddings / s.highFreqFactor;
  for (let i = 0; i < half; i++) {
    const invFreq = f(1 / f(Math.pow(config.ropeTheta, f((2 * i) / config.headDim))));
    const wavelen = (2 * Math.PI) / invFreq;
    if (wavelen < high) out[i] = 1;
    else if (wavelen > low) out[i] = s.factor;
    else {
      const smooth = (s.originalMaxPositionEmbeddings / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
      out[i] = 1 / ((1 - smooth) / s.factor + smooth);
    }
  }
  return out;
}
