import type { ModelConfig } from "../config/model-config";
import { gguf, type GgufValue } from "./gguf-writer";
import { commonConfigJson, shortFloat, type GgufHparams } from "./gguf-hparams";

/**
 * How one model family converts from a Hugging Face checkpoint to llama.cpp's GGUF, following
 * llama.cpp's converter (convert_hf_to_gguf.py and its conversion/ modules, gguf-py's
 * constants.py and tensor_mapping.py) and what its loader expects (src/llama-arch.cpp,
 * src/models/<arch>.cpp, src/llama-model.cpp) in the llama.cpp that node-llama-cpp 3.21.1 bundles.
 * Each family file (model/families/<family>.ts) declares its own; families of one llama.cpp
 * architecture share one. `exportGguf` (export/gguf-export.ts) does the rest the same way for
 * every family: general.* and tokenizer.* metadata, F32/F16 types, alignment.
 */
export interface GgufFamily {
  /** `general.architecture`, also the prefix of the hyper-parameter keys ("llama.block_count"). */
  arch: string;
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
  /**
   * The config.json keys (without model_type) a GGUF file of the arch stands for: the inverse of
   * `hparams` (and of `extraTensors` / rope_freqs), read by the GGUF loader (checkpoint/gguf-checkpoint.ts)
   * and then validated by `parseModelConfig` as a folder's config.json is.
   */
  configJson(h: GgufHparams): Record<string, unknown>;
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
  /** The inverse of `transform`, applied when reading a GGUF file. */
  untransform?: (data: Float32Array) => Float32Array;
}

/** The decoder tensors shared by the Llama-like families (gguf-py tensor_mapping.py). */
export const LLAMA_LIKE_TENSORS: readonly TensorRule[] = [
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

/** Per-head q/k RMSNorm weights. */
export const QK_NORM_TENSORS: readonly TensorRule[] = [
  { hf: "model.layers.{bid}.self_attn.q_norm", gguf: "blk.{bid}.attn_q_norm" },
  { hf: "model.layers.{bid}.self_attn.k_norm", gguf: "blk.{bid}.attn_k_norm" },
];

export { commonConfigJson } from "./gguf-hparams";

/** TextModel.set_gguf_parameters: what every decoder writes. */
export function commonHparams(c: ModelConfig): Record<string, GgufValue> {
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

/**
 * config.json keys of a Llama-like GGUF: `commonConfigJson`, and Llama 3 rope scaling recovered
 * from rope_freqs.weight (see `llama3ScalingOf`).
 */
export function llamaConfigJson(h: GgufHparams): Record<string, unknown> {
  const out = commonConfigJson(h);
  if (h.shape("rope_freqs.weight") !== undefined) {
    out.rope_scaling = llama3ScalingOf(h.read("rope_freqs.weight"), out.head_dim as number, out.rope_theta as number, h.num("rope.scaling.original_context_length", 8192));
  }
  return out;
}

/**
 * The Llama 3 rope scaling whose `llama3RopeFactors` are `factors` (llama.cpp's rope_freqs.weight):
 * the factor is the largest one; low/high frequency factors and the original context are searched
 * among the values Llama 3.x ships (1 and 4, 8192) and their neighbours.
 *
 * @throws Error when no candidate reproduces the factors (the message says so)
 */
export function llama3ScalingOf(factors: Float32Array, headDim: number, ropeTheta: number, original: number): Record<string, unknown> {
  const factor = shortFloat(Math.max(...factors));
  for (const originalMaxPositionEmbeddings of [original, 8192, 4096, 2048, 16384, 32768]) {
    for (const lowFreqFactor of [1, 0.5, 2, 4]) {
      for (const highFreqFactor of [4, 2, 8, 16, 32]) {
        if (highFreqFactor <= lowFreqFactor) continue;
        const ropeScaling = { ropeType: "llama3" as const, factor, lowFreqFactor, highFreqFactor, originalMaxPositionEmbeddings };
        const candidate = llama3RopeFactors({ headDim, ropeTheta, ropeScaling });
        if (candidate.length === factors.length && candidate.every((x, i) => Math.abs(x - factors[i]!) <= 1e-5 * Math.abs(x))) {
          return { rope_type: "llama3", factor, low_freq_factor: lowFreqFactor, high_freq_factor: highFreqFactor, original_max_position_embeddings: originalMaxPositionEmbeddings };
        }
      }
    }
  }
  throw new Error(`rope_freqs.weight (${factors.length} factors up to ${factor}) matches no Llama 3 rope scaling (low/high frequency factors, original context) this loader tries`);
}

/**
 * Throws the export's error for a config the arch cannot express.
 *
 * @example if (c.headDim !== 64) refuse(c, "head_dim must be 64");
 */
export function refuse(c: Pick<ModelConfig, "modelType">, detail: string): never {
  throw new Error(`GGUF export: ${c.modelType} ${detail}`);
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

/** The inverse of `ropePermuteRows`: llama.cpp's interleaved rotary rows back to Hugging Face's halves. */
export function ropeUnpermuteRows(data: Float32Array, numHeads: number, headDim: number, cols: number): Float32Array {
  return permuteHeadRows(data, numHeads, headDim, cols, (h, i, j) => [(h * headDim + 2 * i + j) * cols, (h * headDim + j * headDim / 2 + i) * cols]);
}

/** Rows moved per head: `at(h, i, j)` gives [source, destination] offsets of row pair element j of pair i. */
export function permuteHeadRows<T extends Float32Array | Uint8Array>(data: T, numHeads: number, headDim: number, cols: number, at: (h: number, i: number, j: number) => [number, number]): T {
  if (data.length !== numHeads * headDim * cols) throw new Error(`rope rows: ${data.length} values for ${numHeads} x ${headDim} x ${cols}`);
  const out = new (data.constructor as new (n: number) => T)(data.length);
  for (let h = 0; h < numHeads; h++) {
    for (let i = 0; i < headDim / 2; i++) {
      for (let j = 0; j < 2; j++) {
        const [src, dst] = at(h, i, j);
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

/**
 * The GGUF name of a Hugging Face tensor name under a family's table; `xid` is the expert index
 * when the rule stacks experts.
 *
 * @throws Error when no rule matches
 * @example
 * mapTensorName(familyOf(config.modelType).gguf, "model.layers.3.self_attn.q_proj.bias").gguf; // "blk.3.attn_q.bias"
 */
export function mapTensorName(family: GgufFamily, name: string): { gguf: string; rule: TensorRule; xid?: number } {
  const dot = name.lastIndexOf(".");
  const base = name.slice(0, dot);
  const suffix = name.slice(dot);
  if (suffix === ".weight" || suffix === ".bias") {
    for (const rule of family.tensors) {
      const pattern = new RegExp(`^${rule.hf.replaceAll(".", "\\.").replace("{bid}", "(?<bid>\\d+)").replace("{xid}", "(?<xid>\\d+)")}$`);
      const m = pattern.exec(base);
      if (!m) continue;
      const bid = m.groups?.bid;
      const xid = m.groups?.xid;
      const gguf = (bid === undefined ? rule.gguf : rule.gguf.replace("{bid}", bid)) + suffix;
      return xid === undefined ? { gguf, rule } : { gguf, rule, xid: Number(xid) };
    }
  }
  throw new Error(`no ${family.arch} GGUF name for tensor ${name}`);
}
