import { expectedTensorShapes, type Checkpoint } from "../checkpoint/checkpoint";
import { LM_HEAD_WEIGHT } from "../graph/decoder-spec";
import { familyOf } from "../families/registry";
import { llama3RopeFactors, mapTensorName, ropePermuteRows, type TensorRule } from "../gguf/gguf-family";

export { mapTensorName } from "../gguf/gguf-family";
import { ggufTokenizerMetadata } from "../gguf/gguf-vocab";
import { quantizable, quantizeRows } from "../quant/block-quant";
import { quantBitsOf } from "../gguf/ggml-quant-blocks";
import { gguf, writeGguf, type GgmlTensorType, type GgufMetadata, type GgufTensorToWrite } from "../gguf/gguf-writer";

/** The file types `exportGguf` writes (names of llama_ftype without "MOSTLY_"). */
export type GgufFileType = "F32" | "F16" | "Q8_0" | "Q4_0";

export interface ExportGgufOptions {
  /**
   * "F32" (default): every tensor float32. "F16": 2-D and larger weights float16, 1-D tensors
   * float32. "Q8_0" / "Q4_0": see `exportGguf` (a "pure" file, every quantizable weight in the one type).
   */
  fileType?: GgufFileType;
  onProgress?: (line: string) => void;
}

export interface ExportGgufResult {
  path: string;
  /** llama.cpp architecture written (`general.architecture`). */
  arch: string;
  /** GGUF tensor names, in file order. */
  tensorNames: string[];
}

/** `general.file_type` (llama_ftype): ALL_F32, MOSTLY_F16, MOSTLY_Q4_0, MOSTLY_Q8_0. */
export const GGUF_FILE_TYPES: Record<GgufFileType, number> = { F32: 0, F16: 1, Q4_0: 2, Q8_0: 7 };

/** The MoE router, which llama-quantize keeps unquantized even with --pure (and our engine keeps float32). */
const ROUTER = /\.ffn_gate_inp\.weight$/;

/**
 * Converts a loaded checkpoint to a GGUF v3 file that llama.cpp loads, following llama.cpp's
 * convert_hf_to_gguf.py for the checkpoint's family (its `gguf` in model/families/<family>.ts):
 * - metadata: general.architecture / name / file_type / quantization_version, the family's
 *   hyper-parameters (`<arch>.block_count` ...), the tokenizer (gguf-vocab.ts) and chat template;
 * - tensors renamed per the family table, q/k rows (and biases) permuted for a "norm" rope arch,
 *   `lm_head` left out when the embeddings are tied (llama.cpp then reuses token_embd), and
 *   `rope_freqs.weight` added for Llama 3 rope scaling, the family's extra tensors (Phi-3's LongRoPE
 *   factors), per-tensor transforms (Gemma's norms as 1 + w), experts stacked into [E, ...] tensors;
 * - weights read through `checkpoint.weights` by their text-checkpoint names (a multimodal Gemma 3
 *   folder's prefix dropped; Phi-3's fused tensors as stored);
 * - F32 throughout, or F16 for 2-D weights (`fileType`); 1-D tensors always F32;
 * - Q8_0 / Q4_0: a "pure" file, as `llama-quantize --pure` writes: every weight of 2 or more
 *   dimensions whose rows (inner dimension) are a multiple of 32 is quantized to that one type,
 *   token_embd and output included, and each expert's rows of a stacked MoE tensor; the codes and
 *   scales are `quantizeRows`' (quant/block-quant.ts), the very ones our engine feeds to
 *   MatMulNBits. Kept F32: 1-D tensors, the MoE router (ffn_gate_inp, as llama-quantize does) and
 *   any weight whose rows do not split into blocks of 32 (our engine keeps those float32 too;
 *   llama.cpp's converter would fall back to F16). `general.file_type` is MOSTLY_Q8_0 (7) or
 *   MOSTLY_Q4_0 (2).
 *
 * @throws Error for a model_type without a family, a tensor the family cannot name, a rope scaling
 *         the arch cannot express, or a tokenizer the export does not support
 * @example
 * const checkpoint = await loadCheckpoint(dir);
 * exportGguf(checkpoint, "/tmp/model.gguf", { onProgress: console.log });
 */
