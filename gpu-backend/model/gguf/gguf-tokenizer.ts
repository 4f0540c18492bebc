import { GGUF_TOKEN_TYPES } from "./gguf-vocab-spm";
import type { GgufMetadata } from "./gguf-writer";

/**
 * A GGUF file's vocabulary (`tokenizer.*` metadata) as the tokenizer.json and tokenizer_config.json
 * objects a model folder would carry, for `Tokenizer` (@huggingface/tokenizers): the inverse of
 * gguf-vocab.ts / gguf-vocab-spm.ts, and what llama.cpp's tokenizers do with the same metadata.
 *
 *   "gpt2"   byte-level BPE: vocab from tokens, merges as given, the pre-tokenizer by
 *            `tokenizer.ggml.pre` (`BPE_PRE_TOKENIZERS`), ByteLevel decoder
 *   "llama"  SentencePiece: a BPE with byte fallback whose merges are every split of a normal (or
 *            user-defined) piece into two such pieces, ranked by the piece's score (highest first; transformers'
 *            SentencePieceExtractor does the same), so that the lowest-ranked merge is the pair
 *            llama.cpp's SPM tokenizer merges first; `add_space_prefix` (default true) prepends "▁"
 *
 * Added tokens: control and unknown tokens special, user-defined ones not; Phi-3's special tokens
 * strip the whitespace after them, as llama.cpp sets for a Phi-3 model (llama-vocab.cpp).
 * End-of-turn ids: eos, eot and eom ids, and the control tokens llama.cpp treats as end of
 * generation by their text (`EOG_TEXTS`).
 */
export interface GgufTokenizer {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  bosTokenId: number | null;
  eosTokenIds: number[];
  chatTemplate: string | null;
}

/**
 * The pre-tokenizers that are one Split regex, by llama.cpp's `tokenizer.ggml.pre` name: the one
 * table for both directions (the loader below builds their pre-tokenizers; the GGUF writer,
 * gguf-vocab.ts, names a tokenizer.json's Split by it). llama.cpp's converter identifies a tokenizer
 * by hashing its encoding of a fixed text (get_vocab_base_pre); matching the Split regex instead is
 * what the name selects in llama.cpp (src/llama-vocab.cpp). Add an entry for another BPE tokenizer.
 */
export const BPE_SPLIT_REGEXES = {
  // Qwen2, Qwen2.5, Qwen3 (llama-vocab.cpp LLAMA_VOCAB_PRE_TYPE_QWEN2)
  qwen2: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  // Llama 3 (LLAMA_VOCAB_PRE_TYPE_LLAMA3)
  "llama-bpe": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
} as const;

/** llama.cpp's `tokenizer.ggml.pre` names and the Hugging Face pre-tokenizer each stands for. */
const BPE_PRE_TOKENIZERS: Record<string, { preTokenizer: unknown; normalizer?: unknown; ignoreMerges?: boolean }> = {
  qwen2: { normalizer: { type: "NFC" }, preTokenizer: split(BPE_SPLIT_REGEXES.qwen2) },
  "llama-bpe": { ignoreMerges: true, preTokenizer: split(BPE_SPLIT_REGEXES["llama-bpe"]) },
  // SmolLM / SmolLM2 (StarCoder's tokenizer): every numeric character alone, then GPT-2's byte-level
  // split. As a \p{N} Split, not Hugging Face's Digits: @huggingface/tokenizers' Digits isolates only
  // decimal digits, where Rust's char::is_numeric and llama.cpp's \p{N} also take "½", "²", "Ⅻ"
  // (the agent corpus's " ½" tokenized as " \xc2", "\xbd" instead of llama.cpp's " ", "½").
  smollm: { preTokenizer: numericsThenByteLevel() },
  starcoder: { preTokenizer: numericsThenByteLevel() },
  gpt2: { preTokenizer: byteLevel(true) },
  default: { preTokenizer: byteLevel(true) },
};
BPE_PRE_TOKENIZERS.llama3 = BPE_PRE_TOKENIZERS["llama-bpe"]!;

/** Token texts llama.cpp ends generation on (llama-vocab.cpp, special_eog_ids by text). */
const EOG_TEXTS = new Set(["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>"]);

