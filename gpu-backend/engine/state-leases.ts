import type { GenerateRequest, LeaseResponse, ReleaseLeaseResponse } from "../../protocol/messages";
import type { KvCacheManager } from "../kv/kv-cache-manager";
import type { LeaseTable } from "../kv/lease-table";
import type { ChatCodec } from "./chat-codec";
import { PrefixLeases } from "./prefix-leases";
import type { StateStore } from "./state-store";

/**
 * Leases by turn state: what `POST /v1/leases` and `/v1/leases/release` do, and what a new turn
 * does to the lease of the state it extends. A state's lease holds the cached full blocks of its
 * prompt + generated tokens (the longest cached chain, as the next turn's prefix lookup finds it).
 *
 * @example
 * const leases = new StateLeases({ kv, states, table: new LeaseTable({ pool }), codec });
 * leases.lease("state-1", 20_000); // { leased: true, blocks: 40, expiresAt: 1767225620000 }
 */
export class StateLeases {
  readonly table: LeaseTable;
  /** Client-named prefixes (`cachePoints`) leased in the same table. */
  readonly prefix: PrefixLeases;
  private readonly kv: KvCacheManager;
  private readonly states: StateStore;

  constructor(params: { kv: KvCacheManager; states: StateStore; table: LeaseTable; codec: ChatCodec }) {
    this.kv = params.kv;
    this.states = params.states;
    this.table = params.table;
    this.prefix = new PrefixLeases({ kv: params.kv, table: params.table, codec: params.codec });
  }

  /**
   * Leases the blocks of a kept state for `ttlMs`; `leased: false` for an unknown state.
   * `expectedReturnMs` (the lease request's, optional) is when the agent is expected back: the
   * key by which the table picks a lease to break (lease-table.ts).
   */
  lease(stateId: string, ttlMs: number, expectedReturnMs?: number): LeaseResponse {
    const state = this.states.get(stateId);
    if (!state) return { leased: false, blocks: 0, expiresAt: 0 };
    const tokenIds = [...state.promptTokenIds, ...state.generatedTokenIds];
    const { blockIds } = this.kv.findCachedPrefix({ tokenIds, root: state.hashRoot });
    const r = this.table.lease({ key: stateId, blockIds, ttlMs, ...(expectedReturnMs !== undefined ? { expectedReturnMs } : {}) });
    return { leased: r.leased, blocks: r.blocks, expiresAt: r.expiresAt };
  }

  /** The edge's release: `expired` when its alarm fired at the deadline. */
  release(stateId: string, expired: boolean): ReleaseLeaseResponse {
    const r = this.table.end(stateId, expired ? "expired" : "released");
    return r.ended ? { released: true } : { released: false, hit: r.endedBefore === "hit" };
  }

  /**
   * A turn arrived: a delta turn ends its state's lease as a hit (its saved tokens counted); a full
   * turn of a trajectory ends the lease of the trajectory's latest state as released.
   */
  onTurn(req: GenerateRequest): void {
    if (req.mode === "delta" && req.stateId !== undefined) {
      this.table.end(req.stateId, "hit");
      return;
    }
    const latest = req.trajectoryId === undefined ? undefined : this.states.latestFor(req.trajectoryId);
    if (latest) this.table.end(latest.stateId, "released");
  }
}
