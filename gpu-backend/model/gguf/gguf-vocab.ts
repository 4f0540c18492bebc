import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { ModelConfig } from "../config/model-config";
import { GGUF_TOKEN_TYPES, spmVocabulary, type AddedToken, type TokenizerJson } from "./gguf-vocab-spm";
import { gguf, type GgufMetadata } from "./gguf-writer";
import { BPE_SPLIT_REGEXES } from "./gguf-tokenizer";

export { GGUF_TOKEN_TYPES } from "./gguf-vocab-spm";

/**
 * The `tokenizer.*` metadata of a model folder's tokenizer, as llama.cpp's converter writes it
 * (TextModel.get_vocab_base + gguf-py SpecialVocab). A SentencePiece-style BPE (`byte_fallback`:
 * Llama 2, Phi-3, Gemma) becomes `tokenizer.ggml.model` "llama" with scores (see `spmVocabulary`);
 * a byte-level BPE is written as:
 *
 *   tokenizer.ggml.model        "gpt2"
 *   tokenizer.ggml.pre          by the split regex (see BPE_SPLIT_REGEXES, gguf-tokenizer.ts), e.g. "qwen2"
 *   tokenizer.ggml.tokens       one per id in [0, vocab_size): the vocabulary's byte-level text,
 *                               an added token's content, or "[PAD{id}]" for an id with no token
 *   tokenizer.ggml.token_type   normal; control for an added token marked special or looking
 *                               special (<|...|>, <｜...｜>, <unused...>, <pad>, <mask> ...);
 *                               user-defined for the other added tokens; unused for [PAD{id}]
 *   tokenizer.ggml.merges       "left right" strings, in rank order
 *   tokenizer.ggml.{bos,eos,unknown,seperator,padding}_token_id
 *                               from tokenizer_config.json's <kind>_token text, else config.json's
 *                               <kind>_token_id
 *   tokenizer.ggml.add_{bos,eos}_token   tokenizer_config.json's add_bos_token / add_eos_token, if set
 *   tokenizer.chat_template     the chat template
 *
 * The special token ids, add_bos/add_eos and the chat template are written for both.
 *
 * @throws Error for a tokenizer that is not BPE or has an unknown pre-tokenizer or normalizer
 * @example
 * const meta = ggufTokenizerMetadata(checkpoint.dir, checkpoint.config, checkpoint.chatTemplate);
 * meta["tokenizer.ggml.pre"]; // { type: "string", value: "qwen2" }
 */
export function ggufTokenizerMetadata(dir: string, config: ModelConfig, chatTemplate: string): GgufMetadata {
  const tokenizerPath = join(dir, "tokenizer.json");
  const json = JSON.parse(readFileSync(tokenizerPath, "utf8")) as TokenizerJson;
  const tokenizerConfig = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")) as Record<string, unknown>;
  const model = json.model;
  if (model?.type !== "BPE" || !model.vocab || !model.merges) throw new Error(`${tokenizerPath}: GGUF export supports BPE tokenizers only (model.type ${JSON.stringify(model?.type)})`);
  const vocabSize = config.vocabSize;
  const added = new Map<number, AddedToken>();
  for (const t of json.added_tokens ?? []) added.set(t.id, t);
  const out = model.byte_fallback === true ? spmVocabulary(json, vocabSize, tokenizerPath, looksSpecial) : byteLevelVocabulary(json, added, vocabSize, tokenizerPath);

  const idOf = (content: string): number | undefined => {
    for (const t of added.values()) if (t.content === content) return t.id;
    return model.vocab![content];
  };
  const fromConfig: Record<string, number | undefined> = { bos: config.bosTokenIds[0], eos: config.eosTokenIds[0] };
  const keys: [kind: string, key: string][] = [
    ["bos", "bos_token_id"],
    ["eos", "eos_token_id"],
    ["unk", "unknown_token_id"],
    ["sep", "seperator_token_id"],
    ["pad", "padding_token_id"],
  ];
  for (const [kind, key] of keys) {
    const text = tokenText(tokenizerConfig[`${kind}_token`]);
    const id = (text === null ? undefined : idOf(text)) ?? fromConfig[kind];
    if (id !== undefined && id < vocabSize) out[`tokenizer.ggml.${key}`] = gguf.uint32(id);
  }
  for (const kind of ["bos", "eos"]) {
    const flag = tokenizerConfig[`add_${kind}_token`];
    if (typeof flag === "boolean") out[`tokenizer.ggml.add_${kind}_token`] = gguf.bool(flag);
  }
  out["tokenizer.chat_template"] = gguf.string(chatTemplate);
  return out;
}

