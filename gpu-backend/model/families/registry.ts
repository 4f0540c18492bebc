import { resolveFamily, type ModelFamily } from "./family";
import { gemma3 } from "./gemma3";
import { llama } from "./llama";
import { mistral } from "./mistral";
import { phi3 } from "./phi3";
import { qwen2 } from "./qwen2";
import { qwen3 } from "./qwen3";
import { qwen3Moe } from "./qwen3-moe";
import { smollm3 } from "./smollm3";

/**
 * The model families the engine serves, one file each (model/families/<family>.ts). The one place
 * that lists them: the config parser, the tensor list, the decoder spec, the GGUF export, the
 * demo models and the tokenizer writer look a family up here. Adding a family is one file plus
 * its tests, and one line in `DEFINITIONS`.
 */
const DEFINITIONS = [llama, mistral, qwen2, qwen3, qwen3Moe, gemma3, phi3, smollm3] as const;

type Definition = (typeof DEFINITIONS)[number];

/** The families with demo models, by name ("gemma3"): `--model gemma3`, `demo-gemma3-random`. */
export type DemoFamily = Extract<Definition, { demo: unknown }>["demo"]["name"];
/** The families' real tokenizers, by name ("qwen3"). */
export type TokenizerFamily = Extract<Definition, { tokenizer: unknown }>["tokenizer"]["name"];

/** Every family, traits spelled out, in the order above. */
export const FAMILIES: readonly ModelFamily[] = DEFINITIONS.map(resolveFamily);

/** config.json `model_type` values served (a wrapper such as Gemma 3's "gemma3" is read through its text model's). */
export const MODEL_TYPES: readonly string[] = FAMILIES.map((f) => f.modelType);

/** The demo families, in registry order. */
export const DEMO_FAMILIES: readonly DemoFamily[] = DEFINITIONS.flatMap((f) => ("demo" in f ? [f.demo.name] : []));

/**
 * The family of a `model_type`, or undefined.
 *
 * @example findFamily("gemma3_text")?.traits.normOffset; // 1
 */
export function findFamily(modelType: string): ModelFamily | undefined {
  return FAMILIES.find((f) => f.modelType === modelType);
}

/**
 * The family of a `model_type`.
 *
 * @throws Error naming the model_type and the registered ones
 * @example familyOf("mistral").gguf.arch; // "llama"
 */
export function familyOf(modelType: string): ModelFamily {
  const family = findFamily(modelType);
  if (!family) throw new Error(`model_type ${JSON.stringify(modelType)} is not a registered family (known: ${MODEL_TYPES.join(", ")})`);
  return family;
}

/** The family whose config a multimodal config.json of this `model_type` wraps ("gemma3" → gemma3_text), or undefined. */
export function wrappedFamily(wrapperModelType: unknown): ModelFamily | undefined {
  return FAMILIES.find((f) => f.config?.wrapperModelType !== undefined && f.config.wrapperModelType === wrapperModelType);
}

/**
 * The family whose demo is `name`.
 *
 * @throws Error for a name without a demo
 */
export function demoOf(name: string): NonNullable<ModelFamily["demo"]> {
  const demo = FAMILIES.find((f) => f.demo?.name === name)?.demo;
  if (!demo) throw new Error(`no demo family ${JSON.stringify(name)} (known: ${DEMO_FAMILIES.join(", ")})`);
  return demo;
}

/**
 * The tokenizer named `name`.
 *
 * @throws Error for a name no family brings
 */
export function tokenizerOf(name: string): NonNullable<ModelFamily["tokenizer"]> {
  const tokenizer = FAMILIES.find((f) => f.tokenizer?.name === name)?.tokenizer;
  if (!tokenizer) throw new Error(`no family tokenizer ${JSON.stringify(name)}`);
  return tokenizer;
}