export function exportGguf(checkpoint: Checkpoint, outPath: string, options: ExportGgufOptions = {}): ExportGgufResult {
  const log = options.onProgress ?? (() => {});
  const fileType = options.fileType ?? "F32";
  const config = checkpoint.config;
  const family = familyOf(config.modelType).gguf;
  if (config.ropeScaling?.ropeType === "llama3" && !family.ropeFreqsTensor) {
    throw new Error(`GGUF export: llama3 rope scaling cannot be expressed for arch ${family.arch} (llama.cpp loads no rope_freqs for it)`);
  }
  family.check?.(config);

  const metadata: GgufMetadata = {
    "general.architecture": gguf.string(family.arch),
    "general.name": gguf.string(checkpoint.modelId),
  };
  for (const [key, value] of Object.entries(family.hparams(config))) metadata[`${family.arch}.${key}`] = value;
  metadata["general.file_type"] = gguf.uint32(GGUF_FILE_TYPES[fileType]);
  metadata["general.quantization_version"] = gguf.uint32(2);
  Object.assign(metadata, ggufTokenizerMetadata(checkpoint.dir, config, checkpoint.chatTemplate));

  const tensors: GgufTensorToWrite[] = [];
  const typeOf = (name: string, shape: readonly number[]): GgmlTensorType => {
    if (shape.length < 2) return "F32";
    if (fileType === "F32" || fileType === "F16") return fileType;
    return ROUTER.test(name) || !quantizable(shape.at(-1)!) ? "F32" : fileType;
  };
  /** The tensor to write, its float values quantized on the way for a Q8_0 / Q4_0 type. */
  const tensor = (name: string, shape: readonly number[], data: () => Float32Array): GgufTensorToWrite => {
    const type = typeOf(name, shape);
    if (type !== "Q8_0" && type !== "Q4_0") return { name, shape, type, data };
    const cols = shape.at(-1)!;
    const rows = shape.reduce((a, b) => a * b, 1) / cols;
    return { name, shape, type, data: () => quantizeRows(data(), rows, cols, quantBitsOf(type)) };
  };
  const read = (name: string, rule: TensorRule, shape: readonly number[]): Float32Array => {
    let data = checkpoint.weights.take(name);
    if (family.rope === "norm" && rule.ropePermute) {
      const heads = rule.ropePermute === "q" ? config.numAttentionHeads : config.numKeyValueHeads;
      data = ropePermuteRows(data, heads, config.headDim, shape.length === 2 ? shape[1]! : 1);
    }
    return rule.transform ? rule.transform(data) : data;
  };
  // Experts stacked into one tensor, placed where its first expert is: the sources by expert index.
  const stacks = new Map<string, { rule: TensorRule; shape: number[]; sources: string[] }>();
  const order: { gguf: string; source?: { name: string; rule: TensorRule; shape: number[] } }[] = [];
  for (const [name, shape] of expectedTensorShapes(config)) {
    if (name === LM_HEAD_WEIGHT && config.tieWordEmbeddings) continue;
    const { gguf: ggufName, rule, xid } = mapTensorName(family, name);
    if (xid === undefined) {
      order.push({ gguf: ggufName, source: { name, rule, shape } });
      continue;
    }
    if (!stacks.has(ggufName)) {
      stacks.set(ggufName, { rule, shape, sources: [] });
      order.push({ gguf: ggufName });
    }
    stacks.get(ggufName)!.sources[xid] = name;
  }
  for (const { gguf: ggufName, source } of order) {
    if (source) {
      tensors.push(tensor(ggufName, source.shape, () => read(source.name, source.rule, source.shape)));
      continue;
    }
    const { rule, shape, sources } = stacks.get(ggufName)!;
    const missing = [...sources.keys()].filter((x) => sources[x] === undefined);
    if (missing.length > 0) throw new Error(`GGUF export: ${ggufName} lacks experts ${missing.join(", ")}`);
    const size = shape.reduce((x, y) => x * y, 1);
    const stacked = [sources.length, ...shape];
    tensors.push(
      tensor(ggufName, stacked, () => {
        const out = new Float32Array(sources.length * size);
        sources.forEach((name, x) => out.set(read(name, rule, shape), x * size));
        return out;
      }),
    );
  }
  if (config.ropeScaling?.ropeType === "llama3") {
    const factors = llama3RopeFactors(config);
    tensors.push({ name: "rope_freqs.weight", shape: [factors.length], type: "F32", data: () => factors });
  }
  for (const extra of family.extraTensors?.(config) ?? []) {
    tensors.push({ name: extra.name, shape: [extra.data.length], type: "F32", data: () => extra.data });
  }

  const quantized = tensors.filter((t) => t.type === "Q8_0" || t.type === "Q4_0").length;
  const kept = fileType === "Q8_0" || fileType === "Q4_0" ? `, ${quantized} quantized, ${tensors.length - quantized} F32` : "";
  log(`${checkpoint.modelId}: writing ${family.arch} GGUF (${fileType}, ${tensors.length} tensors${kept}) to ${outPath}`);
  const t0 = performance.now();
  writeGguf(outPath, {
    metadata,
    tensors,
    onTensor: (done, total) => {
      if (done % 32 === 0 || done === total) log(`${checkpoint.modelId}: wrote ${done}/${total} tensors (${((performance.now() - t0) / 1000).toFixed(1)} s)`);
    },
  });
  return { path: outPath, arch: family.arch, tensorNames: tensors.map((t) => t.name) };
}