/** tokenizer.ggml.model "gpt2": byte-level text, merges, the pre-tokenizer by its split regex. */
function byteLevelVocabulary(json: TokenizerJson, added: Map<number, AddedToken>, vocabSize: number, tokenizerPath: string): GgufMetadata {
  const model = json.model!;
  const byId = new Map<number, string>();
  for (const [text, id] of Object.entries(model.vocab!)) byId.set(id, text);
  for (const t of added.values()) byId.set(t.id, t.content);
  const tokens: string[] = new Array(vocabSize);
  const types: number[] = new Array(vocabSize);
  for (let id = 0; id < vocabSize; id++) {
    const text = byId.get(id);
    const a = added.get(id);
    if (text === undefined) {
      tokens[id] = `[PAD${id}]`;
      types[id] = GGUF_TOKEN_TYPES.unused;
    } else if (a) {
      const control = a.special === true || looksSpecial(a.content);
      tokens[id] = control ? a.content : a.content.replaceAll("\u2581", " ");
      types[id] = control ? GGUF_TOKEN_TYPES.control : GGUF_TOKEN_TYPES.userDefined;
    } else {
      tokens[id] = text;
      types[id] = GGUF_TOKEN_TYPES.normal;
    }
  }
  for (const id of byId.keys()) if (id >= vocabSize) throw new Error(`${tokenizerPath}: token id ${id} is not below vocab_size ${vocabSize}`);
  const merges = model.merges!.map((m) => (typeof m === "string" ? m : `${m[0]} ${m[1]}`));
  return {
    "tokenizer.ggml.model": gguf.string("gpt2"),
    "tokenizer.ggml.pre": gguf.string(preTokenizerName(json.pre_tokenizer, tokenizerPath)),
    "tokenizer.ggml.tokens": gguf.strings(tokens),
    "tokenizer.ggml.token_type": gguf.int32s(types),
    "tokenizer.ggml.merges": gguf.strings(merges),
  };
}

/** The converter's does_token_look_special: added tokens that ought to be control tokens. */
function looksSpecial(text: string): boolean {
  return (
    ["<pad>", "<mask>", "<2mass>", "[@BOS@]"].includes(text) ||
    (text.startsWith("<|") && text.endsWith("|>")) ||
    (text.startsWith("<\uff5c") && text.endsWith("\uff5c>")) ||
    (text.startsWith("<unused") && text.endsWith(">"))
  );
}

function preTokenizerName(preTokenizer: unknown, path: string): string {
  const regexes: string[] = [];
  const visit = (node: unknown) => {
    if (typeof node !== "object" || node === null) return;
    const n = node as { type?: string; pattern?: { Regex?: string }; pretokenizers?: unknown[] };
    if (n.type === "Split" && typeof n.pattern?.Regex === "string") regexes.push(n.pattern.Regex);
    for (const child of n.pretokenizers ?? []) visit(child);
  };
  visit(preTokenizer);
  const match = Object.entries(BPE_SPLIT_REGEXES).find(([, regex]) => regexes.length === 1 && regexes[0] === regex);
  if (!match) {
    throw new Error(`${path}: unknown BPE pre-tokenizer (split regexes ${JSON.stringify(regexes)}); add it to BPE_SPLIT_REGEXES in gguf-tokenizer.ts with llama.cpp's tokenizer.ggml.pre name`);
  }
  return match[0];
}

function tokenText(v: unknown): string | null {
  if (typeof v === "string") return v;
  if (typeof v === "object" && v !== null && typeof (v as { content?: unknown }).content === "string") return (v as { content: string }).content;
  return null;
}
