/**
 * A draft with the length of the context suffix it was matched on: the sources that index text
 * (sequence-lookup.ts, suffix-tree.ts) return it, so that a source combining them
 * (suffix-source.ts) can prefer the longer match, and a longer match can earn a longer draft.
 *
 * @example
 * const draft: MatchedDraft = { tokenIds: [7, 8, 9], matchLength: 4 }; // the last 4 tokens occurred before, followed by 7 8 9
 */
export interface MatchedDraft {
  /** The proposed tokens, in order; [] when there is no match. */
  tokenIds: number[];
  /** How many of the context's last tokens the match covers (0 when there is none). */
  matchLength: number;
}

/** The draft of a source that found nothing (a fresh object). @example return noDraft(); */
export function noDraft(): MatchedDraft {
  return { tokenIds: [], matchLength: 0 };
}
