import type { BlockHash } from "../../protocol/block-hash";
import type { FinishReason, Frame, KvPullReport } from "../../protocol/messages";
import type { ConstrainedReply } from "../constraint/constrained-reply";
import type { DraftLength } from "../speculative/draft-length";
import type { ToolCallStream } from "../tokenizer/tool-call-stream";
import type { Sequence } from "../scheduler/sequence";
import type { ReplyBudget } from "./reply-budget";
import type { Sampler } from "./sampler";
import type { StopChecker } from "./stop-checker";

/** One generation in flight: its sequence, sampler, stop checks, output and how it ends. */
export interface Job {
  seq: Sequence;
  sampler: Sampler;
  /** Alternatives per token when logprobs were asked (`sampling.logprobs`); undefined: none. */
  logprobs: number | undefined;
  stops: StopChecker;
  decoder: { push(tokenId: number): string; flush(): string };
  stopTokenIds: Set<number>;
  sink: (frame: Frame) => void;
  signal: AbortSignal | undefined;
  firstTokenMs: number | undefined;
  lastTokenMs: number | undefined;
  onFinish: (reason: FinishReason, job: Job) => void;
  finished: boolean;
  /** Short hashes of the prompt's full blocks, taken when the job finishes (for the done frame). */
  promptBlockHashes: string[];
  /** Structured outputs (constraint/): masks this job's logits and ends it when the structure is complete. */
  constraint: ConstrainedReply | null;
  /** The turn state this job's turn becomes (chat turns; raw token requests keep none): its partial last block is kept under it. */
  stateId: string | undefined;
  /** Demo agent mode's cap ends this reply: its last token is this end-of-turn token (demo-agent.ts). */
  endTurn: number | undefined;
  /** A reply parsed for tool calls: splits its streamed text into each token frame's `reply` (its ids go to the final parse). */
  reply: ToolCallStream | undefined;
  /** Speculative decoding (the engine has a draft source and the request did not opt out): its tenant and figures; undefined: off. */
  speculation: JobSpeculation | undefined;
}

/** A job's speculation: its tenant (the cache salt drafts are keyed by) and its figures so far. */
export interface JobSpeculation {
  tenant: string;
  /** Draft tokens verified. */
  drafted: number;
  /** Of those, accepted (the model produced the same token). */
  accepted: number;
  /** Its adaptive draft length (speculation.ts `jobSpeculation`); undefined: fixed at the engine's most. */
  length: DraftLength | undefined;
}

/** Where a sequence's KV comes from and goes: its hash root, the kept tail it continues, the turn state it becomes. */
export interface SequenceCache {
  root: BlockHash;
  resumeTail?: string | undefined;
  stateId?: string | undefined;
  /** What pulling the prompt's missing blocks did (with `kvSource`). */
  kvPull?: KvPullReport;
}

/** What a job is made of (turn-intake.ts makes the sequence and the job): its prompt, budget, KV, output and end. */
export interface JobParams {
  tokenIds: number[];
  budget: ReplyBudget;
  cache: SequenceCache;
  sink: (frame: Frame) => void;
  signal: AbortSignal | undefined;
  /** Compiled for the reply (structured outputs); absent: unconstrained. */
  constraint?: ConstrainedReply | null;
  /** The reply's tool-call splitter when it is parsed for tool calls (chat turns). */
  reply?: ToolCallStream;
  /** The tenant (cache salt) drafts are keyed by, when the job may speculate (the engine's option still decides). */
  speculate?: { tenant: string } | undefined;
  onFinish: (reason: FinishReason, job: Job) => void;
}

/** Where a new job goes: the step loop (`Engine.add`). */
export interface JobQueue {
  /** Queues the job's sequence; throws `overloaded` past the queue bound, before anything is kept. */
  add(job: Job): void;
}
