import type { CacheDiagnosis, CompareWith, NamedTurn } from "./cache-diagnosis";
import type { CacheMiss } from "./cache-miss";
import type { Repairs } from "./canonicalize";
import type { PrefixBreak } from "./prefix-break";
import type { RouteReason } from "../routing/routing-policy";
import type { BlockEviction, CachePoint, CacheWrite, ChatMessage, ErrorCode, FinishReason, KvPullReport, ReplyConstraint, ReplyDelta, SamplingParams, Speculation, TokenLogprob, ToolCall, ToolDefinition, Usage } from "../../protocol/messages";

/** The assistant reply of a turn, as stored in the transcript and returned to clients. */
export interface AssistantReply {
  role: "assistant";
  content: string | null;
  tool_calls?: ToolCall[];
}

/** What the Worker asks a TrajectoryDO to do for one turn. */
export interface TurnInput {
  tenant: string;
  trajectoryId: string;
  /** Per-tenant salt for block hashes (the backend mixes it into every hash). */
  cacheSalt: string;
  /**
   * `chat`: `messages` is the client's whole transcript (chat completions route).
   * `append`: `messages` holds only the new messages (trajectory URL `/turns`).
   */
  kind: "chat" | "append";
  messages: ChatMessage[];
  /** Undefined on an append turn means "the trajectory's current tools". */
  tools: ToolDefinition[] | undefined;
  sampling: SamplingParams;
  /** Structured outputs (tool_choice, response_format); the backend enforces it. */
  constraint: ReplyConstraint | undefined;
  model: string | undefined;
  idempotencyKey: string | undefined;
  /**
   * A Responses API turn continuing a stored response (`previous_response_id`): `messages` are
   * the new input only; the object builds the transcript from that response's (a fork when it is
   * not the latest turn). Absent on every other turn.
   */
  previous?: { token: string; instructions: string | null };
  /** A Responses API turn with `store`: the response to keep with the turn (retrievable by id). */
  response?: ResponseToStore;
  /** Prefixes the client named to keep cached (Messages API `cache_control`), as leases on the backend. */
  cachePoints?: CachePoint[];
  /** The client's thinking switch, rendered as the chat template's (`enable_thinking`) where it has one. */
  thinking?: boolean;
  /** Client quirks the edge repaired before this turn (e.g. `billing-header`), recorded on the turn. */
  quirks?: string[];
  /** A subagent's parent trajectory (its first turn links the two). */
  parent?: string;
  /** `x-agent-edge-speculative: off`: no speculative decoding for this turn (`GenerateRequest.speculative`). */
  speculative?: false;
  /** Cache diagnostics asked for: the earlier turn to compare this one with (cache-diagnosis.ts). */
  compare?: CompareWith;
}

/** What a Responses API turn stores beside the turn, so `GET /v1/responses/{id}` can answer it. */
export interface ResponseToStore {
  /** The random part of the response id (32 hex): unguessable, unique in its trajectory. */
  token: string;
  /** Unix seconds. */
  createdAt: number;
  /** The request's fields a response echoes (model, instructions, tools, ...), as sent. */
  echo: Record<string, unknown>;
  /** Index in the turn's transcript of the first message from this request's `input` (before it: the instructions and earlier responses). */
  inputFrom: number;
  /** Whether the transcript's first message is this request's `instructions` (a continuation drops it). */
  instructions: boolean;
}

/** A stored response: what it echoed, where its messages are in the transcript, and its result. */
export interface StoredResponse {
  token: string;
  turn: number;
  createdAt: number;
  echo: Record<string, unknown>;
  /** Transcript indices: its input is [inputFrom, messageEnd - 1), its reply messageEnd - 1. */
  inputFrom: number;
  messageEnd: number;
  instructions: boolean;
  /** The tools as of this response (canonical JSON), for a fork's first turn. */
  toolsJson: string;
  finishReason: FinishReason;
  usage: Usage;
  /**
   * The reply as the client got it (tool-call arguments compacted in the model's key order; the
   * transcript keeps them canonical), so a retrieved response repeats the created one. Absent in
   * responses stored before it was kept: then the transcript's reply.
   */
  reply?: AssistantReply;
  /** A later turn rewrote the transcript below `messageEnd`: it can be read but not continued. */
  rewritten: boolean;
}

