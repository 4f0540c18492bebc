import { DurableObject } from "cloudflare:workers";
import { TenantIndexStore, type IndexedTrajectory, type IndexedTurn, type TenantCounters } from "./tenant-index-store";

/** The tenant's index object (one per tenant, named by the tenant). */
export function tenantIndexOf(env: Env, tenant: string): DurableObjectStub<TenantIndexDO> {
  return env.TENANT_INDEX.get(env.TENANT_INDEX.idFromName(tenant));
}

/**
 * A tenant's list of trajectories for the inspector's list page: id, creation, last turn, and
 * token totals. Trajectory objects are addressed by name and cannot be enumerated, so the Worker
 * notes each creation, finished turn and deletion here (after answering, `waitUntil`). An index,
 * not the source of truth: each trajectory object holds its own records.
 *
 * Also the tenant's counters (turns, prefix breaks by cause, canonicalization repairs, cache
 * misses by reason), and its most recent tool pauses, the fallback sample of lease TTLs.
 *
 * Thin: storage and its bounds are `TenantIndexStore` (tenant-index-store.ts).
 *
 * RPC: `noteCreated`, `noteTurn`, `noteDeleted`, `list`, `counters`, `notePause`, `pauseSample`.
 */
export class TenantIndexDO extends DurableObject<Env> {
  private readonly store: TenantIndexStore;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = new TenantIndexStore(ctx.storage);
    void ctx.blockConcurrencyWhile(async () => this.store.migrate());
  }

  /** A trajectory was created (a second note for the same id changes nothing). */
  async noteCreated(params: { id: string; createdAt: string }): Promise<void> {
    this.store.noteCreated(params);
  }

  /** A turn finished; an unknown trajectory is added (created at the turn's start). */
  async noteTurn(params: { id: string; turn: IndexedTurn }): Promise<void> {
    this.store.noteTurn(params);
  }

  /** The trajectory was deleted: forget it and its turns. */
  async noteDeleted(params: { id: string }): Promise<void> {
    this.store.noteDeleted(params);
  }

  /** A trajectory of this tenant waited `ms` on its tools. */
  async notePause(ms: number): Promise<void> {
    this.store.notePause(ms);
  }

  /** The tenant's recent tool pauses in milliseconds (newest last). */
  async pauseSample(): Promise<number[]> {
    return this.store.pauseSample();
  }

  /** The tenant's counters: turns, prefix breaks by cause, canonicalization repairs, cache misses. */
  async counters(): Promise<TenantCounters> {
    return this.store.counters();
  }

  /** The most recently active trajectories first, at most `limit` (default 100). */
  async list(params: { limit?: number } = {}): Promise<IndexedTrajectory[]> {
    return this.store.list(params);
  }
}
