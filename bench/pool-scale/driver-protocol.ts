import type { Heartbeat } from "../../protocol/messages";

/**
 * What the bench (Node) asks the driver Worker in workerd (bench/pool-scale/worker/index.ts) to
 * do to a pool object, and what it answers. JSON over `fetch` to the driver; the driver calls the
 * real `PoolDO` over RPC, as the edge does, and times each call there (the caller's view).
 */

/**
 * One call on a pool object, run in order by `POST /ops`. `pool` names the object it goes to (a
 * cell of the sharded design; default the request's `pool`); a `place` tries the objects of
 * `pools` in order until one places it (as the edge walks a trajectory's `cellOrder`).
 */
export type PoolOp =
  | { op: "heartbeat"; beat: Heartbeat; pool?: string }
  | { op: "place"; hashes: string[]; key?: string; trajectoryId: string; pools?: string[] }
  | { op: "note"; key: string; url: string; hashes: string[]; trajectoryId: string; pool?: string }
  | { op: "view"; pool?: string };

/** A call's answer: its time as the caller saw it, the placed url, why (the route reason) and the object that placed it, the heartbeat's `kv`, the backends up (view). */
export interface OpResult {
  ms: number;
  url?: string | null;
  reason?: string;
  /** A placement's leading blocks as the pool counted them: the most any backend had, and the placed one's. */
  poolBest?: number;
  poolPlaced?: number;
  /** The backend the pool counted the most leading blocks on (its index's first choice, before the load margin). */
  poolBestUrl?: string;
  pool?: string;
  kv?: string;
  up?: number;
}

export interface OpsRequest {
  /** Names the pool object (`idFromName`) of calls that name none: one per run, backend count and design. */
  pool: string;
  ops: PoolOp[];
  /** Send every call at once (each object serializes its own); each `ms` then counts from the batch's start. Default: one after another. */
  concurrent?: boolean;
  /** The objects whose index figures `stats` sums (none: no `stats`): every cell of a sharded pool. */
  statsPools?: string[];
}

/** The block index's figures as `PoolDO.indexStats` reports them (summed over the cells of a sharded pool). */
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
  stats?: PoolIndexStats;
}

/** A simulated backend in the load phase: where it is, the `seq` of its last applied KV batch, and the pool object it beats into (default the request's `pool`). */
export interface LoadBackend {
  id: string;
  url: string;
  seq: number;
  pool?: string;
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
  /** `pools`: the objects its placement tries in order (default `[pool]`); its note goes to the one that placed it. */
  turns: { hashes: string[]; key: string; pools?: string[] }[];
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
