import { describe, expect, it } from "vitest";
import { decoderSpecOf } from "../../checkpoint/decoder-spec-of";
import { tinyFamilyConfig } from "../../checkpoint/demo-families";
import { demoModelConfig } from "../../checkpoint/demo-model";
import { modelConfigToJson } from "../../checkpoint/model-config-json";
import { ModelLoadError } from "../../checkpoint/model-load-error";
import { parseModelConfig } from "../../checkpoint/parse-model-config";
import { CpuExecutor } from "../../executors/cpu-executor";
import { maxAbsDiff } from "../../executors/executor-conformance";
import { randomWeights } from "../../testing/random-weights";
import { referenceForward } from "../../testing/reference-forward";
import { smollm3 } from "../smollm3";

/** SmolLM3-3B's config.json (the fields the engine reads). */
const smollm3_3b = {
  architectures: ["SmolLM3ForCausalLM"], model_type: "smollm3", attention_bias: false, bos_token_id: null, eos_token_id: 128012,
  hidden_act: "silu", hidden_size: 2048, intermediate_size: 11008, max_position_embeddings: 65536, mlp_bias: false,
  no_rope_layer_interval: 4, no_rope_layers: Array.from({ length: 36 }, (_, i) => ((i + 1) % 4 === 0 ? 0 : 1)),
  num_attention_heads: 16, num_hidden_layers: 36, num_key_value_heads: 4, rms_norm_eps: 1e-6, rope_scaling: null, rope_theta: 5000000,
  sliding_window: null, tie_word_embeddings: true, torch_dtype: "bfloat16", use_sliding_window: false, vocab_size: 128256,
};
const { no_rope_layers: _list, no_rope_layer_interval: _interval, rope_theta: _theta, tie_word_embeddings: _tie, ...withoutDefaults } = smollm3_3b;
const noRope = (layers: boolean[]) => layers.flatMap((r, i) => (r ? [] : [i]));

describe("smollm3 config", () => {
  it("reads SmolLM3-3B: every 4th layer without rotary, and the spec carries it", () => {
    const c = parseModelConfig(smollm3_3b, "config.json");
    expect([c.modelType, c.ropeTheta, c.tieWordEmbeddings, c.headDim]).toEqual(["smollm3", 5000000, true, 128]);
    expect(noRope(c.ropeLayers)).toEqual([3, 7, 11, 15, 19, 23, 27, 31, 35]);
    expect(decoderSpecOf("s", c, 4096).ropeLayers).toEqual(c.ropeLayers);
  });

  it("takes transformers' defaults: no_rope_layer_interval 4, rope_theta 2e6 (unless rope_parameters has one), tied embeddings", () => {
    const c = parseModelConfig(withoutDefaults, "config.json");
    expect([c.ropeTheta, c.tieWordEmbeddings]).toEqual([2000000, true]);
    expect(noRope(c.ropeLayers)).toEqual([3, 7, 11, 15, 19, 23, 27, 31, 35]);
    expect(noRope(parseModelConfig({ ...withoutDefaults, no_rope_layer_interval: 3 }, "config.json").ropeLayers).slice(0, 3)).toEqual([2, 5, 8]);
    expect(parseModelConfig({ ...withoutDefaults, rope_parameters: { rope_type: "default", rope_theta: 5000000 } }, "config.json").ropeTheta).toBe(5000000);
  });

  it("round-trips through modelConfigToJson, no_rope_layers included", () => {
    const c = parseModelConfig({ ...smollm3_3b, no_rope_layers: smollm3_3b.no_rope_layers.map((x, i) => (i === 0 ? 0 : x)) }, "config.json");
    const json = modelConfigToJson(c);
    expect(json.architectures).toEqual(["SmolLM3ForCausalLM"]);
    expect(parseModelConfig(json, "config.json")).toEqual(c);
  });

  it.each([
    [{ ...smollm3_3b, no_rope_layers: [1, 1, 1, 0] }, "no_rope_layers must list 0 or 1 for each of the 36 layers"],
    [{ ...smollm3_3b, no_rope_layers: smollm3_3b.no_rope_layers.map(() => 2) }, "no_rope_layers must list 0 or 1"],
    [{ ...smollm3_3b, use_sliding_window: true, sliding_window: 4096 }, "use_sliding_window must be false"],
  ])("rejects case %# naming the field", (json, message) => {
    expect(() => parseModelConfig(json, "config.json")).toThrow(ModelLoadError);
    expect(() => parseModelConfig(json, "config.json")).toThrow(message);
  });
});

describe("smollm3 GGUF", () => {
  it("exports as llama.cpp's smollm3 (norm rope, no rope_freqs) and refuses a NoPE pattern other than its hard-coded every 4th layer", () => {
    const c = parseModelConfig(smollm3_3b, "config.json");
    expect([smollm3.gguf.arch, smollm3.gguf.rope, smollm3.gguf.ropeFreqsTensor]).toEqual(["smollm3", "norm", false]);
    expect(() => smollm3.gguf.check(c)).not.toThrow();
    expect(() => smollm3.gguf.check({ ...c, ropeLayers: c.ropeLayers.map((r, i) => (i === 0 ? false : r)) })).toThrow(/every 4th layer, and only there/);
  });
});

describe("smollm3 graph", () => {
  it("the cpu executor skips rotary exactly on the NoPE layers (matches the reference, differs from all-rotary)", async () => {
    const config = tinyFamilyConfig("smollm3", { vocabSize: 512, bosTokenId: null, eosTokenIds: demoModelConfig().eosTokenIds });
    expect(config.ropeLayers).toEqual([true, true, true, false]);
    const spec = decoderSpecOf("tiny-smollm3", config, 256);
    const weights = randomWeights(spec, 7, 0.3);
    const prompt = Array.from({ length: 24 }, (_, i) => (i * 37 + 5) % spec.vocabSize);
    const exec = await CpuExecutor.create({ spec, weights, numBlocks: 4, blockSize: 16, threads: 1 });
    try {
      const ours = (await exec.run([{ tokenIds: prompt, startPos: 0, blockTable: [0, 1], logits: "all" }])).logits[0]!;
      const reference = referenceForward(spec, weights, prompt);
      const allRotary = referenceForward({ ...spec, ropeLayers: spec.ropeLayers.map(() => true) }, weights, prompt);
      expect(maxAbsDiff(ours, reference)).toBeLessThanOrEqual(1e-4);
      expect(maxAbsDiff(ours, allRotary)).toBeGreaterThan(1e-2);
    } finally {
      await exec.dispose();
    }
  });
});
