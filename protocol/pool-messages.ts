/**
 * The pool's wire messages: what a backend reports with each heartbeat (its load and its KV
 * events) and the pool's answer. Re-exported by messages.ts, where every other message lives.
 */

// ---------------------------------------------------------------------------------------------
// Pool: KV events published with each heartbeat (JSON, POST /v1/pool/heartbeat on the edge)
// ---------------------------------------------------------------------------------------------

/**
 * What changed in a backend's prefix cache since its previous heartbeat, or all of it. Hashes are
 * short block hashes (16 hex). A `delta` is applied only right after the batch numbered
 * `seq - 1`; otherwise the pool answers `kv: "resync"` and the backend sends a `snapshot` next,
 * which replaces everything the pool knew of it.
 */
export interface KvEventBatch {
  /** 1, 2, 3, ... per backend process, one per heartbeat. */
  seq: number;
  kind: "delta" | "snapshot";
  /** Blocks now cached under these hashes (a snapshot: every cached hash, up to its cap). */
  stored: string[];
  /** Blocks evicted (their hash dropped); always empty in a snapshot. */
  removed: string[];
  /**
   * Blocks evicted from the pool into the backend's host tier (`--kv-host-memory`): still held,
   * at copy cost (a snapshot: every hash the tier holds, up to its cap). A hash appears once in a
   * batch, in `stored`, `removed` or `offloaded`, with its last event. Absent: none.
   */
  offloaded?: string[];
}

/**
 * What a backend reports about itself on each heartbeat (JSON, `POST` to the edge's
 * `ROUTES.edge.pool` + `heartbeat`), with the KV events since the previous one.
 */
export interface Heartbeat {
  /** Backend instance id ([A-Za-z0-9._:-], 1-128 characters). */
  id: string;
  /** The URL the edge reaches this backend at (no trailing slash once the pool stores it). */
  url: string;
  model: string;
  /** KV blocks in its pool. */
  kvCapacityBlocks: number;
  running: number;
  waiting: number;
  /** Fraction of KV blocks in use, 0..1. */
  kvUsage: number;
  tokensPerS: number;
  /**
   * Running + waiting sequences averaged over the last seconds (exponential, time constant
   * LOAD_AVG_TAU_MS on the backend). Absent from older backends.
   */
  loadAvg?: number;
  /**
   * Prompt tokens admitted and not yet prefilled: what the backend's queue bound
   * (`--max-queued-tokens`) counts. Absent from older backends.
   */
  queuedTokens?: number;
  /**
   * The backend's prefill rate, prompt tokens per second, measured from its own engine steps that
   * carry prefill (a moving average). Absent until it has measured one, and from older backends.
   * `queuedTokens / prefillTokensPerS` is how long its queue takes to drain.
   */
  prefillTokensPerS?: number;
  /**
   * Draining (`POST /v1/drain` or SIGTERM): the backend takes no new placements and its
   * trajectories move on their next turn, pulling their blocks from it; it exits when idle.
   */
  draining?: boolean;
  /**
   * The backend's last beat: it is exiting (a drain finished, or SIGINT). The pool marks it down
   * at once and drops its blocks from the index, so no placement names it as a pull source.
   */
  leaving?: boolean;
  /** KV events since the previous heartbeat (absent: the backend publishes none). */
  kvEvents?: KvEventBatch;
}

/** The pool's answer to a heartbeat. */
export interface HeartbeatReply {
  /** True when the pool did not know this backend before this heartbeat. */
  registered: boolean;
  /** `ok`: the batch was applied; `resync`: send a snapshot next (absent without a batch). */
  kv?: "ok" | "resync";
  /**
   * To a draining backend: the urls of the backends up and taking placements (where its
   * trajectories move), so it can push its blocks there (`/v1/kv/fetch`).
   */
  peers?: string[];
}

/** Most hashes one heartbeat's batch may carry (delta: stored + removed; snapshot: stored). */
export const MAX_KV_EVENTS_PER_BATCH = 65_536;
