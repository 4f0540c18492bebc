import type { DraftContext, DraftSource } from "./draft-source";
import type { MatchedDraft } from "./matched-draft";
import { NgramIndex, type NgramIndexOptions } from "./ngram-index";

/**
 * Prompt lookup (`--speculative lookup`): drafts a sequence's next tokens from its own prompt and
 * output, by the continuation of the longest suffix of the context that occurred earlier in it
 * (the most recent occurrence among the longest), through an incremental {@link NgramIndex} per
 * sequence.
 *
 * A sequence's index is keyed by its `tokenIds` array (a WeakMap): the engine passes the
 * sequence's own array, which lives as long as the sequence and only grows, so the index is
 * brought up to date with only the appended tokens and is freed with the sequence, with nothing
 * for the engine to release. {@link forget} frees one early. A context passed as a fresh copy
 * every step would be indexed from scratch every step (correct, but O(length) per step).
 *
 * @example
 * const lookup = new SequenceLookup();
 * lookup.propose({ tenant: "t", tokenIds: seq.tokenIds, numPromptTokens: seq.numPromptTokens }, 8); // [] or up to 8 tokens
 */
export class SequenceLookup implements DraftSource {
  private readonly indexes = new WeakMap<readonly number[], NgramIndex>();

  /** @example new SequenceLookup({ maxNgram: 8, minNgram: 2 }) */
  constructor(private readonly options: NgramIndexOptions = {}) {}

  /** Up to `max` tokens that followed the context's longest earlier-matching suffix. @example lookup.propose(context, 8) */
  propose(context: DraftContext, max: number): number[] {
    return this.lookup(context, max).tokenIds;
  }

  /** The draft with the length of the suffix it matched (0: no match). @example lookup.lookup(context, 8).matchLength */
  lookup(context: DraftContext, max: number): MatchedDraft {
    let index = this.indexes.get(context.tokenIds);
    if (!index) {
      index = new NgramIndex(this.options);
      this.indexes.set(context.tokenIds, index);
    }
    return index.lookup(context.tokenIds, max);
  }

  /** Frees a sequence's index now (else it goes with the array). @example lookup.forget(seq.tokenIds) */
  forget(tokenIds: readonly number[]): void {
    this.indexes.delete(tokenIds);
  }

  /** Whether a sequence has an index (for tests). @example lookup.has(seq.tokenIds) // true */
  has(tokenIds: readonly number[]): boolean {
    return this.indexes.has(tokenIds);
  }
}
