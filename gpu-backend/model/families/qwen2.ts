import { LLAMA_LIKE_TENSORS, commonConfigJson, commonHparams } from "../gguf/gguf-family";
import type { FamilyDefinition } from "./family";

/** Qwen2 / Qwen2.5: biases on q, k and v whatever `attention_bias` says. */
export const qwen2 = {
  modelType: "qwen2",
  architecture: "Qwen2ForCausalLM",
  traits: { alwaysAttentionBias: true },
  // conversion/qwen.py Qwen2Model: LLM_ARCH_QWEN2, NEOX rope, q/k/v biases.
  gguf: { arch: "qwen2", rope: "neox", ropeFreqsTensor: false, hparams: commonHparams, tensors: LLAMA_LIKE_TENSORS, configJson: commonConfigJson },
} satisfies FamilyDefinition;