/** A trajectory started from one of this one's responses (a fork). */
export interface ForkRecord {
  trajectoryId: string;
  /** The turn it forked from. */
  turn: number;
  createdAt: string;
}

/**
 * A subagent this trajectory's agent started (a trajectory whose parent link names this one):
 * noted at its first placement, with its first turn's reuse once that turn is done.
 */
export interface ChildRecord {
  trajectoryId: string;
  createdAt: string;
  /** The child's first turn: prompt tokens, how many were cached (reused), where and why it ran (null: not done yet). */
  firstTurn: { promptTokens: number; cachedTokens: number; backend: string; route: string | null } | null;
}

/** Why a turn sent the backend the full transcript instead of a delta. */
export type FullReason = "first-turn" | "diverged" | "tools-changed" | "state-unknown" | "backend-changed" | "failover";

/** One turn as the trajectory's state reports it. */
export interface TurnRecord {
  turn: number;
  startedAt: string;
  /** `delta`: only new messages went to the backend; `full`: the whole transcript. */
  mode: "delta" | "full";
  fullReason: FullReason | null;
  promptTokens: number;
  cachedTokens: number;
  computedTokens: number;
  completionTokens: number;
  /** Time to first token as the Durable Object saw it (includes forwarding). */
  ttftMs: number;
  /** Time to first token inside the backend. */
  backendTtftMs: number;
  totalMs: number;
  backend: string;
  backendUrl: string;
  finishReason: FinishReason;
  /** Bytes of the request sent to the backend (msgpack). */
  requestBytes: number;
  /**
   * Why this turn's transcript is not an extension of the stored one (`cause: "none"` when it
   * only grew), with `uncachedFromToken` = the backend's cached prompt tokens (prefix-break.ts).
   * Absent on records written before the explainer existed.
   */
  prefixBreak?: PrefixBreak;
  /** What safe canonicalization changed in this turn's request (absent when nothing). */
  repaired?: Repairs;
  /**
   * Why the turn went to its backend: the routing policy's reason (`pinned`, `parent`: a subagent's first turn, `prefix`,
   * `least-loaded`, `queue-avoided`, `pinned-overloaded`, `pinned-queued`, `pinned-down`, `pinned-draining`, `round-robin`, `hash`), or `failover`
   * when the planned backend failed and another took the turn. Absent on older records.
   */
  route?: RouteReason | "failover";
  /**
   * A moved turn's pull of its blocks from the backend it left (`kvSource`): the outcome, the
   * blocks and bytes that arrived, and how long it took. Absent when the turn pulled nothing.
   */
  kvPull?: KvPullReport;
  /** Of `cachedTokens`, those the backend brought back from its host tier (absent: it has none). */
  hostTierTokens?: number;
  /** The backend's record of the first prompt block its cache lacked: evicted how long ago, why, from which tier. */
  evicted?: BlockEviction;
  /** Speculative decoding on this turn: draft tokens verified and accepted (absent: the backend did not speculate). */
  speculation?: Speculation;
  /**
   * Cached tokens short of what the turn could have reused, and why (cache-miss.ts). Absent when
   * it reused all it could, and on older records.
   */
  miss?: CacheMiss;
}

