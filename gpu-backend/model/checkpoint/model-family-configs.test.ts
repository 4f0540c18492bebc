import { describe, expect, it } from "vitest";
import { decoderSpecOf } from "./decoder-spec-of";
import { parseModelConfig } from "./parse-model-config";
import { modelConfigToJson } from "./model-config-json";
import { ropeAttentionFactor, ropeInvFreq } from "../config/rope-config";
import { ModelLoadError } from "./model-load-error";

/**
 * The config.json files of the families as published (fields the engine reads; long factor lists
 * shortened to their published length with stand-in values), parsed and turned into decoder specs.
 */
const qwen3_0_6b = {
  architectures: ["Qwen3ForCausalLM"], model_type: "qwen3", attention_bias: false, bos_token_id: 151643, eos_token_id: 151645,
  head_dim: 128, hidden_act: "silu", hidden_size: 1024, intermediate_size: 3072, max_position_embeddings: 40960, max_window_layers: 28,
  num_attention_heads: 16, num_hidden_layers: 28, num_key_value_heads: 8, rms_norm_eps: 1e-6, rope_scaling: null, rope_theta: 1000000,
  sliding_window: null, tie_word_embeddings: true, torch_dtype: "bfloat16", use_sliding_window: false, vocab_size: 151936,
};
const qwen3_30b_a3b = {
  ...qwen3_0_6b, architectures: ["Qwen3MoeForCausalLM"], model_type: "qwen3_moe", hidden_size: 2048, intermediate_size: 6144, num_hidden_layers: 48,
  num_attention_heads: 32, num_key_value_heads: 4, tie_word_embeddings: false, moe_intermediate_size: 768, num_experts: 128,
  num_experts_per_tok: 8, norm_topk_prob: true, decoder_sparse_step: 1, mlp_only_layers: [], router_aux_loss_coef: 0.001,
};
const gemma3_1b = {
  architectures: ["Gemma3ForCausalLM"], model_type: "gemma3_text", attention_bias: false, attn_logit_softcapping: null, bos_token_id: 2,
  eos_token_id: [1, 106], final_logit_softcapping: null, head_dim: 256, hidden_activation: "gelu_pytorch_tanh", hidden_size: 1152,
  intermediate_size: 6912, max_position_embeddings: 32768, num_attention_heads: 4, num_hidden_layers: 26, num_key_value_heads: 1,
  query_pre_attn_scalar: 256, rms_norm_eps: 1e-6, rope_local_base_freq: 10000, rope_scaling: null, rope_theta: 1000000,
  sliding_window: 512, sliding_window_pattern: 6, torch_dtype: "bfloat16", vocab_size: 262144,
};
/** gemma-3-4b-it: a multimodal config whose text_config lists only what differs from Gemma3TextConfig's defaults. */
const gemma3_4b = {
  architectures: ["Gemma3ForConditionalGeneration"], model_type: "gemma3", eos_token_id: [1, 106], torch_dtype: "bfloat16",
  text_config: { hidden_size: 2560, intermediate_size: 10240, model_type: "gemma3_text", num_hidden_layers: 34, rope_scaling: { factor: 8.0, rope_type: "linear" }, sliding_window: 1024 },
  vision_config: { model_type: "siglip_vision_model" },
};
const factors = (n: number, start: number) => Array.from({ length: n }, (_, i) => start + i * 0.05);
const phi4_mini = {
  architectures: ["Phi3ForCausalLM"], model_type: "phi3", attention_bias: false, bos_token_id: 199999, eos_token_id: 199999, hidden_act: "silu",
  hidden_size: 3072, intermediate_size: 8192, max_position_embeddings: 131072, num_attention_heads: 24, num_hidden_layers: 32,
  num_key_value_heads: 8, original_max_position_embeddings: 4096, partial_rotary_factor: 0.75, rms_norm_eps: 1e-5,
  rope_scaling: { long_factor: factors(48, 1), short_factor: factors(48, 1).map((v) => v / 2 + 0.5), type: "longrope" },
  rope_theta: 10000, sliding_window: 262144, tie_word_embeddings: true, torch_dtype: "bfloat16", vocab_size: 200064,
};
const phi3_mini_4k = {
  architectures: ["Phi3ForCausalLM"], model_type: "phi3", bos_token_id: 1, eos_token_id: 32000, hidden_act: "silu", hidden_size: 3072,
  intermediate_size: 8192, max_position_embeddings: 4096, num_attention_heads: 32, num_hidden_layers: 32, num_key_value_heads: 32,
  original_max_position_embeddings: 4096, rms_norm_eps: 1e-5, rope_scaling: null, rope_theta: 10000, sliding_window: 2047,
  tie_word_embeddings: false, torch_dtype: "bfloat16", vocab_size: 32064,
};

