/**
 * What the decoder graph and the reference forward pass need to know about a Llama-family model.
 * Built from a checkpoint's config (see `checkpoint-model.ts`) or written directly in tests.
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
  /** Rotary inverse frequencies, length headDim / 2 (rope scaling already applied). */
  invFreq: Float32Array;
  /** Longest context the model accepts (positions 0 .. maxPositions-1). */
  maxPositions: number;
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
  };
}

export const EMBED_WEIGHT = "model.embed_tokens.weight";
export const FINAL_NORM_WEIGHT = "model.norm.weight";
export const LM_HEAD_WEIGHT = "lm_head.weight";

/** Rotary cos/sin tables of shape [maxPositions, headDim], halves duplicated as in HF Llama. */
export function ropeTables(spec: DecoderSpec): { cos: Float32Array; sin: Float32Array } {
  const half = spec.headDim / 2;
  const cos = new Float32Array(spec.maxPositions * spec.headDim);
  const sin = new Float32Array(spec.maxPositions * spec.headDim);
  for (let p = 0; p < spec.maxPositions; p++) {
    for (let i = 0; i < half; i++) {
      // HF computes the angle in fp32: Math.fround keeps the tables identical to its cache.
      const angle = Math.fround(p * spec.invFreq[i]!);
      const c = Math.cos(angle);
      const s = Math.sin(angle);
      cos[p * spec.headDim + i] = c;
      cos[p * spec.headDim + i + half] = c;
      sin[p * spec.headDim + i] = s;
      sin[p * spec.headDim + i + half] = s;
    }
  }
  return { cos, sin };
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
  const linearParams = L * (h * (nh + 2 * nkv) * hd + nh * hd * h + 3 * h * inter);
  return Math.round((0.5 * 2 * linearParams) / (4 * nh * hd * L));
}
