import type { DecoderSpec } from "../graph/decoder-spec";
import { tinySpec } from "./tiny-spec";

/**
 * Tiny decoder specs with each supported family's traits, for the executor conformance suite and
 * graph tests. Windows are shorter than the conformance prompt (40 tokens), so sliding-window
 * masking, its cached-prefix reuse and its narrower context gathers are all exercised.
 *
 * @example
 * executorConformance({ name: "cpu gemma3", spec: familySpecs().gemma3, ... });
 */
export function familySpecs(): Record<"llama" | "qwen3" | "gemma3" | "phi3" | "qwen3_moe" | "smollm3", DecoderSpec> {
  const invFreq = (dim: number, base: number, divide = 1) => Float32Array.from({ length: dim / 2 }, (_, i) => 1 / divide / Math.pow(base, (2 * i) / dim));
  return {
    llama: tinySpec(),
    // Qwen3: per-head q/k RMSNorm, head_dim independent of hidden / heads (4 x 24 != 64).
    qwen3: tinySpec({ modelId: "tiny-qwen3", headDim: 24, rotaryDim: 24, attentionScale: 1 / Math.sqrt(24), invFreq: invFreq(24, 1e6), qkNorm: true }),
    // Gemma 3: layer 0 slides (window 8, its own rotary base), layer 1 is global (scaled rotary);
    // (1 + w) norms, sandwich norms, q/k norms, embeddings x sqrt(hidden), query_pre_attn_scalar 24, GeGLU.
    gemma3: tinySpec({
      modelId: "tiny-gemma3",
      layerWindows: [8, null],
      invFreq: invFreq(16, 1e6, 8),
      localInvFreq: invFreq(16, 1e4),
      attentionScale: 1 / Math.sqrt(24),
      qkNorm: true,
      normOffset: 1,
      sandwichNorms: true,
      embedScale: Math.fround(Math.sqrt(64)),
      mlpActivation: "gelu_tanh",
    }),
    // Phi-3 / Phi-4-mini: 3/4 of each head rotates, LongRoPE's attention factor on cos/sin, every layer slides (window 24).
    phi3: tinySpec({ modelId: "tiny-phi3", rotaryDim: 12, invFreq: invFreq(12, 1e4), ropeScale: 1.19, layerWindows: [24, 24] }),
    // Qwen3-MoE: layer 1 is a mixture of 8 experts of 32, 2 per token, renormalized; layer 0 stays dense (mlp_only_layers).
    qwen3_moe: tinySpec({
      modelId: "tiny-qwen3moe",
      qkNorm: true,
      moe: { numExperts: 8, topK: 2, intermediateSize: 32, normTopkProb: true, sparseLayers: [false, true] },
    }),
    // SmolLM3: layer 1 attends without rotary (its q and k are not rotated; "NoPE").
    smollm3: tinySpec({ modelId: "tiny-smollm3", ropeLayers: [true, false] }),
  };
}
