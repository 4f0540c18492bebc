import type { FamilyDefinition } from "./family";
import { uniformSlidingWindow } from "./layer-windows";
import { LLAMA_GGUF } from "./llama";

/** Mistral: a Llama whose every layer slides when `sliding_window` is shorter than the context. */
export const mistral = {
  modelType: "mistral",
  architecture: "MistralForCausalLM",
  config: {
    read: (_json, field, base) => uniformSlidingWindow(field, base.numHiddenLayers, base.maxPositionEmbeddings),
    write: (c) => (c.slidingWindow === null ? {} : { sliding_window: c.slidingWindow }),
  },
  gguf: LLAMA_GGUF,
} satisfies FamilyDefinition;
