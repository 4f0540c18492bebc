import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exportGguf, type GgufFileType } from "../../export/gguf-export";
import { CpuExecutor } from "../../executors/cpu-executor";
import { maxAbsDiff } from "../../executors/executor-conformance";
import type { ModelConfig } from "../../config/model-config";
import type { WeightSource } from "../../graph/decoder-spec";
import { QuantizedWeights } from "../../quant/quantized-weights";
import { dequantizedWeights } from "../../testing/dequantized-weights";
import { loadCheckpoint, type Checkpoint } from "../../checkpoint/checkpoint";
import { DEMO_FAMILIES, tinyFamilyConfig, type TokenizerIds } from "../../checkpoint/demo-families";
import { demoModelConfig, materializeModel } from "../../checkpoint/demo-model";
import { decoderSpecOf } from "../../checkpoint/decoder-spec-of";
import { loadGgufCheckpoint } from "../../checkpoint/gguf-checkpoint";

/**
 * Each family's tiny seeded checkpoint written as GGUF by our writer (`exportGguf`) in every type
 * it writes and loaded back by the GGUF loader: the same config, and the cpu executor's logits the
 * folder's within the type's error (F32 exact-ish; F16, Q8_0, Q4_0 against the folder's weights
 * rounded or dequantized the same way); Q4_0 / Q8_0 weights handed to the int4 / int8 graph as
 * stored give the folder's int4 / int8 logits.
 */
