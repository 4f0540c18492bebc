import type { GrammarMatcher } from "@mlc-ai/web-xgrammar";
import type { GrammarCache, GrammarCodec } from "./grammar-cache";
import type { ReplyGrammar } from "./reply-grammar";
import { xgrammar } from "./xgrammar";

/**
 * The order a completion tries characters in where the grammar leaves a choice: close what is
 * open first, then end a value, then the shortest values (1, 0, true, false, null, [], {}),
 * anything else, whitespace last (a random model would otherwise pad forever).
 */
const CLOSING_ORDER = ['"', "}", "]", ",", ":", "1", "0", "t", "f", "n", "[", "{", "-"];
const PREFERENCE = [...CLOSING_ORDER, ...Array.from({ length: 94 }, (_, i) => String.fromCharCode(33 + i)).filter((c) => !CLOSING_ORDER.includes(c)), " ", "\n"];
/** Longest completion searched, in characters. */
const MAX_COMPLETION_CHARS = 4096;

/**
 * One constrained reply's grammar state (an xgrammar GrammarMatcher): the token mask for the next
 * position, accepting the sampled token, and the shortest way out when the token budget runs low.
 *
 * Completion (`completion()`): from the current state, walk the grammar one character at a time,
 * taking the forced text whole (xgrammar's jump-forward string) and elsewhere the first character
 * of {@link PREFERENCE} that the grammar accepts, until the model's end-of-turn token is
 * acceptable; then roll the walk back. The cost of finishing is that text's token count in the
 * model's tokenizer (any tokenization of an accepted text is accepted: the matcher checks
 * characters). This is the greedy closing path, not a proven minimum; ~1-2 ms for a tool call.
 *
 * @example
 * const m = await ReplyMatcher.create(grammars, codec, { kind: "json_schema", schema, strictMode: true });
 * const mask = await m.mask(); // apply to the row's logits, sample, then:
 * m.accept(tokenId);
 */
export class ReplyMatcher {
  private disposed = false;

  private constructor(
    private readonly matcher: GrammarMatcher,
    private readonly grammars: GrammarCache,
    private readonly codec: GrammarCodec,
  ) {}

  static async create(grammars: GrammarCache, codec: GrammarCodec, grammar: ReplyGrammar): Promise<ReplyMatcher> {
    const compiled = await grammars.compile(grammar);
    return new ReplyMatcher(await xgrammar().GrammarMatcher.createGrammarMatcher(compiled), grammars, codec);
  }

  /** The allowed next tokens: bit `id & 31` of word `id >> 5`. */
  mask(): Promise<Int32Array> {
    return this.matcher.getNextTokenBitmask();
  }

  /** False when the grammar refuses the token (the caller sampled outside the mask). */
  accept(tokenId: number): boolean {
    return this.matcher.acceptToken(tokenId);
  }

  rollBack(tokens: number): void {
    this.matcher.rollBack(tokens);
  }

  /** Whether the reply may end here (an end-of-turn token would be accepted). */
  canEnd(): boolean {
    for (const id of this.grammars.stopTokenIds) {
      if (this.matcher.acceptToken(id)) {
        this.matcher.rollBack(1);
        return true;
      }
    }
    return false;
  }

  /**
   * The greedy closing path from here (see the class), or null when the walk finds none: `lead`,
   * continuation-byte tokens that first finish a character a token left open, then `text`.
   */
  completion(): { lead: number[]; text: string } | null {
    const lead: number[] = [];
    const chars: string[] = [];
    let accepted = 0;
    const acceptId = (id: number | undefined): boolean => {
      if (id === undefined || !this.matcher.acceptToken(id)) return false;
      accepted++;
      return true;
    };
    const take = (c: string): boolean => acceptId(this.grammars.charTokens.get(c)) && chars.push(c) > 0;
    let found = false;
    while (chars.length < MAX_COMPLETION_CHARS) {
      if (this.canEnd()) {
        found = true;
        break;
      }
      const forced = this.matcher.findJumpForwardString();
      if (forced) {
        if (![...forced].every(take)) break;
        continue;
      }
      if (PREFERENCE.some(take)) continue;
      // Inside a multi-byte character: finish it with continuation bytes (before any text only).
      const byte = chars.length === 0 && lead.length < 3 ? this.grammars.continuationTokens.find((id) => acceptId(id)) : undefined;
      if (byte === undefined) break;
      lead.push(byte);
    }
    this.matcher.rollBack(accepted);
    return found ? { lead, text: chars.join("") } : null;
  }