function split(regex: string) {
  return { type: "Sequence", pretokenizers: [{ type: "Split", pattern: { Regex: regex }, behavior: "Isolated", invert: false }, byteLevel(false)] };
}

function numericsThenByteLevel() {
  return { type: "Sequence", pretokenizers: [{ type: "Split", pattern: { Regex: "\\p{N}" }, behavior: "Isolated", invert: false }, byteLevel(true)] };
}

function byteLevel(useRegex: boolean) {
  return { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: useRegex };
}

/**
 * The tokenizer files of a GGUF file's metadata.
 *
 * @throws Error naming the metadata key at fault (a missing vocabulary, an unknown model or pre-tokenizer)
 * @example
 * const { tokenizerJson, tokenizerConfig, eosTokenIds } = ggufTokenizer(file.metadata, "phi3");
 * new Tokenizer({ tokenizerJson, tokenizerConfig, eosTokenIds });
 */
export function ggufTokenizer(metadata: GgufMetadata, arch: string): GgufTokenizer {
  const get = (key: string) => metadata[key]?.value;
  const model = get("tokenizer.ggml.model");
  const tokens = get("tokenizer.ggml.tokens");
  if (!Array.isArray(tokens) || !tokens.every((t) => typeof t === "string")) throw new Error("metadata tokenizer.ggml.tokens (a list of strings) is missing");
  const rawTypes = get("tokenizer.ggml.token_type");
  const types: number[] = Array.isArray(rawTypes) ? (rawTypes as number[]) : tokens.map(() => GGUF_TOKEN_TYPES.normal);
  if (types.length !== tokens.length) throw new Error(`metadata tokenizer.ggml.token_type has ${types.length} entries for ${tokens.length} tokens`);
  const id = (key: string): number | null => {
    const v = get(`tokenizer.ggml.${key}`);
    return typeof v === "number" && v >= 0 && v < tokens.length ? v : null;
  };
  const flag = (key: string) => {
    const v = get(`tokenizer.ggml.${key}`);
    return typeof v === "boolean" ? v : undefined;
  };

  const vocab: Record<string, number> = {};
  tokens.forEach((t, i) => {
    if (!(t in vocab)) vocab[t] = i;
  });
  const phi3 = arch === "phi3";
  const added = tokens.flatMap((content, i) => {
    const type = types[i];
    if (type !== GGUF_TOKEN_TYPES.control && type !== GGUF_TOKEN_TYPES.userDefined && type !== GGUF_TOKEN_TYPES.unknown) return [];
    const special = type !== GGUF_TOKEN_TYPES.userDefined;
    // llama-vocab.cpp for a Phi-3 model: every special token strips the whitespace after it, and </s>; not <unk>, <s>, <|endoftext|>.
    const rstrip = phi3 && (special || content === "</s>") && !["<unk>", "<s>", "<|endoftext|>"].includes(content);
    return [{ id: i, content, single_word: false, lstrip: false, rstrip, normalized: false, special }];
  });

  let json: Record<string, unknown>;
  if (model === "gpt2") {
    const merges = get("tokenizer.ggml.merges");
    if (!Array.isArray(merges)) throw new Error('metadata tokenizer.ggml.merges is missing (tokenizer.ggml.model "gpt2" needs it)');
    const preName = String(get("tokenizer.ggml.pre") ?? "default");
    const pre = BPE_PRE_TOKENIZERS[preName];
    if (!pre) throw new Error(`metadata tokenizer.ggml.pre ${JSON.stringify(preName)} is not a known pre-tokenizer (known: ${Object.keys(BPE_PRE_TOKENIZERS).join(", ")}; add it to BPE_PRE_TOKENIZERS in gguf-tokenizer.ts)`);
    json = {
      version: "1.0",
      truncation: null,
      padding: null,
      added_tokens: added,
      normalizer: pre.normalizer ?? null,
      pre_tokenizer: pre.preTokenizer,
      post_processor: byteLevel(false),
      decoder: byteLevel(false),
      model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: pre.ignoreMerges ?? false, vocab, merges },
    };
  } else if (model === "llama") {
    const scores = get("tokenizer.ggml.scores");
    if (!Array.isArray(scores) || scores.length !== tokens.length) throw new Error('metadata tokenizer.ggml.scores (one per token) is missing (tokenizer.ggml.model "llama" needs it)');
    const prefix = flag("add_space_prefix") ?? true;
    const replace = { type: "Replace", pattern: { String: " " }, content: "\u2581" };
    const unk = id("unknown_token_id");
    json = {
      version: "1.0",
      truncation: null,
      padding: null,
      added_tokens: added,
      normalizer: prefix ? { type: "Sequence", normalizers: [{ type: "Prepend", prepend: "\u2581" }, replace] } : replace,
      pre_tokenizer: null,
      post_processor: null,
      decoder: {
        type: "Sequence",
        decoders: [{ type: "Replace", pattern: { String: "\u2581" }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" }, ...(prefix ? [{ type: "Strip", content: " ", start: 1, stop: 0 }] : [])],
      },
      model: {
        type: "BPE",
        dropout: null,
        unk_token: unk === null ? null : tokens[unk],
        continuing_subword_prefix: null,
        end_of_word_suffix: null,
        fuse_unk: true,
        byte_fallback: true,
        ignore_merges: false,
        vocab,
        merges: spmMerges(tokens, scores as number[], types),
      },
    };
  } else {
    throw new Error(`metadata tokenizer.ggml.model ${JSON.stringify(model)} is not supported (supported: "gpt2" byte-level BPE, "llama" SentencePiece)`);
  }

  const bos = id("bos_token_id");
  const eos = id("eos_token_id");
  const text = (i: number | null) => (i === null ? null : tokens[i]!);
  const eosTokenIds = [eos, id("eot_token_id"), id("eom_token_id")].filter((i): i is number => i !== null);
  tokens.forEach((t, i) => {
    if (EOG_TEXTS.has(t) && (types[i] === GGUF_TOKEN_TYPES.control || types[i] === GGUF_TOKEN_TYPES.userDefined)) eosTokenIds.push(i);
  });
  const template = get("tokenizer.chat_template");
  const tokenizerConfig: Record<string, unknown> = {
    bos_token: text(bos),
    eos_token: text(eos),
    unk_token: text(id("unknown_token_id")),
    pad_token: text(id("padding_token_id")),
    add_bos_token: flag("add_bos_token") ?? false,
    add_eos_token: flag("add_eos_token") ?? false,
    clean_up_tokenization_spaces: false,
    ...(typeof template === "string" ? { chat_template: template } : {}),
  };
  return { tokenizerJson: json, tokenizerConfig, bosTokenId: bos, eosTokenIds: [...new Set(eosTokenIds)], chatTemplate: typeof template === "string" ? template : null };
}

/**
 * Merges of a SentencePiece vocabulary: every split of a normal or user-defined piece (Gemma's
 * whitespace runs "▁▁▁▁" are user-defined) into two such pieces, pieces by score (highest first,
 * then id), splits of one piece by their left then right id.
 */
function spmMerges(tokens: readonly string[], scores: readonly number[], types: readonly number[]): [string, string][] {
  const normal = new Map<string, number>();
  tokens.forEach((t, i) => {
    if ((types[i] === GGUF_TOKEN_TYPES.normal || types[i] === GGUF_TOKEN_TYPES.userDefined) && !normal.has(t)) normal.set(t, i);
  });
  const pieces: { id: number; score: number; splits: [number, number, string, string][] }[] = [];
  for (const [piece, id] of normal) {
    const chars = Array.from(piece);
    if (chars.length < 2) continue;
    const splits: [number, number, string, string][] = [];
    let left = "";
    for (let k = 1; k < chars.length; k++) {
      left += chars[k - 1];
      const right = piece.slice(left.length);
      const l = normal.get(left);
      const r = normal.get(right);
      if (l !== undefined && r !== undefined) splits.push([l, r, left, right]);
    }
    if (splits.length > 0) pieces.push({ id, score: scores[id]!, splits });
  }
  pieces.sort((a, b) => b.score - a.score || a.id - b.id);
  const out: [string, string][] = [];
  for (const p of pieces) {
    p.splits.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    for (const s of p.splits) out.push([s[2], s[3]]);
  }
  return out;
}
