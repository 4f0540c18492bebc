import type { BlockHash } from "../../protocol/block-hash";

export type SequenceStatus = "waiting" | "running" | "finished";

/**
 * The unit the scheduler schedules: one trajectory turn's token sequence (prompt, then the tokens
 * it generates). Owned by the engine; the scheduler moves it between waiting and running.
 */
export class Sequence {
  status: SequenceStatus = "waiting";
  /** True once the KV manager knows this sequence (it may be preempted and restarted later). */
  registered = false;
  /** Prompt tokens found in the prefix cache at first admission. */
  numCachedTokens = 0;
  /** Tokens computed by prefill, recomputation after preemption included. */
  numPrefilledTokens = 0;
  numPreemptions = 0;
  readonly arrivalMs = performance.now();
  firstScheduledMs: number | undefined;

  constructor(
    readonly seqId: number,
    /** Prompt tokens followed by generated tokens; grows as the sequence decodes. */
    readonly tokenIds: number[],
    readonly numPromptTokens: number,
    readonly maxTokens: number,
    /** Root of this sequence's block-hash chain (model id + tenant salt). */
    readonly hashRoot: BlockHash,
  ) {}

  get numGenerated(): number {
    return this.tokenIds.length - this.numPromptTokens;
  }
}
