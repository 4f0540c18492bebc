import { describe, expect, it } from "vitest";
import { DEMO_FAMILIES, FAMILIES, MODEL_TYPES, demoOf, familyOf, findFamily, tokenizerOf, wrappedFamily } from "./registry";

describe("family registry", () => {
  it("lists each model_type, architecture and demo name once", () => {
    const unique = (xs: readonly string[]) => new Set(xs).size === xs.length;
    expect(unique(MODEL_TYPES)).toBe(true);
    expect(unique(FAMILIES.map((f) => f.architecture))).toBe(true);
    expect(unique(DEMO_FAMILIES)).toBe(true);
    expect(MODEL_TYPES).toEqual(["llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gemma3_text", "phi3", "smollm3"]);
  });

  it("fills the traits a family leaves out with a plain Llama's", () => {
    expect(familyOf("llama").traits).toEqual({ qkNorm: false, normOffset: 0, sandwichNorms: false, scaledEmbeddings: false, mlpActivation: "silu", alwaysAttentionBias: false, fusedTensors: [] });
    expect(familyOf("gemma3_text").traits).toMatchObject({ qkNorm: true, normOffset: 1, sandwichNorms: true, scaledEmbeddings: true, mlpActivation: "gelu_pytorch_tanh" });
    expect(familyOf("phi3").traits.fusedTensors.map((f) => f.name(2))).toEqual(["model.layers.2.self_attn.qkv_proj.weight", "model.layers.2.mlp.gate_up_proj.weight"]);
  });

  it("finds families by model_type, wrapper, demo and tokenizer, and names the known ones otherwise", () => {
    expect(familyOf("mistral").gguf.arch).toBe("llama");
    expect(findFamily("gpt2")).toBeUndefined();
    expect(() => familyOf("gpt2")).toThrow(/model_type "gpt2" is not a registered family \(known: llama, mistral/);
    expect(wrappedFamily("gemma3")?.modelType).toBe("gemma3_text");
    expect(wrappedFamily("gemma3_text")).toBeUndefined();
    expect(demoOf("smollm3").tokenizer).toBe("qwen3");
    expect(() => demoOf("mistral")).toThrow(/no demo family "mistral"/);
    expect(tokenizerOf("phi3").files().info.vocabSize).toBe(32011);
  });

  it("gives every demo a tokenizer some family brings", () => {
    for (const name of DEMO_FAMILIES) expect(() => tokenizerOf(demoOf(name).tokenizer)).not.toThrow();
  });
});
