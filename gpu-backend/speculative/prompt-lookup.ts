import type { DraftContext, DraftSource } from "./draft-source";

/** What `PromptLookup` matches: the longest and shortest n-gram it looks for. */
export interface PromptLookupOptions {
  /** Longest suffix of the context matched earlier in it. Default 4. */
  maxNgram?: number;
  /** Shortest suffix matched (a shorter match proposes nothing). Default 2. */
  minNgram?: number;
}

/**
 * Prompt lookup (llama.cpp's lookup decoding, vLLM's `ngram` method): the draft is what followed
 * the latest earlier occurrence of the context's last n tokens in the sequence's own prompt and
 * output, longest n first. Model-free and per sequence: it learns nothing across sequences, so
 * no tenant ever drafts from another's text. Agent replies that copy from their context (an id
 * from a tool result, a JSON object restated, a file re-emitted) are where it guesses right.
 *
 * @example
 * const source = new PromptLookup();
 * source.propose({ tenant: "", tokenIds: [5, 6, 7, 8, 5, 6], numPromptTokens: 4 }, 3); // [7, 8, 5]
 * source.propose({ tenant: "", tokenIds: [1, 2, 9, 9, 9], numPromptTokens: 2 }, 4);       // [9, 9, 9, 9]
 */
export class PromptLookup implements DraftSource {
  private readonly maxNgram: number;
  private readonly minNgram: number;

  constructor(options: PromptLookupOptions = {}) {
    this.maxNgram = options.maxNgram ?? 4;
    this.minNgram = Math.max(1, options.minNgram ?? 2);
  }

  propose(context: DraftContext, max: number): number[] {
    const ids = context.tokenIds;
    const L = ids.length;
    if (max <= 0) return [];
    for (let n = Math.min(this.maxNgram, L - 1); n >= this.minNgram; n--) {
      // The latest start s < L - n where ids[s .. s + n) equals the last n tokens.
      for (let s = L - n - 1; s >= 0; s--) {
        let k = 0;
        while (k < n && ids[s + k] === ids[L - n + k]) k++;
        if (k < n) continue;
        // Copied as LZ77 copies an overlapping match: past the context's end the draft repeats
        // itself, so a loop of period p (the match ends p tokens before the end) drafts `max` tokens.
        const from = s + n;
        const draft: number[] = [];
        for (let i = 0; i < max; i++) draft.push(from + i < L ? ids[from + i]! : draft[from + i - L]!);
        return draft;
      }
    }
    return [];
  }
}
