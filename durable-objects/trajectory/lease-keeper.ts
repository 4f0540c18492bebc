import type { ChatMessage } from "../../protocol/messages";
import type { BackendTarget } from "../backend/backend-client";
import { releaseLease, requestLease } from "../backend/lease-client";
import { predictLeaseReturn, predictLeaseTtl, wantsLease } from "./lease-policy";
import type { LeaseSettings } from "../settings";
import type { SqlHost } from "../store-schema";
import { LeaseStore, type ToolWait } from "./lease-store";
import type { TrajectoryStore } from "./trajectory-store";

/** What `beforeTurn` saw, for `afterTurn`. */
export interface TurnStart {
  priorStateId: string | null;
  wait: ToolWait | null;
}

export interface LeaseKeeperParams {
  host: SqlHost;
  trajectory: TrajectoryStore;
  /** The object's alarm (one alarm: the lease deadline). */
  alarms: { setAlarm(at: number): Promise<void>; deleteAlarm(): Promise<void> };
  settings: () => LeaseSettings;
  secret: () => string;
  /** Keeps a fire-and-forget call alive past the turn (`ctx.waitUntil`). */
  waitUntil: (p: Promise<unknown>) => void;
  now?: () => number;
  /** Per backend call. Default 5000. */
  timeoutMs?: number;
  /**
   * The tenant's recent tool pauses (its index object): each pause is noted there, and a
   * trajectory with too few pauses of its own predicts from the tenant's.
   */
  tenantPauses?: () => TenantPauses | undefined;
}

/** Where a tenant's tool pauses are pooled (TenantIndexDO). */
export interface TenantPauses {
  notePause(ms: number): Promise<void>;
  pauseSample(): Promise<number[]>;
}

/**
 * A trajectory object's side of tool-pause leases (see lease-policy.ts for the TTL):
 *
 *   turn ends in tool calls ──> record the wait; lease (stateId, ttl) on its backend  [waitUntil]
 *        │                              └─ granted: alarm at now + ttl
 *        ├─ alarm fires ──────────────> release (expired) on the backend
 *        └─ next turn starts ─────────> record the pause; cancel the alarm; the turn itself ends
 *                                       the lease on that backend (or, if it went elsewhere or
 *                                       failed, an explicit release)  [waitUntil]
 *
 * Nothing here delays or fails a turn: backend calls are best effort and run after the reply.
 *
 * @example
 * const start = await keeper.beforeTurn(); ... run the turn ...; keeper.afterTurn(start, transcript.at(-1));
 */
export class LeaseKeeper {
  readonly store: LeaseStore;
  private readonly now: () => number;

  constructor(private readonly p: LeaseKeeperParams) {
    this.store = new LeaseStore(p.host);
    this.now = p.now ?? Date.now;
  }

  migrate(): void {
    this.store.migrate();
  }

  /** At the start of a turn: ends the tool wait (recording its pause) and cancels the alarm. */
  async beforeTurn(): Promise<TurnStart> {
    const priorStateId = this.p.trajectory.meta()?.stateId ?? null;
    const wait = this.store.wait();
    if (wait) {
      const pause = Math.max(0, this.now() - wait.since);
      this.store.endWait(pause);
      const tenant = this.p.tenantPauses?.();
      if (tenant) this.p.waitUntil(tenant.notePause(pause).catch((e: unknown) => console.error("noting a tool pause in the tenant index failed:", e)));
      if (wait.leaseUntil !== null) await this.p.alarms.deleteAlarm();
    }
    return { priorStateId, wait };
  }

  /** After a turn (committed or not; synchronous, calls go out through waitUntil). */
  afterTurn(start: TurnStart, reply: ChatMessage | undefined): void {
    const meta = this.p.trajectory.meta();
    const committed = meta !== null && meta.stateId !== null && meta.stateId !== start.priorStateId;
    const prev = start.wait;
    // A committed turn on the same backend ended the lease there (delta: a hit); otherwise release it.
    if (prev && (!committed || meta.backendUrl !== prev.backendUrl)) {
      this.p.waitUntil(releaseLease(this.target(prev.backendUrl), { stateId: prev.stateId }, this.timeoutMs));
    }
    const settings = this.p.settings();
    if (!committed || meta.backendUrl === null || !wantsLease(settings, reply)) return;
    const stateId = meta.stateId!;
    this.store.startWait({ since: this.now(), stateId, backendUrl: meta.backendUrl, leaseUntil: null });
    const pauses = this.store.pauses();
    const backendUrl = meta.backendUrl;
    this.p.waitUntil(
      (async () => {
        // Too few pauses of its own: the tenant's (one call, after the reply went out).
        const tenant = pauses.length < settings.minSamples ? this.p.tenantPauses?.() : undefined;
        const fallbackPauses = tenant
          ? await tenant.pauseSample().catch((e: unknown) => {
              console.error("reading the tenant's pause sample failed (the lease uses the default):", e);
              return [];
            })
          : [];
        const { ttlMs } = predictLeaseTtl({ pauses, fallbackPauses, settings });
        const expectedReturnMs = predictLeaseReturn({ pauses, fallbackPauses, settings });
        await this.grant(stateId, backendUrl, ttlMs, expectedReturnMs);
      })(),
    );
  }

  /** The alarm: releases a lease past its deadline (the wait stays, so the pause is still recorded). */
  async alarm(): Promise<void> {
    const w = this.store.wait();
    if (!w || w.leaseUntil === null) return;
    if (this.now() < w.leaseUntil) return this.p.alarms.setAlarm(w.leaseUntil);
    this.store.setLease(w.stateId, null);
    await releaseLease(this.target(w.backendUrl), { stateId: w.stateId, expired: true }, this.timeoutMs);
  }

  /** The trajectory ends: releases any lease, forgets pauses and the wait. */
  async end(): Promise<void> {
    const w = this.store.wait();
    this.store.clear();
    if (w) {
      await this.p.alarms.deleteAlarm();
      await releaseLease(this.target(w.backendUrl), { stateId: w.stateId }, this.timeoutMs);
    }
  }

  private async grant(stateId: string, backendUrl: string, ttlMs: number, expectedReturnMs: number): Promise<void> {
    const r = await requestLease(this.target(backendUrl), { stateId, ttlMs, expectedReturnMs }, this.timeoutMs);
    if (!r?.leased) return;
    // At or after the backend's own deadline (it started counting when the request arrived).
    const until = this.now() + ttlMs;
    if (this.store.setLease(stateId, until)) await this.p.alarms.setAlarm(until);
    // The next turn started meanwhile: the lease is stale.
    else await releaseLease(this.target(backendUrl), { stateId }, this.timeoutMs);
  }

  private target(url: string): BackendTarget {
    return { url, secret: this.p.secret() };
  }

  private get timeoutMs(): number {
    return this.p.timeoutMs ?? 5000;
  }
}
