import type { BlockHash } from "../../protocol/block-hash";
import type { KvSequence, SequenceStatus } from "../kv/kv-sequence";

export type { SequenceStatus } from "../kv/kv-sequence";

/** A new sequence: its id, its prompt (the array becomes the sequence's own `tokenIds`), its reply budget, its hash root and the tail it resumes. */
export interface SequenceParams {
  seqId: number;
  tokenIds: number[];
  maxTokens: number;
  hashRoot: BlockHash;
  resumeTail?: string | undefined;
}

/**
 * The unit the scheduler schedules: one trajectory turn's token sequence (prompt, then the tokens
 * it generates). Owned by the engine, which appends each sampled token here and only here; the KV
 * manager reads the tokens and keeps the block-hash memo here. The scheduler moves it between its
 * waiting and running queues; `status` says where it is (kv-sequence.ts).
 */
export class Sequence implements KvSequence {
  status: SequenceStatus = "waiting";
  /** Memo of the chained hashes of the full blocks (extended by the KV manager). */
  readonly blockHashes: BlockHash[] = [];
  /** Prompt tokens found in the prefix cache at first admission. */
  numCachedTokens = 0;
  /** Tokens computed by prefill, recomputation after preemption included. */
  numPrefilledTokens = 0;
  numPreemptions = 0;
  /** Uncached prompt tokens on arrival (the queue bound counts them while it waits: Scheduler.add). */
  queuedTokens = 0;
  /** The turn state to keep the partial last block under when freed (set by the engine as the turn ends). */
  keepTailAs: string | undefined;
  /** Tokens of the cached prefix the KV manager brought back from the host tier at start. */
  hostTierTokens: number | undefined;
  /**
   * Tokens a draft source guessed to follow `tokenIds` (speculative decoding), set by the engine
   * before each schedule and verified in the step the scheduler gives it ([] for none); never
   * part of `tokenIds`, which only accepted tokens join.
   */
  draft: number[] = [];
  readonly arrivalMs = performance.now();
  firstScheduledMs: number | undefined;

  readonly seqId: number;
  /** Prompt tokens followed by generated tokens; grows as the sequence decodes. */
  readonly tokenIds: number[];
  readonly numPromptTokens: number;
  readonly maxTokens: number;
  /** Root of this sequence's block-hash chain (model id + tenant salt). */
  readonly hashRoot: BlockHash;
  /** The turn state this sequence extends: its kept tail is attached at start when it fits. */
  readonly resumeTail: string | undefined;

  /** @example new Sequence({ seqId: 1, tokenIds: [...prompt], maxTokens: 64, hashRoot: root }) */
  constructor(p: SequenceParams) {
    this.seqId = p.seqId;
    this.tokenIds = p.tokenIds;
    this.numPromptTokens = p.tokenIds.length;
    this.maxTokens = p.maxTokens;
    this.hashRoot = p.hashRoot;
    this.resumeTail = p.resumeTail;
  }

  get numGenerated(): number {
    return this.tokenIds.length - this.numPromptTokens;
  }
}
