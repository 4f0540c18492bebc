import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exportGguf } from "../export/gguf-export";
import { loadCheckpoint, type Checkpoint } from "./checkpoint";
import { DEMO_FAMILIES, TOKENIZER_OF, tinyFamilyConfig } from "./demo-families";
import { materializeModel } from "./demo-model";
import { writeFamilyTokenizer } from "./family-tokenizers";
import { loadGgufCheckpoint } from "./gguf-checkpoint";

/**
 * The tokenizer and chat template a GGUF file's `tokenizer.*` metadata builds (gguf-tokenizer.ts)
 * against the folder's tokenizer.json, for every demo family's real tokenizer (Qwen3's byte-level
 * BPE, Gemma 3's and Phi-3's SentencePiece): the same ids for a mixed corpus, the same text back,
 * the same special tokens, end-of-turn ids and rendered chats.
 */
const root = mkdtempSync(join(tmpdir(), "gguf-tokenizer-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const CORPUS = [
  "Hello world",
  "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
  "  two leading spaces, trailing   \t\ttabs\n\n\nthree newlines   ",
  "ünïcödé Ünïcode 日本語のテキスト 中文 한국어 emoji 🤖🚀👍🏽 math ∑∫√ arrows → ←",
  "numbers 1234567890 3.14159 1,000,000 and 0x1F",
  "don't won't I'm we'll they've it's DON'T",
  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
  "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n<bos><eos>",
  "<|system|>\nbe brief<|end|>\n<|user|>\nquestion<|end|>\n<|assistant|>\nanswer<|end|><|endoftext|></s> <s>",
  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
  "    indented\n\tcode {\n\t\treturn;\n\t}\r\nwindows line",
  "a",
  " ",
];

const CHAT = {
  messages: [
    { role: "system" as const, content: "You are terse." },
    { role: "user" as const, content: "What is 2+2?" },
    { role: "assistant" as const, content: "4" },
    { role: "user" as const, content: "And the weather in Paris?" },
  ],
  tools: [{ type: "function" as const, function: { name: "get_weather", description: "Weather of a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }],
  addGenerationPrompt: true,
};

describe.each(DEMO_FAMILIES)("GGUF tokenizer: %s", (family) => {
  let folder: Checkpoint;
  let gguf: Checkpoint;
  beforeAll(async () => {
    const tokenizerDir = join(root, `tokenizer-${TOKENIZER_OF[family]}`);
    const info = await writeFamilyTokenizer(TOKENIZER_OF[family], tokenizerDir);
    const base = tinyFamilyConfig(family, info);
    const config = base.queryPreAttnScalar === null ? base : { ...base, queryPreAttnScalar: base.headDim };
    folder = await loadCheckpoint(await materializeModel({ dir: join(root, family), config, seed: 2, tokenizerFrom: tokenizerDir }));
    const path = join(root, `${family}.gguf`);
    exportGguf(folder, path, { fileType: "Q4_0" });
    gguf = await loadGgufCheckpoint(path);
  }, 120_000);

  it("encodes the mixed corpus to the folder's ids and decodes them to the same text", () => {
    for (const text of CORPUS) {
      const ids = folder.tokenizer.encode(text);
      expect(gguf.tokenizer.encode(text), JSON.stringify(text)).toEqual(ids);
      expect(gguf.tokenizer.decode(ids), JSON.stringify(text)).toBe(folder.tokenizer.decode(ids));
    }
  });

  it("has the folder's special tokens, bos/eos texts and end-of-turn ids", () => {
    // Special: the folder's, and the added tokens llama.cpp's converter makes control tokens by
    // their look (gguf-vocab.ts' looksSpecial: Qwen3's <|fim_prefix|>, Gemma's <unused0> ... are not special in their tokenizer.json).
    const special = [...gguf.tokenizer.specialTokenIds];
    expect(special).toEqual(expect.arrayContaining([...folder.tokenizer.specialTokenIds]));
    const extra = special.filter((id) => !folder.tokenizer.specialTokenIds.has(id)).map((id) => folder.tokenizer.decode([id]));
    expect(extra.filter((t) => !/^<\|.*\|>$|^<unused\d+>$|^<mask>$|^<pad>$|^<2mass>$|^\[@BOS@\]$/.test(t))).toEqual([]);
    expect(gguf.tokenizer.eosToken).toBe(folder.tokenizer.eosToken);
    // The folder's end-of-turn ids that llama.cpp ends turns on are all among the GGUF's: its
    // eos_token (tokenizer_config.json's, as the writer stores it) and the end-of-generation texts.
    // Not kept: Gemma's <eos> (its tokenizer_config.json's eos_token is <end_of_turn>), Phi-3's <|assistant|>.
    const eog = new Set([folder.tokenizer.eosToken, "<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|end|>"]);
    const expected = folder.config.eosTokenIds.filter((id) => eog.has(folder.tokenizer.decode([id])));
    expect(expected.length).toBeGreaterThan(0);
    expect(gguf.config.eosTokenIds).toEqual(expect.arrayContaining(expected));
    expect(gguf.tokenizer.vocabEncoding).toEqual(folder.tokenizer.vocabEncoding);
  });

  it("renders a chat with tools as the folder does", () => {
    expect(gguf.chatTemplate).toBe(folder.chatTemplate);
    expect(gguf.template.render(CHAT)).toBe(folder.template.render(CHAT));
  });
});
