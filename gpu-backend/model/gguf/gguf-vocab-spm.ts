import { gguf, type GgufMetadata } from "./gguf-writer";

/** llama.cpp's token types (`llama_token_type`, gguf-py TokenType). */
export const GGUF_TOKEN_TYPES = { normal: 1, unknown: 2, control: 3, userDefined: 4, unused: 5, byte: 6 } as const;

/** The parts of a tokenizer.json the GGUF vocabulary writers read. */
export interface TokenizerJson {
  model?: {
    type?: string;
    byte_fallback?: boolean;
    unk_token?: string | null;
    vocab?: Record<string, number>;
    merges?: (string | [string, string])[];
  };
  added_tokens?: AddedToken[];
  normalizer?: unknown;
  pre_tokenizer?: unknown;
}

export interface AddedToken {
  id: number;
  content: string;
  special?: boolean;
}

/**
 * The `tokenizer.*` vocabulary of a SentencePiece-style BPE tokenizer.json (BPE with
 * `byte_fallback`, `▁` for spaces: Llama 2, Mistral, Phi-3, Gemma) as llama.cpp's SPM tokenizer
 * (`tokenizer.ggml.model` "llama") reads it, without the tokenizer.model the converter reads:
 *
 *   tokens       one per id in [0, vocab_size): the piece (`▁` kept), an added token's content,
 *                "[PAD{id}]" for an id with no token
 *   scores       -(rank of the first merge that produces the piece); pieces no merge produces
 *                (single characters, bytes, added tokens) -(merges + 1)
 *   token_type   byte for <0xXX>, unknown for the unk token, control for added tokens marked special
 *                or looking special, user-defined for the other added tokens, unused for [PAD{id}],
 *                normal otherwise
 *   add_space_prefix   true when the normalizer prepends "▁" (Llama 2), false otherwise (Gemma)
 *
 * Why scores by merge rank: llama.cpp's SPM merges, among adjacent symbol pairs whose concatenation
 * is a piece, the one whose piece scores highest (the leftmost on ties); Hugging Face's BPE merges
 * the pair of lowest merge rank (the leftmost on ties). With score = -rank both pick the same pair
 * whenever every concatenation that is a piece is also a listed merge, which holds for tokenizer.json
 * files converted from SentencePiece (every split of a piece into two pieces is a merge).
 *
 * @throws Error for a normalizer or pre-tokenizer llama.cpp's SPM tokenizer does not reproduce
 */
export function spmVocabulary(json: TokenizerJson, vocabSize: number, path: string, looksSpecial: (text: string) => boolean): GgufMetadata {
  const model = json.model!;
  const addSpacePrefix = spmAddSpacePrefix(json.normalizer, path);
  checkPreTokenizer(json.pre_tokenizer, path);
  const merges = model.merges ?? [];
  const rankOf = new Map<string, number>();
  merges.forEach((m, rank) => {
    const [left, right] = typeof m === "string" ? splitMerge(m) : m;
    const piece = left + right;
    if (!rankOf.has(piece)) rankOf.set(piece, rank);
  });
  const lowest = -(merges.length + 1);

  const tokens: string[] = Array.from({ length: vocabSize }, (_, id) => `[PAD${id}]`);
  const scores = new Float32Array(vocabSize).fill(lowest);
  const types: number[] = new Array<number>(vocabSize).fill(GGUF_TOKEN_TYPES.unused);
  const place = (id: number, text: string, type: number) => {
    if (id >= vocabSize) throw new Error(`${path}: token id ${id} is not below vocab_size ${vocabSize}`);
    tokens[id] = text;
    types[id] = type;
    const rank = rankOf.get(text);
    scores[id] = rank === undefined ? lowest : -rank;
  };
  for (const [text, id] of Object.entries(model.vocab ?? {})) {
    const type = /^<0x[0-9A-F]{2}>$/.test(text) ? GGUF_TOKEN_TYPES.byte : text === model.unk_token ? GGUF_TOKEN_TYPES.unknown : GGUF_TOKEN_TYPES.normal;
    place(id, text, type);
  }
  for (const t of json.added_tokens ?? []) {
    if (t.content === model.unk_token) continue;
    place(t.id, t.content, t.special === true || looksSpecial(t.content) ? GGUF_TOKEN_TYPES.control : GGUF_TOKEN_TYPES.userDefined);
  }
  return {
    "tokenizer.ggml.model": gguf.string("llama"),
    "tokenizer.ggml.pre": gguf.string("default"),
    "tokenizer.ggml.tokens": gguf.strings(tokens),
    "tokenizer.ggml.scores": gguf.float32s(Array.from(scores)),
    "tokenizer.ggml.token_type": gguf.int32s(types),
    "tokenizer.ggml.add_space_prefix": gguf.bool(addSpacePrefix),
  };
}

/** A "left right" merge; a piece may itself hold no space (`▁` stands for spaces). */
function splitMerge(m: string): [string, string] {
  const i = m.indexOf(" ", 1);
  return [m.slice(0, i), m.slice(i + 1)];
}

/**
 * Replace(" " → "▁") alone (Gemma: no prefix) or with a leading Prepend("▁") (Llama 2: llama.cpp's
 * add_space_prefix, a space before the text and after every special token).
 */
function spmAddSpacePrefix(normalizer: unknown, path: string): boolean {
  const n = normalizer as { type?: string; normalizers?: unknown[]; prepend?: string; pattern?: { String?: string }; content?: string } | null;
  const isReplace = (x: unknown) => {
    const r = x as typeof n;
    return r?.type === "Replace" && r.pattern?.String === " " && r.content === "\u2581";
  };
  if (isReplace(n)) return false;
  const parts = n?.type === "Sequence" ? (n.normalizers ?? []) : [];
  const prepend = parts[0] as typeof n;
  if (parts.length === 2 && prepend?.type === "Prepend" && prepend.prepend === "\u2581" && isReplace(parts[1])) return true;
  throw new Error(`${path}: SentencePiece-style normalizer ${JSON.stringify(normalizer)} is not one llama.cpp's SPM tokenizer reproduces (Replace " " with "▁", optionally after Prepend "▁")`);
}

/** None, or Gemma's Split on " " (a no-op: the normalizer already turned spaces into "▁"). */
function checkPreTokenizer(pre: unknown, path: string): void {
  const p = pre as { type?: string; pattern?: { String?: string } } | null | undefined;
  if (p === null || p === undefined) return;
  if (p.type === "Split" && p.pattern?.String === " ") return;
  throw new Error(`${path}: pre-tokenizer ${JSON.stringify(pre)} of a SentencePiece-style tokenizer is not supported by the GGUF export`);
}
