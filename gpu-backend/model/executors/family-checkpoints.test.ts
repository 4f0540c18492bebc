import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadCheckpoint } from "../checkpoint/checkpoint";
import { DEMO_FAMILIES, tinyFamilyConfig, type TokenizerIds } from "../checkpoint/demo-families";
import { demoModelConfig, generateWeights, materializeModel } from "../checkpoint/demo-model";
import { decoderSpecOf } from "../checkpoint/decoder-spec-of";
import { writeSafetensors } from "../checkpoint/safetensors";
import { referenceForward } from "../testing/reference-forward";
import { CpuExecutor } from "./cpu-executor";
import { maxAbsDiff, topRows } from "./executor-conformance";

/**
 * Each family's tiny seeded checkpoint, written by the materializer and read back by the loader
 * (Phi-3's fused projections split, Gemma's zero-centred norms, a multimodal Gemma 3 folder's
 * prefixed names), run by the cpu executor against the reference forward pass on the same
 * weights, prefix cached and not.
 */
const root = mkdtempSync(join(tmpdir(), "family-checkpoints-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

// The Qwen3 vocabulary for every family here: these tests are about the weights, not the tokenizer.
const ids: TokenizerIds = { vocabSize: demoModelConfig().vocabSize, bosTokenId: null, eosTokenIds: demoModelConfig().eosTokenIds };
const PROMPT = Array.from({ length: 30 }, (_, i) => (i * 7919 + 13) % 5000);

async function logitsOf(dir: string) {
  const checkpoint = await loadCheckpoint(dir);
  const spec = decoderSpecOf(checkpoint.modelId, checkpoint.config, 512);
  const exec = await CpuExecutor.create({ spec, weights: checkpoint.weights, numBlocks: 4, blockSize: 16, threads: 1 });
  try {
    const full = (await exec.run([{ tokenIds: PROMPT, startPos: 0, blockTable: [2, 0], logits: "all" }])).logits[0]!.slice();
    const cached = (await exec.run([{ tokenIds: PROMPT.slice(20), startPos: 20, blockTable: [2, 0], logits: "all" }])).logits[0]!.slice();
    const reference = referenceForward(spec, checkpoint.weights, PROMPT);
    return { spec, full, cached, reference, checkpoint };
  } finally {
    await exec.dispose();
  }
}

/**
 * `expect(actual).toEqual(expected)` for a large float array: the same comparison (same class, same
 * length, every element the same by Object.is, as toEqual compares numbers) in a loop, and toEqual
 * itself, with its message, only when that finds a difference. toEqual alone walks a typed array's
 * keys through its generic equality: 15 s for these 4.5M logits, where the loop takes milliseconds.
 */
function expectSameFloats(actual: Float32Array, expected: Float32Array): void {
  const same = actual.constructor === expected.constructor && actual.length === expected.length && actual.every((x, i) => Object.is(x, expected[i]));
  if (!same) expect(actual).toEqual(expected);
}

describe("family checkpoints", () => {
  for (const family of DEMO_FAMILIES.filter((f) => f !== "llama")) {
    it(`${family}: loads, and the cpu executor matches the reference with and without a cached prefix`, async () => {
      const dir = await materializeModel({ dir: join(root, family), config: tinyFamilyConfig(family, ids), seed: 3 });
      const { spec, full, cached, reference } = await logitsOf(dir);
      expect(maxAbsDiff(full, reference)).toBeLessThanOrEqual(1e-4);
      expect(maxAbsDiff(cached, full.subarray(20 * spec.vocabSize))).toBeLessThanOrEqual(1e-5);
      expect(topRows(cached, spec.vocabSize).map((r) => r.argmax)).toEqual(topRows(full.subarray(20 * spec.vocabSize), spec.vocabSize).map((r) => r.argmax));
    });
  }

  it("phi3: q, k and v are the row blocks of qkv_proj; gate and up those of gate_up_proj", async () => {
    const dir = await materializeModel({ dir: join(root, "phi3-split"), config: tinyFamilyConfig("phi3", ids), seed: 4 });
    const checkpoint = await loadCheckpoint(dir);
    const qkv = checkpoint.getTensor("model.layers.1.self_attn.qkv_proj.weight").data;
    const gateUp = checkpoint.getTensor("model.layers.1.mlp.gate_up_proj.weight").data;
    const h = 64;
    expect(checkpoint.weights.take("model.layers.1.self_attn.k_proj.weight")).toEqual(qkv.slice(64 * h, 96 * h));
    expect(checkpoint.weights.take("model.layers.1.self_attn.v_proj.weight")).toEqual(qkv.slice(96 * h, 128 * h));
    expect(checkpoint.weights.take("model.layers.1.mlp.up_proj.weight")).toEqual(gateUp.slice(128 * h));
    expect(checkpoint.weights.has("model.layers.1.self_attn.q_proj.weight")).toBe(true);
    expect(() => checkpoint.weights.take("model.layers.9.self_attn.q_proj.weight")).toThrow("is not a tensor of this phi3 checkpoint");
  });

  it.each([
    ["phi3", "model.layers.1.self_attn.qkv_proj.weight"],
    ["qwen3", "model.layers.0.self_attn.k_norm.weight"],
    ["gemma3", "model.layers.1.pre_feedforward_layernorm.weight"],
    ["qwen3_moe", "model.layers.1.mlp.experts.7.down_proj.weight"],
  ] as const)("%s: a missing %s is named with the file", async (family, tensor) => {
    const config = tinyFamilyConfig(family, ids);
    const dir = await materializeModel({ dir: join(root, `${family}-missing`), config, seed: 6 });
    const { [tensor]: _dropped, ...rest } = generateWeights(config, 6);
    writeSafetensors(join(dir, "model.safetensors"), rest);
    await expect(loadCheckpoint(dir)).rejects.toThrow(`${join(dir, "model.safetensors")}: tensor ${tensor} is missing (config.json implies it)`);
  });

  it("gemma3: a multimodal folder (text_config, language_model.* names) gives the text model's logits", async () => {
    const config = tinyFamilyConfig("gemma3", ids);
    const textDir = await materializeModel({ dir: join(root, "gemma3-text"), config, seed: 5 });
    const wrapped = await materializeModel({ dir: join(root, "gemma3-wrapped"), config, seed: 5 });
    const text = JSON.parse(readFileSync(join(wrapped, "config.json"), "utf8")) as Record<string, unknown>;
    writeFileSync(join(wrapped, "config.json"), JSON.stringify({ model_type: "gemma3", eos_token_id: text.eos_token_id, text_config: text, vision_config: {} }));
    const tensors = generateWeights(config, 5);
    writeSafetensors(join(wrapped, "model.safetensors"), Object.fromEntries(Object.entries(tensors).map(([name, t]) => [`language_model.${name}`, t])));
    const a = await logitsOf(textDir);
    const b = await logitsOf(wrapped);
    expect(b.checkpoint.config.wrapperModelType).toBe("gemma3");
    expectSameFloats(b.full, a.full);
  });
});
