/**
 * Where speculative decoding's drafts come from (issue 37): model-free sources that guess the
 * next tokens of a sequence from text it or its tenant already holds (prompt lookup over the
 * sequence's own prompt and output; a suffix tree over the tenant's recent replies). The engine
 * verifies a draft in one executor step and keeps the tokens the model itself would have produced,
 * so a source only changes speed, never output.
 *
 * Sources are tenant-salted like the KV cache: `tenant` is the request's cache salt, and a source
 * never proposes text it learned under another salt.
 */
export interface DraftSource {
  /**
   * Up to `max` tokens guessed to follow `context` (the sequence's prompt and output so far, in
   * order), most likely continuation first; [] when it has no guess.
   */
  propose(context: DraftContext, max: number): number[];
  /** Learns a finished reply (its generated tokens), for sources that draft across sequences. */
  observe?(reply: FinishedReply): void;
}

/** What a source sees of a sequence when asked for a draft. */
export interface DraftContext {
  /** The request's cache salt (the tenant): drafts come only from text under the same salt. */
  tenant: string;
  /** Prompt and output so far, in order (read-only; the engine keeps appending to it). */
  tokenIds: readonly number[];
  /** How many of `tokenIds` are the prompt. */
  numPromptTokens: number;
}

/** A reply a sequence finished with, as `observe` learns it. */
export interface FinishedReply {
  tenant: string;
  /** The generated tokens (without the prompt). */
  tokenIds: readonly number[];
}