const root = mkdtempSync(join(tmpdir(), "gguf-checkpoint-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const ids: TokenizerIds = { vocabSize: demoModelConfig().vocabSize, bosTokenId: null, eosTokenIds: demoModelConfig().eosTokenIds };
const PROMPT = Array.from({ length: 24 }, (_, i) => (i * 7919 + 13) % 5000);

async function logitsOf(checkpoint: Checkpoint, weights: WeightSource = checkpoint.weights, quantized: QuantizedWeights | null = null): Promise<Float32Array> {
  const spec = decoderSpecOf(checkpoint.modelId, checkpoint.config, 512);
  const exec = await CpuExecutor.create({ spec, weights, quantized, numBlocks: 4, blockSize: 16, threads: 1 });
  try {
    return (await exec.run([{ tokenIds: PROMPT, startPos: 0, blockTable: [0, 1], logits: "all" }])).logits[0]!.slice();
  } finally {
    await exec.dispose();
  }
}

/**
 * The config fields a GGUF file carries (not the dtype, nor the token ids its tokenizer may list
 * otherwise), LongRoPE factors as float32 (the rotary tables round them so).
 */
function hyperparameters(c: ModelConfig) {
  const { torchDtype: _dtype, bosTokenIds: _bos, eosTokenIds: _eos, ...rest } = c;
  const s = c.ropeScaling;
  if (s?.ropeType !== "longrope") return rest;
  return { ...rest, ropeScaling: { ...s, shortFactor: s.shortFactor.map(Math.fround), longFactor: s.longFactor.map(Math.fround) } };
}

/** The tiny config, Gemma 3's with the attention scale llama.cpp derives (1/sqrt(head_dim)), which is all a GGUF can say. */
function ggufExpressible(family: (typeof DEMO_FAMILIES)[number]): ModelConfig {
  const c = tinyFamilyConfig(family, ids);
  return c.queryPreAttnScalar === null ? c : { ...c, queryPreAttnScalar: c.headDim };
}

/** Logit error allowed per file type, against the folder's weights as that type holds them. */
const TOLERANCE: Record<GgufFileType, number> = { F32: 1e-5, F16: 1e-4, Q8_0: 1e-4, Q4_0: 1e-4 };
const HELD: Record<GgufFileType, 4 | 8 | "fp16" | null> = { F32: null, F16: "fp16", Q8_0: 8, Q4_0: 4 };

type Family = (typeof DEMO_FAMILIES)[number];

/**
 * Each family's folder, and each of its GGUF files, made once (exporting and loading are most of a
 * test's time): the error test rewrites the qwen3 F32 file. The Q4_0 / Q8_0 files are also loaded
 * once: by the type's own test, which checks the load's log lines, then taken (and dropped: a loaded
 * file keeps its bytes and tokenizer) by the int4 / int8 test. Any test run alone makes what it needs.
 */
const folders = new Map<Family, Promise<Checkpoint>>();
function folderOf(family: Family): Promise<Checkpoint> {
  if (!folders.has(family)) folders.set(family, materializeModel({ dir: join(root, family), config: ggufExpressible(family), seed: 3 }).then((dir) => loadCheckpoint(dir)));
  return folders.get(family)!;
}
const files = new Map<string, Promise<string>>();
function ggufFile(family: Family, fileType: GgufFileType): Promise<string> {
  const path = join(root, `${family}-${fileType}.gguf`);
  if (!files.has(path)) files.set(path, folderOf(family).then((folder) => exportGguf(folder, path, { fileType }).path));
  return files.get(path)!;
}
type Loaded = { gguf: Checkpoint; lines: string[] };
const loaded = new Map<string, Promise<Loaded>>();
/** The file loaded, with the log lines of the load and of what is read from it afterwards. */
async function load(path: string): Promise<Loaded> {
  const lines: string[] = [];
  return { gguf: await loadGgufCheckpoint(path, { log: (l) => lines.push(l) }), lines };
}
/** The type's own test: a fresh load, kept for the int test when the type is Q4_0 / Q8_0. */
async function loadFor(family: Family, fileType: GgufFileType): Promise<Loaded> {
  const path = await ggufFile(family, fileType);
  const result = load(path);
  if (fileType === "Q4_0" || fileType === "Q8_0") loaded.set(path, result);
  return result;
}
/** The int test: the load its type's test kept (now dropped), else a fresh one. */
async function takeLoaded(family: Family, fileType: "Q4_0" | "Q8_0"): Promise<Loaded> {
  const path = await ggufFile(family, fileType);
  const result = loaded.get(path) ?? load(path);
  loaded.delete(path);
  return result;
}

describe.each(DEMO_FAMILIES)("GGUF checkpoint: %s", (family) => {
  let folder: Checkpoint;
  let folderLogits: Float32Array;
  beforeAll(async () => {
    folder = await folderOf(family);
    folderLogits = await logitsOf(folder);
  });

  it.each(["F32", "F16", "Q8_0", "Q4_0"] as const)("%s: same config, logits of the folder's weights as the type holds them", async (fileType) => {
    // `lines` is the load's log so far, then what reading the weights logs (below, in logitsOf).
    const { gguf, lines } = await loadFor(family, fileType);
    expect(hyperparameters(gguf.config)).toEqual(hyperparameters(folder.config));
    expect(gguf.modelId).toBe(`${family}-${fileType}`);
    const held = HELD[fileType];
    const spec = decoderSpecOf(folder.modelId, folder.config, 512);
    // fp16: the graph's float16 set leaves out the MoE router, which the F16 file rounds too.
    const reference = held === null ? folderLogits : await logitsOf(folder, dequantizedWeights(spec, folder.weights, held));
    const logits = await logitsOf(gguf);
    const tolerance = fileType === "F16" && folder.config.moe ? 5e-3 : TOLERANCE[fileType];
    expect(maxAbsDiff(logits, reference)).toBeLessThanOrEqual(tolerance);
    expect(lines[0]).toMatch(new RegExp(`^${family}-${fileType}\\.gguf: GGUF v3, `));
    expect(lines.at(-1)).toMatch(/decoded \d+\/\d+ tensors/);
  });

  it.each([4, 8] as const)("int%i: Q4_0 / Q8_0 weights taken as stored give the folder's quantized logits", async (bits) => {
    const { gguf } = await takeLoaded(family, bits === 4 ? "Q4_0" : "Q8_0");
    const stored = QuantizedWeights.open(bits, gguf.packedWeights!(bits));
    const fromGguf = await logitsOf(gguf, gguf.weights, stored);
    // Every linear (experts included), the embedding and an untied head came as stored: nothing quantized here.
    expect(stored.freshCount).toBe(0);
    const fromFolder = await logitsOf(folder, folder.weights, QuantizedWeights.open(bits));
    expect(maxAbsDiff(fromGguf, fromFolder)).toBeLessThanOrEqual(1e-5);
  });
});

describe("GGUF checkpoint errors", () => {
  it("names the file and a tensor of a type it does not decode, and a missing tensor", async () => {
    const { readFileSync, writeFileSync } = await import("node:fs");
    const { readGguf } = await import("../gguf-reader");
    // The qwen3 F32 file (tinyFamilyConfig("qwen3"): ggufExpressible leaves it as is).
    const path = await ggufFile("qwen3", "F32");
    const file = readGguf(path);
    const bytes = readFileSync(path);
    // Rewrite the type id of blk.1.attn_k.weight in the header to IQ2_XXS (16).
    const at = headerTypeOffset(bytes, file.tensors.find((t) => t.name === "blk.1.attn_k.weight")!);
    const iq = Buffer.from(bytes);
    iq.writeUInt32LE(16, at);
    writeFileSync(join(root, "iq.gguf"), iq);
    await expect(loadGgufCheckpoint(join(root, "iq.gguf"))).rejects.toThrow(`${join(root, "iq.gguf")}: tensor blk.1.attn_k.weight has ggml type IQ2_XXS (16), which this loader does not decode`);
    // Rename blk.1.ffn_up.weight to blk.1.ffn_uq.weight: it is missing.
    const renamed = Buffer.from(bytes);
    const nameAt = renamed.indexOf("blk.1.ffn_up.weight");
    renamed.write("blk.1.ffn_uq.weight", nameAt);
    writeFileSync(join(root, "missing.gguf"), renamed);
    await expect(loadGgufCheckpoint(join(root, "missing.gguf"))).rejects.toThrow(/missing\.gguf: tensor blk\.1\.ffn_up\.weight is missing \(qwen3 with 2 layers implies it/);
  });

  it("refuses an architecture no family serves, naming the served ones", async () => {
    const { writeGguf, gguf } = await import("../gguf-writer");
    const path = join(root, "falcon.gguf");
    writeGguf(path, { metadata: { "general.architecture": gguf.string("falcon") }, tensors: [{ name: "x.weight", shape: [32], type: "F32", data: () => new Float32Array(32) }] });
    await expect(loadGgufCheckpoint(path)).rejects.toThrow(`${path}: general.architecture "falcon" is not served (served: llama, qwen2, qwen3, qwen3moe, gemma3, phi3, smollm3)`);
  });

  it("refuses a llama file with experts (Mixtral)", async () => {
    const { writeGguf, gguf } = await import("../gguf-writer");
    const path = join(root, "mixtral.gguf");
    writeGguf(path, { metadata: { "general.architecture": gguf.string("llama"), "llama.expert_count": gguf.uint32(8) }, tensors: [{ name: "x.weight", shape: [32], type: "F32", data: () => new Float32Array(32) }] });
    await expect(loadGgufCheckpoint(path)).rejects.toThrow(`${path}: llama.expert_count 8: a mixture of experts in a llama file (e.g. Mixtral) is not served`);
  });
});

describe("GGUF hyper-parameters read back", () => {
  it("gemma3: a per-layer sliding_window_pattern (one bool a layer) gives the layer types", async () => {
    const { familyOf } = await import("../../families/registry");
    const { ggufHparams } = await import("../gguf-hparams");
    const { gguf } = await import("../gguf-writer");
    const metadata = {
      "gemma3.embedding_length": gguf.uint32(64),
      "gemma3.feed_forward_length": gguf.uint32(128),
      "gemma3.block_count": gguf.uint32(3),
      "gemma3.attention.head_count": gguf.uint32(4),
      "gemma3.attention.key_length": gguf.uint32(16),
      "gemma3.attention.layer_norm_rms_epsilon": gguf.float32(1e-6),
      "gemma3.context_length": gguf.uint32(4096),
      "gemma3.attention.sliding_window": gguf.uint32(512),
      "gemma3.attention.sliding_window_pattern": { type: "array", itemType: "bool", value: [true, false, true] },
    } as const;
    const h = ggufHparams(metadata, "gemma3", new Map([["token_embd.weight", [1000, 64]]]), () => new Float32Array());
    const json = familyOf("gemma3_text").gguf.configJson(h);
    expect(json.layer_types).toEqual(["sliding_attention", "full_attention", "sliding_attention"]);
    expect(json.rms_norm_eps).toBe(1e-6);
    expect(json.query_pre_attn_scalar).toBe(16);
    expect(json.tie_word_embeddings).toBe(true);
  });
});

/** Byte offset of a tensor's ggml type field in the header: after its name, dims count and dims. */
function headerTypeOffset(bytes: Buffer, t: { name: string; shape: number[] }): number {
  const name = Buffer.from(t.name);
  let at = bytes.indexOf(name);
  while (at >= 0 && bytes.readBigUInt64LE(at - 8) !== BigInt(name.length)) at = bytes.indexOf(name, at + 1);
  return at + name.length + 4 + 8 * t.shape.length;
}
