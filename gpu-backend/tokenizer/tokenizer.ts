import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";

/** How a tokenizer is built: the parsed tokenizer.json and tokenizer_config.json of a model folder. */
export interface TokenizerFiles {
  tokenizerJson: unknown;
  tokenizerConfig: unknown;
  /** End-of-turn ids from config.json / generation_config.json, added to tokenizer_config's eos_token. */
  eosTokenIds?: readonly number[];
}

/**
 * A model's tokenizer (wraps @huggingface/tokenizers). Text in and out is exact: encoding never
 * adds special tokens unless asked, special-token text in the input (`<|im_start|>`) becomes its
 * id, and decoding never "cleans up" spaces, so decode(encode(t)) === t and a streamed reply
 * equals its full decode.
 *
 * @example
 * const tokenizer = new Tokenizer({ tokenizerJson, tokenizerConfig, eosTokenIds: [151645] });
 * const ids = tokenizer.encode("<|im_start|>user\nhi<|im_end|>");
 * tokenizer.decode(ids); // "<|im_start|>user\nhi<|im_end|>"
 */
export class Tokenizer {
  /** One past the largest token id (added tokens included). */
  readonly vocabSize: number;
  /** Ids that end a model turn: tokenizer_config's eos_token plus the ids given. */
  readonly eosTokenIds: readonly number[];
  /** tokenizer_config's bos_token text, or null. */
  readonly bosToken: string | null;
  /** tokenizer_config's eos_token text, or null. */
  readonly eosToken: string | null;
  /** Ids of the added tokens marked special (skipped by `decode(ids, { skipSpecialTokens: true })`). */
  readonly specialTokenIds: ReadonlySet<number>;
  /** How the vocabulary's pieces spell bytes (read from tokenizer.json's decoder), for grammar engines. */
  readonly vocabEncoding: VocabEncoding;
  readonly #hf: HfTokenizer;

  constructor(files: TokenizerFiles) {
    if (!isRecord(files.tokenizerJson)) throw new Error("tokenizer.json must be a JSON object");
    const config = files.tokenizerConfig ?? {};
    if (!isRecord(config)) throw new Error("tokenizer_config.json must be a JSON object");
    this.#hf = new HfTokenizer(files.tokenizerJson, config);
    let maxId = -1;
    for (const id of this.#hf.get_vocab(true).values()) if (id > maxId) maxId = id;
    this.vocabSize = maxId + 1;
    this.specialTokenIds = new Set([...this.#hf.get_added_tokens_decoder()].filter(([, t]) => t.special).map(([id]) => id));
    this.vocabEncoding = vocabEncodingOf(files.tokenizerJson.decoder);
    this.bosToken = tokenText(config.bos_token);
    this.eosToken = tokenText(config.eos_token);
    const eos = [...(files.eosTokenIds ?? [])];
    const configEos = this.eosToken === null ? undefined : this.tokenId(this.eosToken);
    if (configEos !== undefined) eos.push(configEos);
    this.eosTokenIds = [...new Set(eos)];
  }

  /**
   * Text to token ids. Special-token text in `text` is recognised; `addSpecialTokens` (default
   * false) adds what the tokenizer's post-processor adds (e.g. a BOS id).
   *
   * @example
   * tokenizer.encode("Hello world"); // [9707, 1879] with Qwen3
   */
  encode(text: string, options: { addSpecialTokens?: boolean } = {}): number[] {
    return this.#hf.encode(text, { add_special_tokens: options.addSpecialTokens ?? false }).ids;
  }

  /**
   * Token ids to text; special tokens are kept unless `skipSpecialTokens`.
   *
   * @example
   * tokenizer.decode([9707, 1879]); // "Hello world"
   */
  decode(tokenIds: readonly number[], options: { skipSpecialTokens?: boolean } = {}): string {
    if (tokenIds.length === 0) return "";
    return this.#hf.decode(tokenIds as number[], {
      skip_special_tokens: options.skipSpecialTokens ?? false,
      clean_up_tokenization_spaces: false,
    });
  }

  /**
   * The id of a token's text (vocabulary or added token), or undefined.
   *
   * @example
   * tokenizer.tokenId("<|im_end|>"); // 151645 with Qwen3
   */
  tokenId(token: string): number | undefined {
    return this.#hf.token_to_id(token);
  }

  /**
   * The text of a token id as stored in the vocabulary (byte-level form), or undefined.
   *
   * @example
   * tokenizer.idToToken(1879); // "Ġworld" with Qwen3
   */
  idToToken(tokenId: number): string | undefined {
    return this.#hf.id_to_token(tokenId);
  }

  /**
   * A streaming detokenizer over this tokenizer.
   *
   * @example
   * const decoder = tokenizer.createDecoder();
   * for (const id of ids) process.stdout.write(decoder.push(id));
   */
  createDecoder(options: { skipSpecialTokens?: boolean } = {}): IncrementalDecoder {
    return new IncrementalDecoder(this, options);
  }

  /**
   * Every id's vocabulary piece, in id order, as grammar engines (xgrammar's TokenizerInfo) take
   * them with `vocabEncoding`. Special tokens come out empty, which such engines never allow, unless
   * their text is in `keep` (a template's tool-call markers, which a grammar spells out).
   *
   * @example tokenizer.grammarPieces(["<tool_call>", "</tool_call>"]) // ["!", "\"", ..., "<tool_call>", ...]
   */
  grammarPieces(keep: readonly string[] = []): string[] {
    const kept = new Set(keep);
    return Array.from({ length: this.vocabSize }, (_, id) => {
      const piece = this.idToToken(id) ?? "";
      return this.specialTokenIds.has(id) && !kept.has(piece) ? "" : piece;
    });
  }
}

/**
 * - `byte_level`: GPT-2 style pieces, each character standing for one byte (Qwen, Llama 3);
 * - `byte_fallback`: SentencePiece pieces, "▁" for a space, `<0xAB>` for raw bytes (Gemma, Phi-3);
 * - `raw`: the pieces are the text.
 */
export type VocabEncoding = "byte_level" | "byte_fallback" | "raw";

function vocabEncodingOf(decoder: unknown): VocabEncoding {
  const types = new Set<string>();
  const visit = (d: unknown) => {
    if (!isRecord(d)) return;
    if (typeof d.type === "string") types.add(d.type);
    if (Array.isArray(d.decoders)) d.decoders.forEach(visit);
  };
  visit(decoder);
  if (types.has("ByteLevel")) return "byte_level";
  if (types.has("ByteFallback") || types.has("Metaspace") || types.has("Replace")) return "byte_fallback";
  return "raw";
}

/**
 * Turns a stream of token ids into text deltas without ever emitting half a character.
 *
 * Each push decodes a short window of ids twice, without and with the pending tail:
 *
 *   ids:  ... [prefixOffset ........ readOffset) [readOffset .... end)
 *              already emitted, kept   pending (not yet emitted)
 *              as decoding context
 *
 * and emits the difference once the decoded text no longer ends in U+FFFD (an incomplete UTF-8
 * sequence); the window then slides to start at the old readOffset. Decoding a window rather than
 * single ids keeps context-dependent decoders (leading-space handling) right. The concatenated
 * deltas plus `flush()` equal `decode(allIds)`.
 *
 * @example
 * const decoder = new IncrementalDecoder(tokenizer);
 * let text = "";
 * for (const id of ids) text += decoder.push(id);
 * text += decoder.flush();
 */
export class IncrementalDecoder {
  readonly #tokenizer: Pick<Tokenizer, "decode">;
  readonly #skipSpecialTokens: boolean;
  #ids: number[] = [];
  #prefixOffset = 0;
  #readOffset = 0;

