/**
 * The KV transfer part of the wire contract (re-exported by messages.ts): where a turn pulls a
 * prompt's missing blocks from, how the pull went, and the backend-to-backend requests and block
 * stream of `/v1/kv/pull` and `/v1/kv/fetch` (gpu-backend/transfer/).
 */

/** Where to pull a prompt's missing blocks from. */
export interface KvSource {
  /** The holder's base URL (same shared secret). */
  url: string;
  /** Its backend id (for the turn record). */
  backendId?: string;
}

/**
 * How a turn's pull from its `kvSource` went. `pulled`: blocks arrived and were checked (maybe
 * fewer than asked, if the holder had fewer); every other outcome computed what was missing:
 * `none-missing` (this backend had them all), `not-held` (the holder has none of them, or not
 * under this tenant's chain), `compute-cheaper` (the cost model chose to
 * prefill), `holder-failed` (unreachable, busy, timed out, or the stream broke: the blocks
 * checked before it are kept), `corrupt` (a checksum mismatch; blocks after it dropped),
 * `incompatible` (another KV format or model).
 */
export interface KvPullReport {
  outcome: KvPullOutcome;
  from: string;
  /** Blocks this backend lacked (of the prompt's full blocks). */
  missingBlocks: number;
  /** Blocks received and checked. */
  blocks: number;
  bytes: number;
  ms: number;
}

export const KV_PULL_OUTCOMES = ["pulled", "none-missing", "not-held", "compute-cheaper", "holder-failed", "corrupt", "incompatible"] as const;
export type KvPullOutcome = (typeof KV_PULL_OUTCOMES)[number];
/** The outcomes of a pull that failed (the holder, the bytes or the formats): the blocks were computed instead. */
export const FAILED_KV_PULL_OUTCOMES: ReadonlySet<KvPullOutcome> = new Set(["holder-failed", "corrupt", "incompatible"]);

/**
 * `POST /v1/kv/pull` (backend to backend, msgpack): the blocks of a prompt's cached prefix from
 * block `fromBlock` on. The holder hashes `tokenIds` under its own root for `model` and
 * `cacheSalt` and serves only blocks of that chain, so a tenant's blocks never reach a request
 * made with another tenant's salt. The answer is a binary stream (gpu-backend/transfer/kv-stream.ts).
 */
export interface KvPullRequest {
  model?: string;
  cacheSalt?: string;
  tokenIds: number[];
  fromBlock: number;
  /** The KV format the caller can take (`BlockIO.format`); another format is refused (400). */
  format: string;
}

/**
 * `POST /v1/kv/fetch` (backend to backend, msgpack): take these blocks from `source` now. The
 * receiver pulls the full blocks of `tokenIds` it lacks from `source` (`/v1/kv/pull`, checked
 * like a turn's pull, whatever the cost model says) into its prefix cache, and answers the pull's
 * `KvPullReport`. A draining backend so pushes its trajectories' blocks to the backends they move to.
 */
export interface KvFetchRequest {
  source: KvSource;
  model?: string;
  cacheSalt?: string;
  tokenIds: number[];
}

/** The header of a `/v1/kv/pull` answer's binary stream (gpu-backend/transfer/kv-stream.ts). */
export interface KvStreamHeader {
  /** `BlockIO.format` of the holder's pool. */
  format: string;
  bytesPerBlock: number;
  /** Blocks that follow, in chain order from the requested block. */
  blocks: number;
}