describe("family configs", () => {
  it("reads Qwen3: q/k norms, head_dim 128 independent of hidden / heads", () => {
    const c = parseModelConfig(qwen3_0_6b, "config.json");
    expect([c.modelType, c.headDim, c.hiddenSize / c.numAttentionHeads, c.tieWordEmbeddings, c.moe]).toEqual(["qwen3", 128, 64, true, null]);
    const spec = decoderSpecOf("q", c, 4096);
    expect([spec.qkNorm, spec.sandwichNorms, spec.normOffset, spec.attentionScale]).toEqual([true, false, 0, 1 / Math.sqrt(128)]);
    expect(spec.layerWindows.every((w) => w === null)).toBe(true);
  });

  it("reads Qwen3-MoE: 128 experts, 8 per token, every layer sparse", () => {
    const c = parseModelConfig(qwen3_30b_a3b, "config.json");
    expect(c.moe).toEqual({ numExperts: 128, numExpertsPerTok: 8, moeIntermediateSize: 768, normTopkProb: true, decoderSparseStep: 1, mlpOnlyLayers: [] });
    const spec = decoderSpecOf("m", c, 4096);
    expect(spec.moe?.sparseLayers.filter(Boolean)).toHaveLength(48);
    const dense = decoderSpecOf("m", parseModelConfig({ ...qwen3_30b_a3b, decoder_sparse_step: 2, mlp_only_layers: [1] }, "config.json"), 4096);
    // Layer l is sparse when (l + 1) % step == 0 and l is not MLP-only: 3, 5, 7, ... (1 is MLP-only).
    expect(dense.moe?.sparseLayers.slice(0, 6)).toEqual([false, false, false, true, false, true]);
  });

  it("reads Gemma 3 1B: five sliding layers (window 512, base 10000) per global one, Gemma norms and scales", () => {
    const c = parseModelConfig(gemma3_1b, "config.json");
    expect(c.layerTypes.slice(0, 6)).toEqual(["sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]);
    expect(c.tieWordEmbeddings).toBe(true);
    const spec = decoderSpecOf("g", c, 32768);
    expect(spec.layerWindows.filter((w) => w === 512)).toHaveLength(22);
    expect(spec.layerWindows.filter((w) => w === null)).toHaveLength(4);
    expect([spec.normOffset, spec.sandwichNorms, spec.qkNorm, spec.mlpActivation, spec.embedScale]).toEqual([1, true, true, "gelu_tanh", Math.fround(Math.sqrt(1152))]);
    expect(spec.attentionScale).toBe(1 / 16);
    expect(spec.localInvFreq![1]! / Math.pow(10000, -2 / 256)).toBeCloseTo(1, 6);
    expect(spec.invFreq[1]! / Math.pow(1e6, -2 / 256)).toBeCloseTo(1, 6);
    // A served context within the window: no layer needs masking.
    expect(decoderSpecOf("g", c, 512).layerWindows.every((w) => w === null)).toBe(true);
  });

  it("reads the text model of a multimodal Gemma 3 config with transformers' text defaults", () => {
    const c = parseModelConfig(gemma3_4b, "config.json");
    expect([c.modelType, c.wrapperModelType, c.numAttentionHeads, c.numKeyValueHeads, c.headDim, c.vocabSize, c.slidingWindow]).toEqual([
      "gemma3_text", "gemma3", 8, 4, 256, 262208, 1024,
    ]);
    expect(c.eosTokenIds).toEqual([1, 106]);
    const spec = decoderSpecOf("g", c, 131072);
    // Linear scaling (factor 8) only on the global layers; the local ones keep base 10000 unscaled.
    expect(spec.invFreq[1]! / (Math.pow(1e6, -2 / 256) / 8)).toBeCloseTo(1, 6);
    expect(spec.localInvFreq![1]! / Math.pow(1e4, -2 / 256)).toBeCloseTo(1, 6);
  });

  it("reads Phi-4-mini: partial rotary 0.75, LongRoPE with its attention factor, no effective window", () => {
    const c = parseModelConfig(phi4_mini, "config.json");
    expect([c.partialRotaryFactor, c.slidingWindow, c.ropeScaling?.ropeType]).toEqual([0.75, null, "longrope"]);
    const spec = decoderSpecOf("p", c, 4096);
    expect(spec.rotaryDim).toBe(96);
    expect(spec.invFreq).toHaveLength(48);
    expect(spec.ropeScale).toBeCloseTo(Math.sqrt(1 + Math.log(32) / Math.log(4096)), 12);
  });

  it("reads Phi-3-mini-4k: every layer slides with window 2047", () => {
    const spec = decoderSpecOf("p", parseModelConfig(phi3_mini_4k, "config.json"), 4096);
    expect(spec.layerWindows.every((w) => w === 2047)).toBe(true);
    expect(spec.ropeScale).toBe(1);
  });

  it("round-trips every family through modelConfigToJson", () => {
    for (const json of [qwen3_0_6b, qwen3_30b_a3b, gemma3_1b, phi4_mini, phi3_mini_4k]) {
      const c = parseModelConfig(json, "config.json");
      expect(parseModelConfig(modelConfigToJson(c), "config.json")).toEqual(c);
    }
  });

  it.each([
    [{ ...gemma3_1b, final_logit_softcapping: 30 }, "final_logit_softcapping is not supported (must be null)"],
    [{ ...gemma3_1b, hidden_activation: "gelu" }, 'hidden_activation "gelu" is not supported (only "gelu_pytorch_tanh" for gemma3_text)'],
    [{ ...gemma3_1b, layer_types: ["full_attention"] }, "layer_types must list"],
    [{ ...gemma3_4b, text_config: { ...gemma3_4b.text_config, num_hidden_layers: 0 } }, "text_config.num_hidden_layers must be a positive integer"],
    [{ ...qwen3_30b_a3b, num_experts_per_tok: 200 }, "num_experts_per_tok (200) must not exceed num_experts (128)"],
    [{ ...qwen3_30b_a3b, mlp_only_layers: [48] }, "mlp_only_layers must be a list of layer indices below 48"],
    [{ ...phi4_mini, rope_scaling: { ...phi4_mini.rope_scaling, long_factor: [1, 2] } }, "rope_scaling.long_factor must be a list of 48 positive numbers"],
    [{ ...phi4_mini, partial_rotary_factor: 0.7 }, "head_dim x partial_rotary_factor must be even, got 89"],
  ])("rejects case %# naming the field", (json, message) => {
    expect(() => parseModelConfig(json, "config.json")).toThrow(ModelLoadError);
    expect(() => parseModelConfig(json, "config.json")).toThrow(message);
  });
});

describe("LongRoPE", () => {
  const params = { headDim: 8, rotaryDim: 8, ropeTheta: 10000, maxPositionEmbeddings: 16384 };
  const scaling = { ropeType: "longrope" as const, shortFactor: [1, 2, 3, 4], longFactor: [5, 6, 7, 8], originalMaxPositionEmbeddings: 4096, attentionFactor: null };

  it("divides by the short factors within the pretrained context and the long ones beyond it", () => {
    const short = ropeInvFreq({ ...params, ropeScaling: scaling }, 4096);
    const long = ropeInvFreq({ ...params, ropeScaling: scaling }, 8192);
    [1, 0.1, 0.01, 0.001].forEach((base, i) => {
      expect(short[i]! / (base / scaling.shortFactor[i]!)).toBeCloseTo(1, 6);
      expect(long[i]! / (base / scaling.longFactor[i]!)).toBeCloseTo(1, 6);
    });
  });

  it("scales cos and sin by sqrt(1 + ln(max / original) / ln(original)), or the given factor", () => {
    expect(ropeAttentionFactor({ ...params, ropeScaling: scaling })).toBeCloseTo(Math.sqrt(1 + Math.log(4) / Math.log(4096)), 12);
    expect(ropeAttentionFactor({ ...params, ropeScaling: { ...scaling, attentionFactor: 1.5 } })).toBe(1.5);
    expect(ropeAttentionFactor({ ...params, maxPositionEmbeddings: 4096, ropeScaling: scaling })).toBe(1);
  });
});
