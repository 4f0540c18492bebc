import type { Tokenizer } from "./tokenizer";

/** One token id as logprobs report it. */
export interface TokenPiece {
  /** The token decoded alone (special tokens kept): U+FFFD where it holds part of a character. */
  text: string;
  /** Its raw bytes, so the bytes of a reply's tokens concatenate to the reply's UTF-8. */
  bytes: number[];
}

/**
 * Each token id's text and raw bytes, memoized (logprobs need them for the chosen token and its
 * alternatives at every position, so the same ids come back often).
 *
 * `text` is what the tokenizer decodes for the id alone, as vLLM reports it: a token holding part
 * of a multi-byte character decodes to U+FFFD. `bytes` are the token's own bytes, as OpenAI
 * reports them (vLLM instead gives the UTF-8 of `text`, so those bytes are lost there):
 *
 * - byte-level BPE (GPT-2 style: Qwen, Llama 3): the vocabulary piece maps character by character
 *   to bytes through the GPT-2 byte table ("Ġ" is 0x20, "ä½" are 0xE4 0xBD);
 * - SentencePiece byte fallback (`<0xE4>`): that one byte;
 * - anything else (added and special tokens, ids without a piece, other decoders): the UTF-8 of
 *   `text`.
 *
 * A mapping is used only when its bytes, decoded the way the tokenizer decodes (UTF-8, U+FFFD for
 * invalid sequences), give back exactly `text`; otherwise the UTF-8 of `text` is used. So a piece
 * that only looks byte-level (a SentencePiece "é") is never misread.
 *
 * @example
 * const pieces = new TokenPieces(tokenizer);
 * pieces.piece(220); // { text: " ", bytes: [32] } with Qwen3
 */
export class TokenPieces {
  readonly #tokenizer: Pick<Tokenizer, "decode" | "idToToken">;
  readonly #cache = new Map<number, TokenPiece>();

  constructor(tokenizer: Pick<Tokenizer, "decode" | "idToToken">) {
    this.#tokenizer = tokenizer;
  }

  /** The text and bytes of `tokenId` (an id outside the vocabulary: empty). */
  piece(tokenId: number): TokenPiece {
    let piece = this.#cache.get(tokenId);
    if (!piece) {
      piece = pieceOf(this.#tokenizer, tokenId);
      this.#cache.set(tokenId, piece);
    }
    return piece;
  }
}

function pieceOf(tokenizer: Pick<Tokenizer, "decode" | "idToToken">, tokenId: number): TokenPiece {
  const text = tokenizer.decode([tokenId]);
  const raw = tokenizer.idToToken(tokenId);
  if (raw !== undefined) {
    const candidate = byteFallback(raw) ?? byteLevel(raw);
    if (candidate && utf8Decoder.decode(candidate) === text) return { text, bytes: Array.from(candidate) };
  }
  return { text, bytes: Array.from(utf8Encoder.encode(text)) };
}

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

/** SentencePiece's byte-fallback pieces, `<0x00>`..`<0xFF>`. */
function byteFallback(raw: string): Uint8Array | undefined {
  const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(raw);
  return m ? Uint8Array.of(parseInt(m[1]!, 16)) : undefined;
}

/** The bytes of a byte-level BPE piece, or undefined when a character is outside the byte table. */
function byteLevel(raw: string): Uint8Array | undefined {
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) {
    const b = UNICODE_TO_BYTE.get(raw.charCodeAt(i));
    if (b === undefined) return undefined;
    out[i] = b;
  }
  return out;
}

/**
 * GPT-2's byte table, reversed: printable Latin-1 bytes stand for themselves, the other 68 bytes
 * for U+0100 upwards, in byte order.
 */
const UNICODE_TO_BYTE: ReadonlyMap<number, number> = (() => {
  const map = new Map<number, number>();
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    map.set(printable ? b : next++, b);
  }
  return map;
})();
