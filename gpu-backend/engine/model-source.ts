import { existsSync } from "node:fs";
import { demoFamilyOf, materializeFamilyDemo } from "../model/checkpoint/demo-families";
import { trainedModelOf, trainedModelPath } from "../model/checkpoint/trained-models";
import { downloadFromHub } from "../model/hub/hub-download";
import { isHubRef, parseHubRef } from "../model/hub/hub-ref";

/**
 * Where a `--model` value's model is on disk, fetching or writing it first when needed:
 * - undefined: the embedded demo (demo-llama-random), materialized on first use;
 * - an existing path (a Hugging Face folder, or a file such as a .gguf): itself;
 * - a demo family or demo model id ("qwen3", "demo-gemma3-random"): its seeded random demo;
 * - a trained test model ("smollm2"): its file in the model cache (trained-models.ts; the fetch
 *   script puts it there, an error names the script when it is missing);
 * - "hf:ORG/NAME[@REVISION][:FILE]": downloaded from the Hugging Face hub into the model cache
 *   (hub-download.ts), the snapshot folder or the one file;
 * - anything else: itself (the loader reports the missing folder).
 * The result is a folder or a file; loadModel decides how to read it (a .gguf file by
 * loadGgufCheckpoint, model/checkpoint/gguf-checkpoint.ts; a folder by loadCheckpoint).
 *
 * @example const path = await resolveModelSource("hf:HuggingFaceTB/SmolLM2-135M-Instruct", console.log);
 */
export async function resolveModelSource(model: string | undefined, log: (line: string) => void = () => {}): Promise<string> {
  if (model === undefined) return materializeFamilyDemo("llama", { onProgress: log });
  if (existsSync(model)) return model;
  const family = demoFamilyOf(model);
  if (family) return materializeFamilyDemo(family, { onProgress: log });
  if (trainedModelOf(model)) return trainedModelPath(model);
  if (isHubRef(model)) return downloadFromHub(parseHubRef(model), { log: (line) => log(`[hub] ${line}`) });
  return model;
}
