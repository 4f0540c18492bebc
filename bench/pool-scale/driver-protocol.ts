import type { Heartbeat } from "../../protocol/messages";

/**
 * What the bench (Node) asks the driver Worker in workerd (bench/pool-scale/worker/index.ts) to
 * do to a pool object, and what it answers. JSON over `fetch` to the driver; the driver calls the
 * real `PoolDO` over RPC, as the edge does, and times each call there (the caller's view).
 */

/** One call on the pool object, run in order by `POST /ops`. */
export type PoolOp =
  | { op: "heartbeat"; beat: Heartbeat }
  | { op: "place"; hashes: string[]; key?: string; trajectoryId: string }
  | { op: "note"; key: string; url: string; hashes: string[]; trajectoryId: string }
  | { op: "view" };

/** A call's answer: its time as the caller saw it, the placed url, the heartbeat's `kv`, the backends up (view). */
export interface OpResult {
  ms: number;
  url?: string | null;
  kv?: string;
  up?: number;
}

export interface OpsRequest {
  /** Names the pool object (`idFromName`): one per run and backend count. */
  pool: string;
  ops: PoolOp[];
  /** Send every call at once (the object serializes them); each `ms` then counts from the batch's start. Default: one after another. */
  concurrent?: boolean;
}

/** The block index's figures as `PoolDO.indexStats` reports them. */
export interface PoolIndexStats {
  entries: number;
  tierEntries: number;
  maxEntries: number;
  indexBytes: number;
  backends: { url: string; indexed: boolean }[];
}

export interface OpsResponse {
  results: OpResult[];
  /** From the first call to the last answer. */
  wallMs: number;
  stats: PoolIndexStats;
}

/** A simulated backend in the load phase: where it is, and the `seq` of its last applied KV batch. */
export interface LoadBackend {
  id: string;
  url: string;
  seq: number;
}

/**
 * `POST /load`: open-loop offered load for `seconds`: every backend beats once per `beatEveryMs`
 * (staggered) with `eventsPerBeat` stored and as many removed synthetic hashes, and placed turns
 * arrive evenly at `placeRate` a second, each a `place` then, `turnMs` later, its `notePrefix` (as
 * a placed turn's trajectory does when the turn ends), cycling through `turns`.
 */
export interface LoadRequest {
  pool: string;
  seconds: number;
  placeRate: number;
  beatEveryMs: number;
  eventsPerBeat: number;
  turnMs: number;
  backends: LoadBackend[];
  turns: { hashes: string[]; key: string }[];
}

export interface LoadResponse {
  /** Per placed turn: from its scheduled start to its `place` answer, ms (queueing included). */
  placeMs: number[];
  /** Per heartbeat: from its scheduled time to its answer, ms. */
  beatMs: number[];
  /** Placed turns and beats not answered when the phase ended (counted, not timed). */
  unfinished: number;
  /** The `seq` each backend is at after the phase (the next batch continues from it). */
  seqs: number[];
  elapsedMs: number;
  /** Heartbeats answered `resync` (should be 0: the batches follow on). */
  resyncs: number;
}
