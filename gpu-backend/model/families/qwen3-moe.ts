import type { ConfigFields } from "../config/config-fields";
import type { MoeConfig } from "../config/model-config";
import { LLAMA_LIKE_TENSORS, QK_NORM_TENSORS, commonConfigJson, commonHparams, refuse, type TensorRule } from "../gguf/gguf-family";
import { gguf } from "../gguf/gguf-writer";
import type { FamilyDefinition } from "./family";
import { qwen3 } from "./qwen3";

/**
 * Qwen3-MoE: Qwen3 with a mixture of experts in place of the MLP on its sparse layers. The demo
 * has 16 experts of 384, 4 per token: the same ACTIVE MLP parameters as the dense demos' 1536
 * (its total is 4x); the tiny config 8 experts of 32, 2 per token.
 */

/** Qwen2MoeModel / Qwen3MoeModel: the router and the experts stacked per layer. */
const QWEN3_MOE_TENSORS: readonly TensorRule[] = [
  ...LLAMA_LIKE_TENSORS.filter((r) => !/ffn_(gate|up|down)$/.test(r.gguf)),
  ...QK_NORM_TENSORS,
  { hf: "model.layers.{bid}.mlp.gate", gguf: "blk.{bid}.ffn_gate_inp" },
  { hf: "model.layers.{bid}.mlp.experts.{xid}.gate_proj", gguf: "blk.{bid}.ffn_gate_exps" },
  { hf: "model.layers.{bid}.mlp.experts.{xid}.up_proj", gguf: "blk.{bid}.ffn_up_exps" },
  { hf: "model.layers.{bid}.mlp.experts.{xid}.down_proj", gguf: "blk.{bid}.ffn_down_exps" },
];

export const qwen3Moe = {
  modelType: "qwen3_moe",
  architecture: "Qwen3MoeForCausalLM",
  traits: { qkNorm: true },
  config: {
    read: (json, field, base, fail) => ({ moe: readMoe(json, base.numHiddenLayers, field, fail) }),
    write: (c) => ({
      num_experts: c.moe!.numExperts,
      num_experts_per_tok: c.moe!.numExpertsPerTok,
      moe_intermediate_size: c.moe!.moeIntermediateSize,
      norm_topk_prob: c.moe!.normTopkProb,
      decoder_sparse_step: c.moe!.decoderSparseStep,
      mlp_only_layers: c.moe!.mlpOnlyLayers,
    }),
  },
  gguf: {
    // conversion/qwen.py Qwen3MoeModel (a Qwen2MoeModel): LLM_ARCH_QWEN3MOE. src/models/qwen3moe.cpp
    // makes every layer sparse and always renormalizes the top-k weights (build_moe_ffn norm_w = true).
    arch: "qwen3moe",
    rope: "neox",
    ropeFreqsTensor: false,
    check(c) {
      const moe = c.moe ?? refuse(c, "config has no mixture of experts");
      if (!moe.normTopkProb) refuse(c, "norm_topk_prob false: llama.cpp's qwen3moe always renormalizes the chosen experts' weights");
      if (moe.mlpOnlyLayers.length > 0 || moe.decoderSparseStep !== 1) refuse(c, "dense layers (mlp_only_layers / decoder_sparse_step): llama.cpp's qwen3moe makes every layer sparse");
    },
    hparams: (c) => ({
      ...commonHparams(c),
      expert_count: gguf.uint32(c.moe!.numExperts),
      expert_used_count: gguf.uint32(c.moe!.numExpertsPerTok),
      expert_feed_forward_length: gguf.uint32(c.moe!.moeIntermediateSize),
    }),
    tensors: QWEN3_MOE_TENSORS,
    configJson: (h) => ({
      ...commonConfigJson(h),
      num_experts: h.num("expert_count"),
      num_experts_per_tok: h.num("expert_used_count"),
      moe_intermediate_size: h.num("expert_feed_forward_length"),
      norm_topk_prob: true,
    }),
  },
  demo: {
    name: "qwen3_moe" as const,
    tokenizer: "qwen3" as const,
    config: (base) => ({
      ...qwen3.demo.config(base),
      modelType: "qwen3_moe",
      moe: { numExperts: 16, numExpertsPerTok: 4, moeIntermediateSize: 384, normTopkProb: true, decoderSparseStep: 1, mlpOnlyLayers: [] },
    }),
    tiny: (tiny, full) => ({ ...tiny, moe: { ...full.moe!, numExperts: 8, numExpertsPerTok: 2, moeIntermediateSize: 32 } }),
  },
} satisfies FamilyDefinition;

function readMoe(json: Record<string, unknown>, numLayers: number, field: ConfigFields, fail: (detail: string) => never): MoeConfig {
  const numExperts = field.positiveInt("num_experts");
  const numExpertsPerTok = field.positiveInt("num_experts_per_tok");
  if (numExpertsPerTok > numExperts) fail(`num_experts_per_tok (${numExpertsPerTok}) must not exceed num_experts (${numExperts})`);
  const raw = json.mlp_only_layers ?? [];
  if (!Array.isArray(raw) || !raw.every((l) => typeof l === "number" && Number.isInteger(l) && l >= 0 && l < numLayers)) {
    return fail(`mlp_only_layers must be a list of layer indices below ${numLayers}`);
  }
  return {
    numExperts,
    numExpertsPerTok,
    moeIntermediateSize: field.positiveInt("moe_intermediate_size"),
    normTopkProb: field.optionalBoolean("norm_topk_prob") ?? false,
    decoderSparseStep: field.optionalPositiveInt("decoder_sparse_step") ?? 1,
    mlpOnlyLayers: raw as number[],
  };
}
