import { existsSync, readFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { ChatTemplate } from "../../tokenizer/chat-template";
import { Tokenizer } from "../../tokenizer/tokenizer";
import type { WeightSource } from "../graph/decoder-spec";
import type { QuantBits } from "../quant/block-quant";
import type { PackedWeight } from "../quant/quantized-weights";
import { checkpointWeights, diskTensorNames, expectedTensorShapes } from "./checkpoint-weights";
import type { ModelConfig } from "../config/model-config";
import { parseModelConfig } from "./parse-model-config";
import { ModelLoadError } from "./model-load-error";
import { openSafetensors, type SafetensorsFile } from "./safetensors";

/** A float32 tensor read from a checkpoint, Hugging Face layout ([out, in] for linears). */
export interface CheckpointTensor {
  data: Float32Array;
  shape: number[];
}

/** A loaded Hugging Face-style model folder; weights stay on disk until asked for. */
export interface Checkpoint {
  /** Absolute path of the folder. */
  dir: string;
  /** agent_edge.json's model_id, else the folder name. */
  modelId: string;
  config: ModelConfig;
  /**
   * The weights as float32 by the decoder's names (`layerWeightNames`), read on demand: fused
   * tensors (Phi-3's qkv_proj, gate_up_proj) come split, a wrapped text model's prefix is gone.
   */
  weights: WeightSource;
  /** Every tensor in the weight files. */
  tensorNames: string[];
  /** Dtype, shape and file of a tensor. @throws ModelLoadError for an unknown name */
  tensorInfo(name: string): { dtype: string; shape: number[]; file: string };
  /** Reads one tensor from disk as float32. @throws ModelLoadError */
  getTensor(name: string): CheckpointTensor;
  tokenizer: Tokenizer;
  /** The chat template source (tokenizer_config.json's, or chat_template.jinja). */
  chatTemplate: string;
  /** The compiled chat template with the tokenizer's bos/eos tokens. */
  template: ChatTemplate;
  /** The GGUF file it was loaded from (gguf-checkpoint.ts); `dir` is then its folder. */
  ggufPath?: string;
  /**
   * Linear weights stored in the one ggml block type that is `bits`' MatMulNBits layout (Q4_0 for
   * 4, Q8_0 for 8), packed as stored, by graph tensor name (a GGUF checkpoint's); the others are
   * quantized from float32 as for a folder.
   */
  packedWeights?(bits: QuantBits): [string, PackedWeight][];
}

/**
 * Loads a Hugging Face-style model folder of a registered family (model/families/registry.ts):
 *
 *   config.json                     required (see `parseModelConfig`)
 *   model.safetensors               or model.safetensors.index.json + the shards it names
 *   tokenizer.json                  required
 *   tokenizer_config.json           required: chat_template (a string, or a list of
 *                                   { name, template } of which "default" is used), bos/eos tokens
 *   chat_template.jinja             used when tokenizer_config.json has no chat_template
 *   generation_config.json          optional: more eos ids
 *   agent_edge.json                 optional: { "model_id" }
 *
 * Every tensor the config implies is checked for presence, a float dtype and its shape; the
 * tensor data itself is read only by `getTensor`.
 *
 * @throws ModelLoadError naming the file (and tensor or field) at fault
 * @example
 * const checkpoint = await loadCheckpoint("/models/demo-llama-random");
 * const { data, shape } = checkpoint.getTensor("model.embed_tokens.weight");
 */
export { expectedTensorShapes } from "./checkpoint-weights";

export async function loadCheckpoint(dir: string): Promise<Checkpoint> {
  const root = resolve(dir);
  const configPath = join(root, "config.json");
  const config = parseModelConfig(readJson(configPath), configPath);

  const weights = openWeights(root);
  const names = diskTensorNames(config, weights.tensorNames);
  checkTensors(config, weights, names);

  const tokenizerPath = join(root, "tokenizer.json");
  const tokenizerConfigPath = join(root, "tokenizer_config.json");
  const tokenizerJson = readJson(tokenizerPath);
  const tokenizerConfig = readJson(tokenizerConfigPath);
  if (!isRecord(tokenizerConfig)) throw new ModelLoadError(tokenizerConfigPath, "expected a JSON object");
  const generationConfigPath = join(root, "generation_config.json");
  const generationEos = existsSync(generationConfigPath) ? eosIdsOf(readJson(generationConfigPath), generationConfigPath) : [];

  let tokenizer: Tokenizer;
  try {
    tokenizer = new Tokenizer({ tokenizerJson, tokenizerConfig, eosTokenIds: [...generationEos, ...config.eosTokenIds] });
  } catch (e) {
    if (e instanceof ModelLoadError) throw e;
    throw new ModelLoadError(tokenizerPath, `cannot build the tokenizer (${(e as Error).message})`, { cause: e });
  }
  if (tokenizer.vocabSize > config.vocabSize) {
    throw new ModelLoadError(tokenizerPath, `has token ids up to ${tokenizer.vocabSize - 1} but config.json vocab_size is ${config.vocabSize}`);
  }
  if (tokenizer.eosTokenIds.length === 0) {
    throw new ModelLoadError(configPath, "no end-of-turn token: eos_token_id is missing here, in generation_config.json and in tokenizer_config.json");
  }

  const chatTemplate = readChatTemplate(root, tokenizerConfig, tokenizerConfigPath);
  let template: ChatTemplate;
  try {
    template = new ChatTemplate(chatTemplate, { bosToken: tokenizer.bosToken, eosToken: tokenizer.eosToken });
  } catch (e) {
    throw new ModelLoadError(tokenizerConfigPath, `chat_template does not parse (${(e as Error).message})`, { cause: e });
  }

  const tensorInfo = (name: string) => {
    const file = weights.fileOf(name);
    const info = file.info(name);
    return { dtype: info.dtype, shape: info.shape, file: file.path };
  };
  const getTensor = (name: string): CheckpointTensor => {
    const file = weights.fileOf(name);
    return { data: file.read(name), shape: file.info(name).shape };
  };
  return {
    dir: root,
    modelId: readModelId(root),
    config,
    weights: checkpointWeights(config, names, getTensor),
    tensorNames: weights.tensorNames,
    tensorInfo,
    getTensor,
    tokenizer,
    chatTemplate,
    template,
  };
}

interface WeightFiles {
  tensorNames: string[];
  fileOf(name: string): SafetensorsFile;
  /** The file to blame when a tensor is missing. */
  missingFile: string;
}

function openWeights(root: string): WeightFiles {
  const single = join(root, "model.safetensors");
  const indexPath = join(root, "model.safetensors.index.json");
  if (existsSync(single)) {
    const file = openSafetensors(single);
    const names = new Set(file.tensorNames);
    return {
      tensorNames: file.tensorNames,
      missingFile: single,
      fileOf: (name) => {
        if (!names.has(name)) throw new ModelLoadError(single, `has no tensor ${name}`);
        return file;
      },
    };
  }
  if (!existsSync(indexPath)) throw new ModelLoadError(single, "file not found (nor model.safetensors.index.json)");
  const index = readJson(indexPath);
  const weightMap = isRecord(index) ? index.weight_map : undefined;
  if (!isRecord(weightMap)) throw new ModelLoadError(indexPath, "weight_map must be an object of tensor name → shard file");
  const shards = new Map<string, { file: SafetensorsFile; names: Set<string> }>();
  const fileByTensor = new Map<string, SafetensorsFile>();
  for (const [name, shardName] of Object.entries(weightMap)) {
    if (typeof shardName !== "string" || shardName.includes("/") || shardName.includes("\\")) {
      throw new ModelLoadError(indexPath, `weight_map[${JSON.stringify(name)}] must be a shard file name in the same folder`);
    }
    let shard = shards.get(shardName);
    if (!shard) {
      const file = openSafetensors(join(root, shardName));
      shard = { file, names: new Set(file.tensorNames) };
      shards.set(shardName, shard);
    }
    if (!shard.names.has(name)) throw new ModelLoadError(shard.file.path, `has no tensor ${name} (model.safetensors.index.json puts it here)`);
    fileByTensor.set(name, shard.file);
  }
  return {
    tensorNames: [...fileByTensor.keys()],
    missingFile: indexPath,
    fileOf: (name) => {
      const file = fileByTensor.get(name);
      if (!file) throw new ModelLoadError(indexPath, `has no tensor ${name}`);
      return file;
    },
  };
}

function checkTensors(config: ModelConfig, weights: WeightFiles, diskName: (name: string) => string): void {
  const present = new Set(weights.tensorNames);
  for (const [canonical, expected] of expectedTensorShapes(config)) {
    const name = diskName(canonical);
    if (!present.has(name)) throw new ModelLoadError(weights.missingFile, `tensor ${name} is missing (config.json implies it)`);
    const file = weights.fileOf(name);
    const info = file.info(name);
    if (info.dtype !== "F32" && info.dtype !== "F16" && info.dtype !== "BF16") {
      throw new ModelLoadError(file.path, `${name} has dtype ${info.dtype}; only F32, F16 and BF16 are supported`);
    }
    if (info.shape.length !== expected.length || info.shape.some((d, i) => d !== expected[i])) {
      throw new ModelLoadError(file.path, `${name} has shape [${info.shape.join(", ")}] but config.json implies [${expected.join(", ")}]`);
    }
  }
}

function readChatTemplate(root: string, tokenizerConfig: Record<string, unknown>, tokenizerConfigPath: string): string {
  const raw = tokenizerConfig.chat_template;
  if (typeof raw === "string") return raw;
  if (Array.isArray(raw)) {
    const named = raw.find((t) => isRecord(t) && t.name === "default");
    if (isRecord(named) && typeof named.template === "string") return named.template;
    throw new ModelLoadError(tokenizerConfigPath, 'chat_template is a list without a template named "default"');
  }
  if (raw !== undefined && raw !== null) throw new ModelLoadError(tokenizerConfigPath, "chat_template must be a string or a list of { name, template }");
  const jinjaPath = join(root, "chat_template.jinja");
  if (existsSync(jinjaPath)) return readFileSync(jinjaPath, "utf8");
  throw new ModelLoadError(tokenizerConfigPath, "no chat_template (and no chat_template.jinja): the model cannot render chats");
}

function readModelId(root: string): string {
  const path = join(root, "agent_edge.json");
  if (!existsSync(path)) return basename(root);
  const json = readJson(path);
  const id = isRecord(json) ? json.model_id : undefined;
  if (id === undefined) return basename(root);
  if (typeof id !== "string" || id === "") throw new ModelLoadError(path, "model_id must be a non-empty string");
  return id;
}

function eosIdsOf(json: unknown, path: string): number[] {
  if (!isRecord(json) || json.eos_token_id === undefined || json.eos_token_id === null) return [];
  const list = Array.isArray(json.eos_token_id) ? json.eos_token_id : [json.eos_token_id];
  if (!list.every((x) => typeof x === "number" && Number.isInteger(x) && x >= 0)) throw new ModelLoadError(path, "eos_token_id must be a token id or a list of token ids");
  return list as number[];
}

function readJson(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new ModelLoadError(path, code === "ENOENT" ? "file not found" : `cannot read (${(e as Error).message})`, { cause: e });
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw new ModelLoadError(path, `invalid JSON (${(e as Error).message})`, { cause: e });
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
