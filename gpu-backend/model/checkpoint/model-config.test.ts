import { describe, expect, it } from "vitest";
import type { ModelConfig } from "../config/model-config";
import { parseModelConfig } from "./parse-model-config";
import { modelConfigToJson } from "./model-config-json";
import { ropeInvFreq, type RopeParams } from "../config/rope-config";
import { ModelLoadError } from "./model-load-error";

const llama32 = {
  architectures: ["LlamaForCausalLM"],
  model_type: "llama",
  hidden_size: 2048,
  intermediate_size: 8192,
  num_hidden_layers: 16,
  num_attention_heads: 32,
  num_key_value_heads: 8,
  head_dim: 64,
  rms_norm_eps: 1e-5,
  rope_theta: 500000,
  rope_scaling: { rope_type: "llama3", factor: 32, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 },
  max_position_embeddings: 131072,
  vocab_size: 128256,
  tie_word_embeddings: true,
  attention_bias: false,
  bos_token_id: 128000,
  eos_token_id: [128001, 128008, 128009],
  torch_dtype: "bfloat16",
};

function parseError(json: unknown): ModelLoadError {
  try {
    parseModelConfig(json, "config.json");
  } catch (e) {
    expect(e).toBeInstanceOf(ModelLoadError);
    return e as ModelLoadError;
  }
  throw new Error("expected a ModelLoadError");
}

describe("parseModelConfig", () => {
  it("reads a Llama 3.2 config", () => {
    const c = parseModelConfig(llama32, "config.json");
    expect(c).toEqual({
      modelType: "llama",
      hiddenSize: 2048,
      intermediateSize: 8192,
      numHiddenLayers: 16,
      numAttentionHeads: 32,
      numKeyValueHeads: 8,
      headDim: 64,
      rmsNormEps: 1e-5,
      ropeTheta: 500000,
      ropeScaling: { ropeType: "llama3", factor: 32, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 8192 },
      maxPositionEmbeddings: 131072,
      vocabSize: 128256,
      tieWordEmbeddings: true,
      attentionBias: false,
      bosTokenIds: [128000],
      eosTokenIds: [128001, 128008, 128009],
      torchDtype: "bfloat16",
      hiddenAct: "silu",
      partialRotaryFactor: 1,
      slidingWindow: null,
      layerTypes: Array.from({ length: 16 }, () => "full_attention"),
      ropeLayers: Array.from({ length: 16 }, () => true),
      ropeLocalTheta: null,
      queryPreAttnScalar: null,
      moe: null,
      wrapperModelType: null,
    } satisfies ModelConfig);
  });

  it("applies transformers' defaults", () => {
    const c = parseModelConfig(
      {
        model_type: "llama",
        hidden_size: 576,
        intermediate_size: 1536,
        num_hidden_layers: 30,
        num_attention_heads: 9,
        rms_norm_eps: 1e-5,
        max_position_embeddings: 2048,
        vocab_size: 49152,
      },
      "config.json",
    );
    expect(c.numKeyValueHeads).toBe(9);
    expect(c.headDim).toBe(64);
    expect(c.ropeTheta).toBe(10000);
    expect(c.ropeScaling).toBeNull();
    expect(c.tieWordEmbeddings).toBe(false);
    expect(c.attentionBias).toBe(false);
    expect(c.bosTokenIds).toEqual([]);
    expect(c.torchDtype).toBeNull();
  });

  it("gives qwen2 its q/k/v biases and accepts mistral without a sliding window", () => {
    const qwen2 = parseModelConfig({ ...llama32, model_type: "qwen2", rope_scaling: null, use_sliding_window: false, sliding_window: 32768 }, "config.json");
    expect(qwen2.attentionBias).toBe(true);
    const mistral = parseModelConfig({ ...llama32, model_type: "mistral", rope_scaling: null, sliding_window: null }, "config.json");
    expect(mistral.attentionBias).toBe(false);
  });

  it("reads rope settings from rope_parameters (newer transformers)", () => {
    const { rope_theta: _theta, rope_scaling: _scaling, ...rest } = llama32;
    const c = parseModelConfig(
      { ...rest, rope_parameters: { rope_type: "llama3", rope_theta: 500000, factor: 32, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 } },
      "config.json",
    );
    expect(c.ropeTheta).toBe(500000);
    expect(c.ropeScaling).toEqual(parseModelConfig(llama32, "config.json").ropeScaling);
    const plain = parseModelConfig({ ...rest, rope_parameters: { rope_type: "default", rope_theta: 1000000 } }, "config.json");
    expect(plain.ropeScaling).toBeNull();
    expect(plain.ropeTheta).toBe(1000000);
  });

  it("accepts linear scaling given as `type`", () => {
    const c = parseModelConfig({ ...llama32, rope_scaling: { type: "linear", factor: 4 } }, "config.json");
    expect(c.ropeScaling).toEqual({ ropeType: "linear", factor: 4 });
  });

  it("round-trips through modelConfigToJson", () => {
    const c = parseModelConfig(llama32, "config.json");
    expect(parseModelConfig(modelConfigToJson(c), "config.json")).toEqual(c);
  });

  it.each([
    [{ ...llama32, num_hidden_layers: undefined }, "config.json: num_hidden_layers must be a positive integer"],
    [{ ...llama32, num_hidden_layers: 2.5 }, "config.json: num_hidden_layers must be a positive integer"],
    [{ ...llama32, hidden_size: "2048" }, "config.json: hidden_size must be a positive integer"],
    [{ ...llama32, rms_norm_eps: -1 }, "config.json: rms_norm_eps must be a positive number"],
    [{ ...llama32, vocab_size: 0 }, "config.json: vocab_size must be a positive integer"],
    [{ ...llama32, model_type: "qwen4" }, 'config.json: model_type "qwen4" is not supported (supported: llama, mistral, qwen2, qwen3, qwen3_moe, gemma3_text, phi3, smollm3, gemma3)'],
    [{ ...llama32, model_type: undefined }, "config.json: model_type must be a non-empty string"],
    [{ ...llama32, rope_scaling: { rope_type: "yarn", factor: 4 } }, 'config.json: rope_scaling.rope_type "yarn" is not supported (supported: default, linear, llama3, longrope)'],
    [{ ...llama32, rope_scaling: { rope_type: "dynamic", factor: 2 } }, 'config.json: rope_scaling.rope_type "dynamic" is not supported'],
    [{ ...llama32, rope_scaling: { rope_type: "llama3", factor: 8 } }, "config.json: rope_scaling.low_freq_factor must be a positive number"],
    [{ ...llama32, num_key_value_heads: 5 }, "config.json: num_attention_heads (32) must be a multiple of num_key_value_heads (5)"],
    [{ ...llama32, head_dim: undefined, hidden_size: 2050 }, "config.json: hidden_size (2050) is not a multiple of num_attention_heads (32)"],
    [{ ...llama32, eos_token_id: "x" }, "config.json: eos_token_id must be a token id or a list of token ids"],
    [{ ...llama32, tie_word_embeddings: "yes" }, "config.json: tie_word_embeddings must be true or false"],
    [{ ...llama32, hidden_act: "gelu" }, 'config.json: hidden_act "gelu" is not supported'],
    [{ ...llama32, model_type: "qwen3", use_sliding_window: true }, "config.json: sliding window attention is not supported"],
    [[1, 2], "config.json: expected a JSON object"],
  ])("rejects case %# with a message naming the file and the field", (json, message) => {
    const error = parseError(json);
    expect(error.message).toContain(message);
    expect(error.file).toBe("config.json");
  });
});