  /**
   * The tokens that finish the reply from here, fewest first: the completion's text as the
   * tokenizer encodes it, else one token per character (always accepted). Null when there is no
   * completion.
   */
  completionTokens(): number[] | null {
    const path = this.completion();
    if (path === null) return null;
    if (path.text === "") return path.lead;
    const encoded = [...path.lead, ...this.codec.encode(path.text)];
    if (this.accepts(encoded, false)) return encoded;
    return [...path.lead, ...[...path.text].map((c) => this.grammars.charTokens.get(c)!)];
  }

  /** Whether `ids` (an earlier completion) still finishes the reply from here: cheaper than a new walk. */
  stillCompletes(ids: readonly number[]): boolean {
    return this.accepts(ids, true);
  }

  /** Whether the grammar takes all of `ids` from here (and then may end, with `thenEnds`); the state is left as it was. */
  private accepts(ids: readonly number[], thenEnds: boolean): boolean {
    let n = 0;
    for (const id of ids) {
      if (!this.matcher.acceptToken(id)) break;
      n++;
    }
    const ok = n === ids.length && (!thenEnds || this.canEnd());
    this.matcher.rollBack(n);
    return ok;
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.matcher.dispose();
  }
}

/** Sets every logit the mask forbids to -Infinity (the row may be longer than the mask covers). */
export function applyMask(logits: Float32Array, mask: Int32Array): void {
  for (let w = 0; w < mask.length; w++) {
    const bits = mask[w]!;
    if (bits === -1) continue;
    const base = w << 5;
    if (bits === 0) {
      logits.fill(-Infinity, base, Math.min(base + 32, logits.length));
      continue;
    }
    for (let b = 0; b < 32 && base + b < logits.length; b++) if (((bits >>> b) & 1) === 0) logits[base + b] = -Infinity;
  }
  for (let i = mask.length << 5; i < logits.length; i++) logits[i] = -Infinity;
}

/**
 * The argmax of the allowed entries of `logits` (ties to the lowest id), what `argmax` of the row
 * after `applyMask` is, without writing the row: words the mask forbids whole are skipped, so a
 * structural step (a few allowed tokens) reads a few entries, not the vocabulary. -1 when the mask
 * allows nothing in the row.
 */
export function maskedArgmax(logits: Float32Array, mask: Int32Array): number {
  let best = -1;
  let bestValue = -Infinity;
  const words = Math.min(mask.length, (logits.length + 31) >> 5);
  for (let w = 0; w < words; w++) {
    let bits = mask[w]!;
    while (bits !== 0) {
      const b = 31 - Math.clz32(bits & -bits); // lowest set bit first: ids ascend
      bits &= bits - 1;
      const id = (w << 5) + b;
      if (id >= logits.length) break;
      const v = logits[id]!;
      if (v > bestValue || best === -1) {
        bestValue = v;
        best = id;
      }
    }
  }
  return best;
}

/** Whether the mask allows token `id` (ids past the mask are forbidden, as `applyMask` has them). */
export function allows(mask: Int32Array, id: number): boolean {
  const w = id >> 5;
  return w < mask.length && ((mask[w]! >>> (id & 31)) & 1) === 1;
}

/** Whether the mask allows any token outside `ids`. */
export function allowsOtherThan(mask: Int32Array, ids: readonly number[]): boolean {
  for (let w = 0; w < mask.length; w++) {
    let bits = mask[w]!;
    if (bits === 0) continue;
    for (const id of ids) if (id >> 5 === w) bits &= ~(1 << (id & 31));
    if (bits !== 0) return true;
  }
  return false;
}
