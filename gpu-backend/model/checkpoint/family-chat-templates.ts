/**
 * Tool-capable chat templates for model families whose own template has no tools (data: Jinja
 * text for tokenizer_config.json's `chat_template`). `family-tokenizers.ts` writes them.
 */

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
export const GEMMA3_TOOL_TEMPLATE = `{#- Gemma 3 with pythonic tool calls: adapted from vLLM's examples/tool_chat_template_gemma3_pythonic_both.jinja (see family-chat-templates.ts) -#}
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
export const PHI3_TOOL_TEMPLATE = `{#- Phi-3.5-mini-instruct's template with Phi-4-mini-instruct's tool syntax (see family-chat-templates.ts) -#}
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
