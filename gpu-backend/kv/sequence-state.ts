import type { BlockHash } from "../../protocol/block-hash";
import type { KvSequence } from "./kv-sequence";

/** A partial block kept for the next turn: its first `tokenIds.length` slots hold the KV of those tokens after `fullBlocks` full blocks ending in `parent`. */
export interface KeptTail {
  blockId: number;
  fullBlocks: number;
  /** Chained hash of the last full block before it (the root when `fullBlocks` is 0). */
  parent: BlockHash;
  tokenIds: number[];
}

/** What the manager keeps per registered sequence: the sequence itself (tokens, hashes, status) and its blocks. */
export interface SequenceState {
  sequence: KvSequence;
  blockTable: number[];
  numComputedTokens: number;
  /** The kept tail attached at start (returned to its key if the sequence ends before filling it). */
  resumed?: { key: string; tail: KeptTail };
}
