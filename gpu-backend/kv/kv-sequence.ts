import type { BlockHash } from "../../protocol/block-hash";

/**
 * Where a sequence is in its life. The scheduler adds it `waiting` and ends it `finished`; the KV
 * manager moves it to `running` when it takes blocks (start, restart) and to `preempted` when it
 * gives them back but keeps the sequence (its tokens and hashes survive; it recomputes later).
 */
export type SequenceStatus = "waiting" | "running" | "preempted" | "finished";

/**
 * What the KV manager reads of a sequence (the scheduler's `Sequence` implements it). The
 * sequence owns its tokens and the memo of its block hashes; the manager owns its block table.
 */
export interface KvSequence {
  readonly seqId: number;
  /** Prompt tokens followed by generated tokens; grows as the sequence decodes (live). */
  readonly tokenIds: readonly number[];
  /** Root of this sequence's block-hash chain (model id + tenant salt). */
  readonly hashRoot: BlockHash;
  /**
   * Memo of the chained hashes of this sequence's full blocks, from block 0, in order; the KV
   * manager extends it as blocks are hashed. They depend only on the tokens and the root, so they
   * survive preemption.
   */
  readonly blockHashes: BlockHash[];
  status: SequenceStatus;
  /**
   * The kept tail this sequence continues (the turn state it extends): `startSequence` attaches
   * that partial block when the cached prefix ends exactly where it begins (kv-cache-manager.ts).
   */
  readonly resumeTail?: string;
  /** Set before the sequence is freed: keep its partial last block as the tail of this key (its turn state). */
  keepTailAs?: string;
  /** Set by the KV manager at start: tokens of its cached prefix brought back from the host tier. */
  hostTierTokens?: number;
}
