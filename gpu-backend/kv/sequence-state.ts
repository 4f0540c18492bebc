import type { KeptTail } from "./kept-tails";
import type { KVSequence } from "./kv-sequence";

/** What the manager keeps per registered sequence: the sequence itself (tokens, hashes, status) and its blocks. */
export interface SequenceState {
  sequence: KVSequence;
  blockTable: number[];
  numComputedTokens: number;
  /** The kept tail attached at start (returned to its key if the sequence ends before filling it). */
  resumed?: { key: string; tail: KeptTail };
}
