import type { ConfigFields } from "../config/config-fields";
import { refuse } from "../gguf/gguf-family";
import type { FamilyDefinition } from "./family";
import { LLAMA_GGUF } from "./llama";

/**
 * SmolLM3: a Llama whose every 4th layer attends without rotary ("NoPE": q and k of layers
 * i with (i + 1) % 4 == 0 are not rotated), by transformers' `no_rope_layers` (one 0/1 per layer,
 * 1: the layer rotates) or, when absent, `no_rope_layer_interval` (default 4). Tied embeddings
 * and rope_theta 2,000,000 by default.
 *
 * The demo carries Qwen3's tokenizer and ChatML template (SmolLM3 chats in ChatML too; its own
 * 128k Llama 3 vocabulary is in no installed package). The tiny config has 4 layers so one of
 * them (layer 3) skips rotary, the pattern llama.cpp's smollm3 hard-codes.
 */

/** llama.cpp's src/models/smollm3.cpp: `n_no_rope_layer_step = 4`, read from no key. */
const LLAMA_CPP_NO_ROPE_STEP = 4;

/** Every `interval`-th layer without rotary (transformers' SmolLM3Config default). */
function everyNthWithoutRope(numLayers: number, interval: number): boolean[] {
  return Array.from({ length: numLayers }, (_, i) => (i + 1) % interval !== 0);
}

export const smollm3 = {
  modelType: "smollm3",
  architecture: "SmolLM3ForCausalLM",
  config: {
    defaults: { rope_theta: 2000000, tie_word_embeddings: true },
    read: (json, field, base, fail) => ({ ropeLayers: readRopeLayers(json, field, base.numHiddenLayers, fail) }),
    write: (c) => ({ no_rope_layers: c.ropeLayers.map((r) => (r ? 1 : 0)) }),
  },
  gguf: {
    // conversion/llama.py SmolLM3Model (a LlamaModel): LLM_ARCH_SMOLLM3, "norm" rope, q/k permuted;
    // its loader creates no rope_freqs and reads no NoPE key.
    ...LLAMA_GGUF,
    arch: "smollm3",
    ropeFreqsTensor: false,
    check(c) {
      const expected = everyNthWithoutRope(c.numHiddenLayers, LLAMA_CPP_NO_ROPE_STEP);
      if (c.ropeLayers.some((r, i) => r !== expected[i])) {
        refuse(c, `no_rope_layers ${JSON.stringify(c.ropeLayers.map(Number))}: llama.cpp's smollm3 skips rotary on every ${LLAMA_CPP_NO_ROPE_STEP}th layer, and only there`);
      }
      if (c.partialRotaryFactor !== 1) refuse(c, `partial_rotary_factor ${c.partialRotaryFactor}: llama.cpp's smollm3 rotates whole heads`);
    },
  },
  demo: {
    name: "smollm3" as const,
    tokenizer: "qwen3" as const,
    // SmolLM3-3B's rotary base and context over the llama demo's shape.
    config: (base) => ({
      ...base,
      modelType: "smollm3",
      ropeTheta: 5000000,
      ropeScaling: null,
      maxPositionEmbeddings: 65536,
      ropeLayers: everyNthWithoutRope(base.numHiddenLayers, 4),
    }),
    tiny: (tiny) => ({
      ...tiny,
      numHiddenLayers: 4,
      layerTypes: Array.from({ length: 4 }, () => "full_attention"),
      ropeLayers: everyNthWithoutRope(4, 4),
    }),
  },
} satisfies FamilyDefinition;

/** `no_rope_layers` (at least one 0/1 per layer, as transformers reads it) or every `no_rope_layer_interval`-th layer. */
function readRopeLayers(json: Record<string, unknown>, field: ConfigFields, numLayers: number, fail: (detail: string) => never): boolean[] {
  const raw = json.no_rope_layers;
  if (raw === undefined || raw === null) return everyNthWithoutRope(numLayers, field.optionalPositiveInt("no_rope_layer_interval") ?? 4);
  if (!Array.isArray(raw) || raw.length < numLayers || !raw.every((x) => x === 0 || x === 1)) {
    return fail(`no_rope_layers must list 0 or 1 for each of the ${numLayers} layers`);
  }
  return raw.slice(0, numLayers).map((x) => x === 1);
}
