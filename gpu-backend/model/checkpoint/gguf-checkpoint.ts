import { basename, dirname, resolve } from "node:path";
import { ChatTemplate } from "../../tokenizer/chat-template";
import { Tokenizer } from "../../tokenizer/tokenizer";
import { FAMILIES } from "../families/registry";
import { DECODED_GGML_TYPES, decodedGgmlType, ggmlTypeName } from "../gguf/ggml-dequant";
import { mapTensorName, ropeUnpermuteRows, type GgufFamily } from "../gguf/gguf-family";
import { ggufHparams } from "../gguf/gguf-hparams";
import { readGguf, type GgufFile, type GgufTensorInfo } from "../gguf/gguf-reader";
import { ggufTokenizer } from "../gguf/gguf-tokenizer";
import type { ModelConfig } from "../config/model-config";
import type { Checkpoint, CheckpointTensor } from "./checkpoint";
import { checkpointWeights, expectedTensorShapes } from "./checkpoint-weights";
import { ggufPackedWeights, type TensorSource } from "./gguf-packed";
import { ModelLoadError } from "./model-load-error";
import { parseModelConfig } from "./parse-model-config";

/** Whether `path` names a GGUF file (by its extension) rather than a model folder. */
export function isGgufPath(path: string): boolean {
  return /\.gguf$/i.test(path);
}

/**
 * Loads a GGUF file (llama.cpp's format) as a `Checkpoint`, the same as a Hugging Face folder of the
 * same model would load:
 *
 *   general.architecture        → the family whose `gguf.arch` it is (llama → llama, also for
 *                                 Mistral; qwen2, qwen3, qwen3moe, gemma3, phi3, smollm3)
 *   <arch>.* hyper-parameters   → config.json keys (the family's `gguf.configJson`), validated by
 *                                 `parseModelConfig` as a folder's are
 *   tensors                     → Hugging Face names by the family's table (`mapTensorName`
 *                                 inverted): q/k rows of a "norm" rope arch un-permuted, Gemma's
 *                                 1 + w norms back to w, stacked experts sliced, every ggml type of
 *                                 ggml-dequant.ts decoded to float32 when taken
 *   tokenizer.*                 → tokenizer.json / tokenizer_config.json equivalents (gguf-tokenizer.ts)
 *   tokenizer.chat_template     → the chat template
 *
 * Every tensor the metadata implies is checked up front for presence, a decodable type and its
 * shape. Weights are decoded on demand (`weights.take`), with a progress line every 2 s;
 * `packedWeights(bits)` hands Q4_0 / Q8_0 tensors to the int4 / int8 executors as stored.
 *
 * @throws ModelLoadError naming the file and the key or tensor (its ggml type, what is missing)
 * @example
 * const checkpoint = await loadGgufCheckpoint("/models/SmolLM2-135M-Instruct.Q4_1.gguf", { log: console.log });
 */
