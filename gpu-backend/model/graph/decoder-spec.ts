/**
 * What the decoder graph and the reference forward pass need to know about a model. Built from a
 * checkpoint's config (`decoderSpecOf` in model/checkpoint/decoder-spec-of.ts) or written
 * directly in tests (`tinySpec`). The family traits are spelled out as the features they switch
 * on, so the graph never asks which family it builds.
 */
export interface DecoderSpec {
  modelId: string;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  rmsNormEps: number;
  vocabSize: number;
  tieWordEmbeddings: boolean;
  attentionBias: boolean;
  /** Rotary inverse frequencies, length rotaryDim / 2 (rope scaling already applied). */
  invFreq: Float32Array;
  /** Longest context the model accepts (positions 0 .. maxPositions-1). */
  maxPositions: number;
  /** Leading dimensions of each head that rotate; the rest pass through (Phi-4-mini: 3/4 of headDim). */
  rotaryDim: number;
  /** cos and sin are multiplied by this (LongRoPE's attention factor; 1 otherwise). */
  ropeScale: number;
  /** Sliding-window layers' rotary frequencies when they differ (Gemma 3's local base); null: `invFreq`. */
  localInvFreq: Float32Array | null;
  /** Per layer: its sliding window (a query at p sees keys at p - window + 1 .. p), or null for full attention. */
  layerWindows: (number | null)[];
  /** Per layer: whether q and k rotate (false: SmolLM3's layers without rotary, "NoPE"). */
  ropeLayers: boolean[];
  /** Attention scores are q·k x this (1 / sqrt(headDim), or Gemma 3's query_pre_attn_scalar^-0.5). */
  attentionScale: number;
  /** Per-head RMSNorm of q and k before rotary (Qwen3, Gemma 3). */
  qkNorm: boolean;
  /** Added to every RMSNorm weight: Gemma scales by (1 + weight). */
  normOffset: number;
  /** Gemma's norms after attention and around the MLP (post_attention, pre_ and post_feedforward). */
  sandwichNorms: boolean;
  /** Token embeddings are multiplied by this (Gemma: sqrt(hidden)). */
  embedScale: number;
  /** The gated MLP's activation: SwiGLU's silu or GeGLU's tanh-approximated GELU. */
  mlpActivation: "silu" | "gelu_tanh";
  /** The mixture-of-experts MLP of the sparse layers (Qwen3-MoE), or null. */
  moe: MoeSpec | null;
}

export interface MoeSpec {
  numExperts: number;
  /** Experts per token. */
  topK: number;
  /** Width of each expert's MLP. */
  intermediateSize: number;
  /** Renormalize the chosen experts' weights to sum to 1. */
  normTopkProb: boolean;
  /** Per layer: true where the MLP is the mixture of experts. */
  sparseLayers: boolean[];
}

/**
 * Float32 weights by their Hugging Face names, in Hugging Face layout ([out, in] for linears).
 * Owners may drop a tensor after `take` to free memory.
 */
export interface WeightSource {
  take(name: string): Float32Array;
  has(name: string): boolean;
}

/** Hugging Face tensor names of one decoder layer. */
export function layerWeightNames(layer: number) {
  const p = `model.layers.${layer}`;
  return {
    inputNorm: `${p}.input_layernorm.weight`,
    q: `${p}.self_attn.q_proj.weight`,
    k: `${p}.self_attn.k_proj.weight`,
    v: `${p}.self_attn.v_proj.weight`,
    qBias: `${p}.self_attn.q_proj.bias`,
    kBias: `${p}.self_attn.k_proj.bias`,
    vBias: `${p}.self_attn.v_proj.bias`,
    o: `${p}.self_attn.o_proj.weight`,
    postNorm: `${p}.post_attention_layernorm.weight`,
    gate: `${p}.mlp.gate_proj.weight`,
    up: `${p}.mlp.up_proj.weight`,
    down: `${p}.mlp.down_proj.weight`,
    qNorm: `${p}.self_attn.q_norm.weight`,
    kNorm: `${p}.self_attn.k_norm.weight`,
    preFeedforwardNorm: `${p}.pre_feedforward_layernorm.weight`,
    postFeedforwardNorm: `${p}.post_feedforward_layernorm.weight`,
    router: `${p}.mlp.gate.weight`,
    expert: (e: number) => ({
      gate: `${p}.mlp.experts.${e}.gate_proj.weight`,
      up: `${p}.mlp.experts.${e}.up_proj.weight`,
      down: `${p}.mlp.experts.${e}.down_proj.weight`,
    }),
  };
}

/**
 * An RMSNorm weight as the graph multiplies by it: Gemma's (1 + w), computed in float32 as
 * transformers does, or w itself.
 */
export function normWeight(spec: DecoderSpec, w: Float32Array): Float32Array {
  if (spec.normOffset === 0) return w;
  return Float32Array.from(w, (v) => v + spec.normOffset);
}

export const EMBED_WEIGHT = "model.embed_tokens.weight";
export const FINAL_NORM_WEIGHT = "model.norm.weight";
export const LM_HEAD_WEIGHT = "lm_head.weight";

/**
 * Rotary cos/sin tables of shape [maxPositions, rotaryDim], halves duplicated as in HF Llama,
 * times `ropeScale`; `invFreq` defaults to the full-attention layers' frequencies.
 */
export function ropeTables(spec: DecoderSpec, invFreq: Float32Array = spec.invFreq): { cos: Float32Array; sin: Float32Array } {
  const dim = spec.rotaryDim;
  const half = dim / 2;
  const cos = new Float32Array(spec.maxPositions * dim);
  const sin = new Float32Array(spec.maxPositions * dim);
  for (let p = 0; p < spec.maxPositions; p++) {
    for (let i = 0; i < half; i++) {
      // HF computes the angle in fp32: Math.fround keeps the tables identical to its cache.
      const angle = Math.fround(p * invFreq[i]!);
      const c = Math.fround(Math.cos(angle) * spec.ropeScale);
      const s = Math.fround(Math.sin(angle) * spec.ropeScale);
      cos[p * dim + i] = c;
      cos[p * dim + i + half] = c;
      sin[p * dim + i] = s;
      sin[p * dim + i + half] = s;
    }
  }
  return { cos, sin };
}

/** Whether any layer has a sliding window. */
export function hasSlidingWindows(spec: DecoderSpec): boolean {
  return spec.layerWindows.some((w) => w !== null);
}

/**
 * How many wasted attention score entries one batched prefill token may cost: half the ratio of a
 * token's linear-layer FLOPs (2 x linear parameters) to one score entry's FLOPs across layers
 * (QK and PV: 4 x heads x headDim x layers). For the demo model about 1460.
 *
 * @example new Scheduler(kv, { ..., prefillWastePerToken: prefillWastePerToken(spec) })
 */
export function prefillWastePerToken(spec: DecoderSpec): number {
  const { hiddenSize: h, numHeads: nh, numKvHeads: nkv, headDim: hd, intermediateSize: inter, numLayers: L } = spec;
  // A sparse layer's active MLP is topK experts (plus the router).
  const mlpParams = (l: number) => (spec.moe?.sparseLayers[l] ? 3 * h * spec.moe.intermediateSize * spec.moe.topK + h * spec.moe.numExperts : 3 * h * inter);
  let linearParams = 0;
  for (let l = 0; l < L; l++) linearParams += h * (nh + 2 * nkv) * hd + nh * hd * h + mlpParams(l);
  return Math.round((0.5 * 2 * linearParams) / (4 * nh * hd * L));
}
