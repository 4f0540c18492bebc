import { ProtocolError } from "../../protocol/errors";
import type { GrammarCache, GrammarCodec } from "./grammar-cache";
import type { ReplyPlan } from "./reply-grammar";
import { allows, allowsOtherThan, applyMask, maskedArgmax, ReplyMatcher } from "./reply-matcher";

/** Steps between budget checks while the budget is far (a check costs ~1-5 ms). */
const CHECK_EVERY = 4;
/** Tokens of headroom over the last completion's cost under which the budget is checked every step. */
const NEAR_BUDGET = 48;

/** The token a constrained step produced: `tokenId` null when the reply ends without one. */
export interface ConstrainedToken {
  tokenId: number | null;
  /** The structure is complete: the reply ends after this token (finish reason "stop"). */
  end: boolean;
}

/**
 * Constrained decoding of one reply: masks each step's logits row with the grammar, advances the
 * grammar with the chosen token, and keeps the reply able to finish inside its token budget.
 *
 * Budget: the invariant is "the cheapest completion from here fits in the tokens left"
 * (`ReplyMatcher.completionTokens`). `start` checks it before any generation (else
 * `max_tokens_too_small`). After each sampled token it is checked again every step once the
 * tokens left are within NEAR_BUDGET of the last cost, else every CHECK_EVERY steps; a token
 * that breaks it is rolled back and the completion from before it is emitted instead, token by
 * token, with no more sampling. A completed structure (only end-of-turn tokens allowed) ends the
 * reply at once.
 *
 * Without a grammar (`tool_choice: "none"`) only the marker tokens are masked.
 *
 * @example
 * const c = await ConstrainedReply.start(grammars, codec, plan, sampling.maxTokens);
 * const { tokenId, end } = await c.next(row, (r) => argmax(r), tokensLeft);
 */
export class ConstrainedReply {
  private mask: Int32Array | null = null;
  private forced: number[] = [];
  /** The last completion found (tokens; its length is the last cost), valid from the state `sinceCheck` tokens ago. */
  private completion: number[] = [];
  private sinceCheck = 0;

  private constructor(
    private readonly matcher: ReplyMatcher | null,
    private readonly banned: readonly number[],
    private readonly stopTokenIds: readonly number[],
  ) {}

  /** Null when the plan constrains nothing. @throws ProtocolError max_tokens_too_small, invalid_schema */
  static async start(grammars: GrammarCache, codec: GrammarCodec, plan: ReplyPlan, maxTokens: number): Promise<ConstrainedReply | null> {
    // A marker is masked where it is one token of its own (Qwen's "<tool_call>").
    const banned = plan.bannedTexts.map((t) => codec.encode(t)).flatMap((ids) => (ids.length === 1 ? ids : []));
    if (!plan.grammar) return banned.length > 0 ? new ConstrainedReply(null, banned, grammars.stopTokenIds) : null;
    const matcher = await ReplyMatcher.create(grammars, codec, plan.grammar);
    const reply = new ConstrainedReply(matcher, [], grammars.stopTokenIds);
    try {
      const shortest = matcher.completionTokens();
      if (shortest === null) throw new ProtocolError("invalid_schema", "no finite reply satisfies this schema (the grammar has no way to finish)");
      if (shortest.length > maxTokens)
        throw new ProtocolError("max_tokens_too_small", `max_tokens ${maxTokens} is too small for the shortest reply the constraint allows (${shortest.length} tokens: ${JSON.stringify(codec.decode(shortest))})`);
      reply.completion = shortest;
      reply.mask = await matcher.mask();
      return reply;
    } catch (e) {
      reply.dispose();
      throw e;
    }
  }