  constructor(tokenizer: Pick<Tokenizer, "decode">, options: { skipSpecialTokens?: boolean } = {}) {
    this.#tokenizer = tokenizer;
    this.#skipSpecialTokens = options.skipSpecialTokens ?? false;
  }

  /** Adds one id; returns the newly completed text (often "", never half a character). */
  push(tokenId: number): string {
    this.#ids.push(tokenId);
    const prefixText = this.#decode(this.#ids.slice(this.#prefixOffset, this.#readOffset));
    const newText = this.#decode(this.#ids.slice(this.#prefixOffset));
    if (newText.length <= prefixText.length || newText.endsWith("\uFFFD")) return "";
    this.#prefixOffset = this.#readOffset;
    this.#readOffset = this.#ids.length;
    this.#trim();
    return newText.slice(prefixText.length);
  }

  /** Emits whatever is pending (an incomplete character comes out as U+FFFD), for the end of a stream. */
  flush(): string {
    if (this.#readOffset === this.#ids.length) return "";
    const prefixText = this.#decode(this.#ids.slice(this.#prefixOffset, this.#readOffset));
    const newText = this.#decode(this.#ids.slice(this.#prefixOffset));
    this.#prefixOffset = this.#readOffset;
    this.#readOffset = this.#ids.length;
    this.#trim();
    return newText.slice(prefixText.length);
  }

  #decode(ids: number[]): string {
    return this.#tokenizer.decode(ids, { skipSpecialTokens: this.#skipSpecialTokens });
  }

  #trim(): void {
    if (this.#prefixOffset < 1024) return;
    this.#ids = this.#ids.slice(this.#prefixOffset);
    this.#readOffset -= this.#prefixOffset;
    this.#prefixOffset = 0;
  }
}

function tokenText(v: unknown): string | null {
  if (typeof v === "string") return v;
  if (isRecord(v) && typeof v.content === "string") return v.content;
  return null;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
