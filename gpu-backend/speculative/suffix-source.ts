import type { DraftContext, DraftSource, FinishedReply } from "./draft-source";
import type { MatchedDraft } from "./matched-draft";
import { SequenceLookup } from "./sequence-lookup";
import { SuffixTree } from "./suffix-tree";

/**
 * The draft source of `--speculative suffix`: SuffixDecoding's two indexes, the sequence's own
 * (prompt lookup, {@link SequenceLookup}) and the tenant's recent replies ({@link SuffixTree},
 * one per backend, shared by every sequence). Both are asked; the draft with the longer match
 * wins, the sequence's own on a tie (its text is the one this reply is most likely to copy:
 * the observation holding the id, the file being edited), the tenant tree when the sequence has
 * no match at all.
 *
 * @example
 * const source = new SuffixSource(new SuffixTree());
 * const draft = source.propose(context, 8);
 * source.observe({ tenant: context.tenant, tokenIds: reply });
 */
export class SuffixSource implements DraftSource {
  /** @example new SuffixSource(backendTree, new SequenceLookup({ maxNgram: 8 })) */
  constructor(
    readonly tree: SuffixTree,
    readonly sequence: SequenceLookup = new SequenceLookup(),
  ) {}

  /** Up to `max` tokens from whichever index matched the longer suffix. @example source.propose(context, 8) */
  propose(context: DraftContext, max: number): number[] {
    return this.lookup(context, max).tokenIds;
  }

  /** The chosen draft with its match length. @example source.lookup(context, 8).matchLength */
  lookup(context: DraftContext, max: number): MatchedDraft {
    const own = this.sequence.lookup(context, max);
    const tenant = this.tree.lookup(context, max);
    if (tenant.tokenIds.length > 0 && (own.tokenIds.length === 0 || tenant.matchLength > own.matchLength)) return tenant;
    return own;
  }

  /** Learns a finished reply into the tenant tree. @example source.observe({ tenant, tokenIds }) */
  observe(reply: FinishedReply): void {
    this.tree.observe(reply);
  }
}