describe("ropeInvFreq", () => {
  const base = { headDim: 8, rotaryDim: 8, ropeTheta: 10000, maxPositionEmbeddings: 4096 };
  const ropeInvFreqOf = (p: Omit<RopeParams, "maxPositionEmbeddings" | "rotaryDim"> & Partial<RopeParams>) =>
    ropeInvFreq({ maxPositionEmbeddings: 4096, rotaryDim: p.headDim, ...p }, 4096);

  it("computes theta^(-2i/d) without scaling", () => {
    // 10000^(-0/8), 10000^(-2/8), 10000^(-4/8), 10000^(-6/8)
    const expected = [1, 0.1, 0.01, 0.001];
    const got = ropeInvFreqOf({ ...base, ropeScaling: null });
    expect(got).toHaveLength(4);
    got.forEach((v, i) => expect(v / expected[i]!).toBeCloseTo(1, 6));
  });

  it("divides every frequency by the factor with linear scaling", () => {
    const got = ropeInvFreqOf({ ...base, ropeScaling: { ropeType: "linear", factor: 4 } });
    [0.25, 0.025, 0.0025, 0.00025].forEach((v, i) => expect(got[i]! / v).toBeCloseTo(1, 6));
  });

  it("keeps high, scales low and interpolates medium frequencies with Llama 3 scaling", () => {
    // original 64, low_freq_factor 1, high_freq_factor 4 → low wavelen 64, high wavelen 16.
    // wavelens 2π/inv: 6.283 (< 16: kept), 62.83 (in [16, 64]: smoothed), 628.3 and 6283 (> 64: / 8).
    // smooth s = (64 / 62.8319 - 1) / 3 = 0.00619721; (1 - s) * 0.1 / 8 + s * 0.1 = 0.01304226.
    const got = ropeInvFreqOf({
      ...base,
      ropeScaling: { ropeType: "llama3", factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 64 },
    });
    expect(got[0]).toBe(1);
    expect(got[1]! / 0.01304226).toBeCloseTo(1, 6);
    expect(got[2]! / 0.00125).toBeCloseTo(1, 6);
    expect(got[3]! / 0.000125).toBeCloseTo(1, 6);
  });

  it("matches the Llama 3.1 8B frequencies across the three bands", () => {
    // head_dim 128, theta 500000, factor 8, low 1, high 4, original 8192: low wavelen 8192,
    // high wavelen 2048. inv[i] = 500000^(-i/64), wavelen 2π·500000^(i/64).
    const got = ropeInvFreqOf({
      headDim: 128,
      ropeTheta: 500000,
      ropeScaling: { ropeType: "llama3", factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 8192 },
    });
    expect(got).toHaveLength(64);
    // i <= 28 keep their frequency (wavelen(28) = 1956 < 2048), 29..34 are smoothed,
    // i >= 35 are divided by 8 (wavelen(35) = 8219 > 8192).
    expect(got[0]).toBe(1);
    expect(got[28]! / Math.pow(500000, -28 / 64)).toBeCloseTo(1, 6);
    expect(got[35]! / (Math.pow(500000, -35 / 64) / 8)).toBeCloseTo(1, 6);
    expect(got[63]! / (Math.pow(500000, -63 / 64) / 8)).toBeCloseTo(1, 6);
    const s29 = (8192 / (2 * Math.PI * Math.pow(500000, 29 / 64)) - 1) / 3;
    expect(s29).toBeCloseTo(0.8036, 4);
    expect(got[29]! / Math.pow(500000, -29 / 64)).toBeCloseTo((1 - s29) / 8 + s29, 6);
    const s34 = (8192 / (2 * Math.PI * Math.pow(500000, 34 / 64)) - 1) / 3;
    expect(s34).toBeCloseTo(0.0745, 4);
    expect(got[34]! / Math.pow(500000, -34 / 64)).toBeCloseTo((1 - s34) / 8 + s34, 6);
  });
});
