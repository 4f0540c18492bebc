import type { GgufMetadata } from "./gguf-writer";

/**
 * A GGUF file's hyper-parameters as a family reads them back into config.json keys (the inverse of
 * its `GgufFamily.hparams`): `<arch>.`-prefixed keys by their short name, tensor shapes, and small
 * tensors' values (Llama 3's rope_freqs, Phi-3's LongRoPE factors).
 */
export interface GgufHparams {
  arch: string;
  /** The value of `<arch>.<key>`, or undefined. */
  value(key: string): unknown;
  /** A number at `<arch>.<key>`, else `fallback`. @throws Error when absent without a fallback, or not a number */
  num(key: string, fallback?: number): number;
  /** Row-major shape of a tensor, or undefined when the file has none of that name. */
  shape(tensor: string): number[] | undefined;
  /** A tensor's values as float32. */
  read(tensor: string): Float32Array;
}

/**
 * The hyper-parameters of `arch` over a parsed file's metadata and tensors.
 *
 * @example ggufHparams(file.metadata, "llama", shapes, read).num("block_count"); // 30
 */
export function ggufHparams(metadata: GgufMetadata, arch: string, shapes: Map<string, number[]>, read: (tensor: string) => Float32Array): GgufHparams {
  const value = (key: string) => metadata[`${arch}.${key}`]?.value;
  return {
    arch,
    value,
    num(key, fallback) {
      const v = value(key);
      if (v === undefined) {
        if (fallback === undefined) throw new Error(`metadata ${arch}.${key} is missing`);
        return fallback;
      }
      if (typeof v !== "number") throw new Error(`metadata ${arch}.${key} must be a number, got ${JSON.stringify(v)}`);
      return v;
    },
    shape: (tensor) => shapes.get(tensor),
    read,
  };
}

/**
 * The config.json keys every decoder's GGUF carries (TextModel.set_gguf_parameters, the inverse of
 * `commonHparams`): head_dim from key_length or hidden / heads; rms_norm_eps widened from float32
 * to the nearest short decimal (1e-6, not 9.999999974752427e-7); vocab_size from the embedding
 * table; tie_word_embeddings when there is no output.weight; linear rope scaling.
 */
export function commonConfigJson(h: GgufHparams): Record<string, unknown> {
  const hidden = h.num("embedding_length");
  const heads = h.num("attention.head_count");
  const embed = h.shape("token_embd.weight");
  const out: Record<string, unknown> = {
    hidden_size: hidden,
    intermediate_size: h.num("feed_forward_length"),
    num_hidden_layers: h.num("block_count"),
    num_attention_heads: heads,
    num_key_value_heads: h.num("attention.head_count_kv", heads),
    head_dim: h.num("attention.key_length", hidden / heads),
    rms_norm_eps: shortFloat(h.num("attention.layer_norm_rms_epsilon")),
    rope_theta: shortFloat(h.num("rope.freq_base", 10000)),
    max_position_embeddings: h.num("context_length"),
    vocab_size: embed?.[0] ?? h.num("vocab_size"),
    tie_word_embeddings: h.shape("output.weight") === undefined,
    attention_bias: h.shape("blk.0.attn_q.bias") !== undefined,
  };
  if (h.value("rope.scaling.type") === "linear") out.rope_scaling = { rope_type: "linear", factor: shortFloat(h.num("rope.scaling.factor")) };
  return out;
}

/**
 * The shortest decimal that rounds to the same float32 (GGUF stores eps and rope bases as float32:
 * 1e-6 reads back as 9.999999974752427e-7; transformers computes with the decimal).
 *
 * @example shortFloat(Math.fround(1e-6)); // 1e-6
 */
export function shortFloat(x: number): number {
  const f = Math.fround(x);
  for (let digits = 1; digits <= 17; digits++) {
    const candidate = Number(f.toPrecision(digits));
    if (Math.fround(candidate) === f) return candidate;
  }
  return x;
}
