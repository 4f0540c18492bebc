import { LLAMA_LIKE_TENSORS, commonHparams, llamaConfigJson, type GgufFamily } from "../gguf/gguf-family";
import { gguf } from "../gguf/gguf-writer";
import type { FamilyDefinition } from "./family";

/**
 * Llama (2, 3, 3.x): the plain decoder every other family is described against. Its demo is the
 * embedded default model (demo-llama-random: Llama 3 rope scaling, tied embeddings, Qwen3's
 * tokenizer and chat template).
 */

/** conversion/llama.py LlamaModel (LlamaForCausalLM, MistralForCausalLM): LLM_ARCH_LLAMA. */
export const LLAMA_GGUF: GgufFamily = {
  arch: "llama",
  rope: "norm",
  ropeFreqsTensor: true,
  hparams: (c) => ({
    ...commonHparams(c),
    vocab_size: gguf.uint32(c.vocabSize),
    "rope.dimension_count": gguf.uint32(c.headDim),
  }),
  tensors: LLAMA_LIKE_TENSORS,
  configJson: llamaConfigJson,
};

export const llama = {
  modelType: "llama",
  architecture: "LlamaForCausalLM",
  gguf: LLAMA_GGUF,
  demo: { name: "llama" as const, tokenizer: "qwen3" as const, config: (base) => base },
} satisfies FamilyDefinition;
