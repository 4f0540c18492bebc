import { FAILED_KV_PULL_OUTCOMES, type BlockEviction, type KvPullReport } from "../../protocol/messages";
import type { PrefixBreakCause } from "./prefix-break";

/**
 * Why a turn's cached prompt tokens fell short of what it could have reused, in the order they
 * are checked:
 * - `prefix-break`: the transcript is not an extension of the stored one (detail: the cause).
 * - `transfer-failed`: the turn's pull of its blocks failed (detail: the pull's outcome).
 * - `placed-away`: the turn ran away from the backend holding its blocks and nothing made up for
 *   it (detail: the route, e.g. `pinned-overloaded`, `pinned-queued`, `pinned-down`, `pinned-draining`, `failover`,
 *   `round-robin`, and `kv_pull=compute-cheaper` when the cost model chose to compute).
 * - `shorter-than-a-block`: less than one block short: a full turn reuses whole blocks only.
 * - `evicted`: the blocks were gone from the backend that should hold them (detail:
 *   `state-evicted` when the backend had dropped the trajectory's state too, else
 *   `blocks-evicted`; then, when the backend remembers the first missing block's eviction, e.g.
 *   `; by lease-broken from the pool 12.3 s before`; `; host_tier=N` when its host tier brought
 *   N tokens back).
 */
export const MISS_REASONS = ["prefix-break", "transfer-failed", "placed-away", "shorter-than-a-block", "evicted"] as const;
export type MissReason = (typeof MISS_REASONS)[number];

export interface CacheMiss {
  reason: MissReason;
  /** Prompt tokens it could have reused and computed instead (> 0). */
  tokens: number;
  /** What it could have reused: the previous turn's prompt and reply, or the most leading blocks any backend held when it was placed. */
  possibleTokens: number;
  detail?: string;
}

/**
 * The turn's cache miss, if it had one (undefined: it reused all it could).
 *
 * What it could reuse (`possibleTokens`, at most its prompt less one token: one is always
 * computed) is the larger of: the previous turn's prompt and reply tokens but the reply's last
 * (its transcript only grew, or was any other break, which is then the reason), and the most
 * leading blocks any backend held when the pool placed it (`placement`, block counts of 2 or
 * more; `blockSize` tokens each).
 *
 * @example
 * cacheMissOf({ previous: { promptTokens: 900, completionTokens: 12, backendUrl: A },
 *   turn: { mode: "full", fullReason: "backend-changed", route: "pinned-overloaded", promptTokens: 1200, cachedTokens: 0, backendUrl: B }, blockSize: 16 })
 * // { reason: "placed-away", tokens: 911, possibleTokens: 911, detail: "pinned-overloaded" }
 */
export function cacheMissOf(p: {
  previous: { promptTokens: number; completionTokens: number; backendUrl: string } | undefined;
  /** The turn's record (`TurnRecord`) without its miss. */
  turn: {
    mode: "delta" | "full";
    fullReason: string | null;
    route?: string;
    promptTokens: number;
    cachedTokens: number;
    backendUrl: string;
    kvPull?: KvPullReport;
    hostTierTokens?: number;
    evicted?: BlockEviction;
    prefixBreak?: { cause: PrefixBreakCause };
  };
  blockSize: number | undefined;
  placement?: { bestBlocks: number; placedBlocks: number };
}): CacheMiss | undefined {
  const { turn, previous } = p;
  const B = p.blockSize ?? 16;
  const cap = Math.max(0, turn.promptTokens - 1);
  // The reply's last token was sampled, never fed through the model: it has no KV.
  const fromPrevious = previous ? Math.max(0, previous.promptTokens + previous.completionTokens - 1) : 0;
  // A count of 1 only says a backend not indexed yet served the prefix key: no block count.
  // (Host-tier blocks count half there: whole blocks only.)
  const fromPlacement = p.placement && p.placement.bestBlocks > 1 ? Math.floor(p.placement.bestBlocks) * B : 0;
  const possibleTokens = Math.min(cap, Math.max(fromPrevious, fromPlacement));
  const tokens = possibleTokens - turn.cachedTokens;
  if (tokens <= 0) return undefined;
  const miss = (reason: MissReason, detail?: string): CacheMiss => ({ reason, tokens, possibleTokens, ...(detail ? { detail } : {}) });

  const cause = turn.prefixBreak?.cause ?? "none";
  if (cause !== "none" && cause !== "regenerate") return miss("prefix-break", cause);
  if (turn.kvPull && FAILED_KV_PULL_OUTCOMES.has(turn.kvPull.outcome)) return miss("transfer-failed", turn.kvPull.outcome);
  const moved = previous ? turn.backendUrl !== previous.backendUrl : p.placement !== undefined && p.placement.placedBlocks < p.placement.bestBlocks;
  const madeUp = turn.kvPull?.outcome === "pulled" || turn.kvPull?.outcome === "none-missing";
  if (moved && !madeUp && tokens >= B) {
    const route = turn.route ?? "unknown";
    return miss("placed-away", turn.kvPull?.outcome === "compute-cheaper" ? `${route}; kv_pull=compute-cheaper` : route);
  }
  // A first turn's possible reuse is the pool's estimate: only a placement away from it is named.
  if (!previous) return undefined;
  if (tokens < B && turn.mode === "full") return miss("shorter-than-a-block");
  const tier = turn.hostTierTokens ? `; host_tier=${turn.hostTierTokens}` : "";
  const e = turn.evicted;
  const how = e ? `; by ${e.by} from the ${e.from} ${(e.agoMs / 1000).toFixed(1)} s before` : "";
  return miss("evicted", `${turn.fullReason === "state-unknown" ? "state-evicted" : "blocks-evicted"}${how}${tier}`);
}