  /**
   * The next token from this step's logits `row` (masked in place) via `pick` (the job's sampler),
   * with `tokensLeft` (>= 1) generated tokens allowed including this one. `argmax`, given when the
   * job decodes greedily, is the raw row's argmax: when the grammar allows it, it is the masked
   * row's argmax too, and the row is neither masked nor scanned (most steps of a trained model's
   * replies); otherwise only the allowed entries are scanned (`pick` is not called).
   */
  async next(row: Float32Array, pick: (row: Float32Array) => number, tokensLeft: number, argmax?: number): Promise<ConstrainedToken> {
    const m = this.matcher;
    if (!m) {
      if (argmax !== undefined && !this.banned.includes(argmax)) return { tokenId: argmax, end: false };
      for (const id of this.banned) if (id < row.length) row[id] = -Infinity;
      return { tokenId: pick(row), end: false };
    }
    if (this.forced.length > 0) return this.emitForced();
    let tokenId: number;
    if (argmax !== undefined) tokenId = allows(this.mask!, argmax) ? argmax : maskedArgmax(row, this.mask!);
    else {
      applyMask(row, this.mask!);
      tokenId = pick(row);
    }
    if (!m.accept(tokenId)) throw new ProtocolError("internal_error", `constrained decoding sampled token ${tokenId}, which the grammar refuses`);
    if (this.stopTokenIds.includes(tokenId)) return { tokenId, end: true }; // the matcher has terminated
    const left = tokensLeft - 1;
    if (this.sinceCheck + 1 >= CHECK_EVERY || left <= this.completion.length + NEAR_BUDGET) {
      const cost = this.completionAfter(tokenId);
      if (cost !== null && cost.length <= left) {
        this.completion = cost;
        this.sinceCheck = 0;
      } else {
        // This token leaves no way to finish in budget: take it back and finish from before it.
        const instead = this.finishFromBefore(tokenId);
        if (instead) return instead;
      }
    } else this.sinceCheck++;
    this.mask = await m.mask();
    return { tokenId, end: !allowsOtherThan(this.mask, this.stopTokenIds) };
  }

  /**
   * Takes back `tokenId` (just accepted) and emits a completion from the state before it. When no
   * completion is found from there either (the walk is greedy, not exhaustive), the token is
   * accepted again and decoding goes on: the next check tries anew.
   */
  private finishFromBefore(tokenId: number): ConstrainedToken | null {
    const m = this.matcher!;
    m.rollBack(1);
    const forced = this.sinceCheck === 0 || m.stillCompletes(this.completion) ? this.completion : m.completionTokens();
    if (forced === null) {
      m.accept(tokenId);
      this.sinceCheck++;
      return null;
    }
    this.forced = [...forced];
    if (this.forced.length === 0) return { tokenId: null, end: true };
    return this.emitForced();
  }

  /**
   * A completion from the state after `tokenId`, cheapest check first: the last completion minus
   * its first token when `tokenId` was that token, the last completion itself when it still
   * finishes (text inside a string leaves it valid), else a new walk. Any completion that fits
   * keeps the invariant; it need not be the shortest.
   */
  private completionAfter(tokenId: number): number[] | null {
    const m = this.matcher!;
    // `completion` is from the state before `tokenId` when the last check was the previous step.
    if (this.sinceCheck === 0 && this.completion[0] === tokenId) return this.completion.slice(1);
    if (this.completion.length > 0 && m.stillCompletes(this.completion)) return this.completion;
    return m.completionTokens();
  }

  /**
   * The longest start of a speculative `draft` the grammar accepts from here (a refused token
   * ends the draft), checked by accepting it into the matcher and rolling it back: the matcher
   * is left as it was, so only tokens the step then accepts (`next`) advance it. [] while a
   * forced completion is being emitted.
   *
   * @example seq.draft = constraint.draftPrefix(source.propose(context, 4));
   */
  draftPrefix(draft: readonly number[]): number[] {
    const m = this.matcher;
    if (!m) {
      const refused = draft.findIndex((id) => this.banned.includes(id));
      return draft.slice(0, refused < 0 ? draft.length : refused);
    }
    if (this.forced.length > 0) return [];
    let n = 0;
    while (n < draft.length && m.accept(draft[n]!)) if (this.stopTokenIds.includes(draft[n++]!)) break;
    if (n > 0) m.rollBack(n);
    return draft.slice(0, n);
  }

  /**
   * Takes `tokenId` (an end-of-turn token) as the reply's last token when the grammar allows the
   * reply to end here (demo agent mode's cap, engine/demo-agent.ts); false, taking nothing, otherwise.
   */
  takeEnd(tokenId: number): boolean {
    if (!this.matcher) return !this.banned.includes(tokenId);
    if (this.forced.length > 0 || !this.mask || !allows(this.mask, tokenId)) return false;
    return this.matcher.accept(tokenId);
  }

  private emitForced(): ConstrainedToken {
    const tokenId = this.forced.shift()!;
    if (!this.matcher!.accept(tokenId)) throw new ProtocolError("internal_error", `constrained decoding: the completion's token ${tokenId} was refused`);
    return { tokenId, end: this.forced.length === 0 };
  }

  dispose(): void {
    this.matcher?.dispose();
  }
}