export async function loadGgufCheckpoint(path: string, options: { log?: (line: string) => void } = {}): Promise<Checkpoint> {
  const log = options.log ?? (() => {});
  const file = resolve(path);
  const fail = (detail: string, cause?: unknown): never => {
    throw new ModelLoadError(file, detail, cause === undefined ? undefined : { cause });
  };
  let gguf: GgufFile;
  try {
    gguf = readGguf(file);
  } catch (e) {
    return fail(`cannot read the GGUF file (${(e as Error).message})`, e);
  }
  const arch = gguf.metadata["general.architecture"]?.value;
  const family = FAMILIES.find((f) => f.gguf.arch === arch);
  if (typeof arch !== "string" || !family) {
    const served = [...new Set(FAMILIES.map((f) => f.gguf.arch))];
    return fail(`general.architecture ${JSON.stringify(arch)} is not served (served: ${served.join(", ")})`);
  }
  const byName = new Map(gguf.tensors.map((t) => [t.name, t]));
  const typeCounts = new Map<string, number>();
  for (const t of gguf.tensors) typeCounts.set(ggmlTypeName(t.ggmlType), (typeCounts.get(ggmlTypeName(t.ggmlType)) ?? 0) + 1);
  log(`${basename(file)}: GGUF v${gguf.version}, ${arch}, ${gguf.tensors.length} tensors (${[...typeCounts].map(([t, n]) => `${n} ${t}`).join(", ")})`);

  const readFloat = (name: string): Float32Array => {
    const t = byName.get(name) ?? fail(`tensor ${name} is missing`);
    try {
      return gguf.readTensor(t.name);
    } catch (e) {
      return fail(`tensor ${name} (${ggmlTypeName(t.ggmlType)}) cannot be read: ${(e as Error).message}`, e);
    }
  };
  const tokenizerFiles = (() => {
    try {
      return ggufTokenizer(gguf.metadata, arch);
    } catch (e) {
      return fail((e as Error).message, e);
    }
  })();
  let config: ModelConfig;
  try {
    const hparams = ggufHparams(gguf.metadata, arch, new Map(gguf.tensors.map((t) => [t.name, t.shape])), readFloat);
    const json = {
      model_type: family.modelType,
      ...family.gguf.configJson(hparams),
      bos_token_id: tokenizerFiles.bosTokenId,
      eos_token_id: tokenizerFiles.eosTokenIds,
    };
    config = parseModelConfig(json, file);
  } catch (e) {
    if (e instanceof ModelLoadError) throw e;
    return fail((e as Error).message, e);
  }

  const sources = tensorSources(config, family.gguf, byName, fail, arch);
  const ggufFamily = family.gguf;
  const stacks = new Map<string, { data: Float32Array; left: number }>();
  const readStacked = (src: TensorSource & { xid: number }): Float32Array => {
    const name = src.gguf.name;
    let stack = stacks.get(name);
    if (!stack) {
      stack = { data: readFloat(name), left: src.gguf.shape[0]! };
      stacks.set(name, stack);
    }
    const size = stack.data.length / src.gguf.shape[0]!;
    const part = stack.data.slice(src.xid * size, (src.xid + 1) * size);
    if (--stack.left === 0) stacks.delete(name);
    return part;
  };
  let decoded = 0;
  let lastProgress = performance.now();
  const t0 = performance.now();
  const read = (hfName: string): CheckpointTensor => {
    const src = sources.get(hfName) ?? fail(`tensor ${hfName} is not a tensor of this ${config.modelType} checkpoint`);
    const shape = src.xid === undefined ? src.gguf.shape : src.gguf.shape.slice(1);
    let data = src.xid === undefined ? readFloat(src.gguf.name) : readStacked(src as TensorSource & { xid: number });
    if (ggufFamily.rope === "norm" && src.rule.ropePermute) {
      const heads = src.rule.ropePermute === "q" ? config.numAttentionHeads : config.numKeyValueHeads;
      data = ropeUnpermuteRows(data, heads, config.headDim, shape.length === 2 ? shape[1]! : 1);
    }
    if (src.rule.untransform) data = src.rule.untransform(data);
    decoded++;
    const now = performance.now();
    if (now - lastProgress > 2000 || decoded === sources.size) {
      lastProgress = now;
      log(`${basename(file)}: decoded ${decoded}/${sources.size} tensors (${src.gguf.name}, ${ggmlTypeName(src.gguf.ggmlType)}; ${((now - t0) / 1000).toFixed(1)} s)`);
    }
    return { data, shape };
  };

  let tokenizer: Tokenizer;
  try {
    tokenizer = new Tokenizer({ tokenizerJson: tokenizerFiles.tokenizerJson, tokenizerConfig: tokenizerFiles.tokenizerConfig, eosTokenIds: config.eosTokenIds });
  } catch (e) {
    return fail(`cannot build the tokenizer from tokenizer.* metadata (${(e as Error).message})`, e);
  }
  if (tokenizer.vocabSize > config.vocabSize) fail(`tokenizer.ggml.tokens has ids up to ${tokenizer.vocabSize - 1} but token_embd.weight has ${config.vocabSize} rows`);
  if (tokenizer.eosTokenIds.length === 0) fail("no end-of-turn token: tokenizer.ggml.eos_token_id is missing and no control token is one llama.cpp ends turns on");
  const chatTemplate = tokenizerFiles.chatTemplate ?? fail("no tokenizer.chat_template: the model cannot render chats");
  let template: ChatTemplate;
  try {
    template = new ChatTemplate(chatTemplate, { bosToken: tokenizer.bosToken, eosToken: tokenizer.eosToken });
  } catch (e) {
    return fail(`tokenizer.chat_template does not parse (${(e as Error).message})`, e);
  }

  const tensorInfo = (name: string) => {
    const t = byName.get(name) ?? fail(`has no tensor ${name}`);
    return { dtype: ggmlTypeName(t.ggmlType), shape: t.shape, file };
  };
  return {
    dir: dirname(file),
    ggufPath: file,
    modelId: basename(file).replace(/\.gguf$/i, ""),
    config,
    weights: checkpointWeights(config, (name) => name, read),
    tensorNames: gguf.tensors.map((t) => t.name),
    tensorInfo,
    getTensor: (name) => ({ data: readFloat(name), shape: tensorInfo(name).shape }),
    tokenizer,
    chatTemplate,
    template,
    packedWeights: (bits) => ggufPackedWeights({ file: gguf, config, family: ggufFamily, sources, bits, log }),
  };
}

/**
 * The GGUF tensor of every tensor the config implies (Hugging Face names, fused ones as stored),
 * checked for presence, a decodable type and shape.
 */
function tensorSources(config: ModelConfig, family: GgufFamily, byName: Map<string, GgufTensorInfo>, fail: (detail: string) => never, arch: string): Map<string, TensorSource> {
  const out = new Map<string, TensorSource>();
  for (const [hfName, shape] of expectedTensorShapes(config)) {
    let mapped: ReturnType<typeof mapTensorName>;
    try {
      mapped = mapTensorName(family, hfName);
    } catch {
      return fail(`no ${arch} tensor name for ${hfName}`);
    }
    const t = byName.get(mapped.gguf);
    const expected = mapped.xid === undefined ? shape : [config.moe?.numExperts ?? 0, ...shape];
    if (!t) return fail(`tensor ${mapped.gguf} is missing (${arch} with ${config.numHiddenLayers} layers implies it: ${hfName} [${expected.join(", ")}])`);
    if (!decodedGgmlType(t.ggmlType)) {
      return fail(`tensor ${t.name} has ggml type ${ggmlTypeName(t.ggmlType)} (${t.ggmlType}), which this loader does not decode (decoded: ${DECODED_GGML_TYPES.join(", ")})`);
    }
    if (t.shape.length !== expected.length || t.shape.some((d, i) => d !== expected[i])) {
      return fail(`tensor ${t.name} (${ggmlTypeName(t.ggmlType)}) has shape [${t.shape.join(", ")}] but the metadata implies [${expected.join(", ")}]`);
    }
    out.set(hfName, { gguf: t, rule: mapped.rule, ...(mapped.xid === undefined ? {} : { xid: mapped.xid }) });
  }
  return out;
}