/** Events from the Durable Object to the Worker, one JSON object per line (NDJSON). */
export type TurnEvent =
  /**
   * Before the backend is asked: the turn's prefix break (for the `x-prefix-break` header), the
   * trajectory it runs in (a fork's, when the turn forked) and the token of the response it stores
   * (a Responses API turn; a replay's is the stored one's).
   */
  | { type: "start"; prefixBreak: PrefixBreak; trajectoryId?: string; responseToken?: string; diagnosis?: CacheDiagnosis }
  /**
   * `logprobs`: the token frames' (only when the request asked); `reply`: the frames' content and
   * tool-call pieces (a reply parsed for tool calls; ids as the client will see them). Both
   * response-only, never stored.
   */
  | { type: "token"; text: string; logprobs?: TokenLogprob[]; reply?: ReplyDelta }
  /**
   * `stopSequence`: the stop string that ended the reply (the backend's, when one did); `cacheWrites`: the backend's, with cache points;
   * `diagnosis`: the comparison the turn asked for (`TurnInput.compare`; also on the start event).
   */
  | { type: "done"; message: AssistantReply; finishReason: FinishReason; usage: Usage; turn: TurnRecord; replayed: boolean; stopSequence?: string; responseToken?: string; cacheWrites?: CacheWrite[]; diagnosis?: CacheDiagnosis }
  /** `retryAfterS`: an overloaded backend's estimate of when to retry (the 429's `Retry-After`). */
  | { type: "error"; code: ErrorCode; message: string; retryable: boolean; retryAfterS?: number };

/**
 * How a trajectory descends from another: a `fork` of one of its responses (at `turn`), or a
 * `subagent` the other's agent started (`turn` null: it branched off no stored turn).
 */
export interface ParentLink {
  trajectoryId: string;
  turn: number | null;
  relation: "fork" | "subagent";
}

/** The trajectory's state as `GET /v1/tenants/{tenant}/trajectories/{id}` shows it. */
export interface TrajectoryState {
  id: string;
  tenant: string;
  createdAt: string;
  messageCount: number;
  /** Idempotency keys remembered (those of the last IDEMPOTENCY_TURNS turns). */
  idempotencyKeys: number;
  backendUrl: string | null;
  turns: TurnRecord[];
  /** Trajectories forked from this one's responses. */
  forks: ForkRecord[];
  /** The trajectory this one was forked from or is a subagent of (null: neither). */
  parent: ParentLink | null;
  /** Subagents linked to this trajectory as their parent, oldest first. */
  children: ChildRecord[];
}

/** A trajectory's metadata as stored with its transcript. */
export interface TrajectoryMeta {
  tenant: string;
  trajectoryId: string;
  createdAt: string;
  backendUrl: string | null;
  stateId: string | null;
  toolsJson: string;
}

/** A turn's stored outcome, replayed for a retried request with the same Idempotency-Key. */
export type StoredResult = Extract<TurnEvent, { type: "done" }> & { text: string };

export interface CommitTurn {
  /** Keep stored messages [0, keep) and append `messages` after them. */
  keep: number;
  messages: ChatMessage[];
  record: TurnRecord;
  backendUrl: string;
  stateId: string;
  toolsJson: string;
  idempotencyKey: string | undefined;
  /** SHA-256 of the request, so a reused key with another request is refused. */
  fingerprint: string;
  result: StoredResult;
  /** Short hashes of this turn's prompt blocks (the done frame's); empty: none known. */
  promptBlockHashes: readonly string[];
  /** A Responses API turn's response to keep. */
  response?: ResponseToStore;
  /** A Messages API turn that asked for cache diagnostics: its answer's id, tools hash and model, kept so a later turn can name it. */
  answer?: { id: string; toolsHash: string; model: string | null };
}

/**
 * What a turn reads and writes of its trajectory's storage (`TrajectoryStore` implements it in
 * SQLite; the turn logic needs no more).
 */
export interface TurnStore {
  meta(): TrajectoryMeta | null;
  numTurns(): number;
  /** The record of the turn that ran last (null: none). */
  lastTurnRecord(): TurnRecord | null;
  /** Short hashes of the last turn's prompt blocks. */
  promptBlockHashes(): string[];
  idempotentResult(key: string): { result: StoredResult; fingerprint: string } | null;
  /** The number of the turn that ran last (0: none). */
  lastTurn(): number;
  /** A stored Responses API response by its token (null: none). */
  response(token: string): StoredResponse | null;
  /** The turn a Messages API answer stored for cache diagnostics answered (null: none). */
  messageAnswer(id: string): NamedTurn | null;
  /** Writes transcript rows, the turn record, state and idempotency result in one transaction. */
  commitTurn(c: CommitTurn): void;
}
