import { DurableObject } from "cloudflare:workers";
import { ProtocolError, toProtocolError } from "../../protocol/errors";
import type { ChatMessage } from "../../protocol/messages";
import { releaseState } from "../backend/backend-client";
import { poolOf, type PoolBackend } from "../pool/pool-do";
import { routedBackends, type RoutedBackend } from "../routing/placement";
import { edgeSettings, routingPolicyOf } from "../settings";
import { tenantIndexOf } from "../tenant-index/tenant-index-do";
import { runTurn } from "../turn/turn-runner";
import type { TrajectoryState, TurnEvent, TurnInput } from "../turn/turn-types";
import { LeaseKeeper } from "./lease-keeper";
import { TrajectoryStore } from "./trajectory-store";

/**
 * One trajectory: its transcript (the source of truth), turn records, pinned backend and the
 * backend's state id, in SQLite storage. Named `<tenant>/<trajectory id>`.
 *
 * Thin by design: storage is `TrajectoryStore`, the turn logic `runTurn`. Turns are handled one
 * at a time: a turn that arrives while another runs is refused with `trajectory_busy` (409,
 * retryable) rather than queued, so a client never waits behind a turn it cannot see.
 *
 * - `fetch(POST /turn)`: body `TurnInput`, answers NDJSON `TurnEvent`s as they happen.
 * - RPC: `create`, `state`, `end`.
 * - `alarm`: releases a tool-pause lease at its deadline (`LeaseKeeper`, lease-keeper.ts).
 */
export class TrajectoryDO extends DurableObject<Env> {
  private readonly store: TrajectoryStore;
  private readonly leases: LeaseKeeper;
  private transcript: ChatMessage[] = [];
  private busy = false;
  private poolCache: { at: number; backends: PoolBackend[] } | undefined;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = new TrajectoryStore(ctx.storage);
    this.leases = new LeaseKeeper({
      host: ctx.storage,
      trajectory: this.store,
      alarms: ctx.storage,
      settings: () => edgeSettings(this.env).leases,
      secret: () => edgeSettings(this.env).backendSecret,
      waitUntil: (p) => ctx.waitUntil(p),
      tenantPauses: () => {
        const tenant = this.store.meta()?.tenant;
        return tenant === undefined ? undefined : tenantIndexOf(this.env, tenant);
      },
    });
    void ctx.blockConcurrencyWhile(async () => {
      this.store.migrate();
      this.leases.migrate();
      this.transcript = this.store.messages();
    });
  }

  /** Creates the trajectory if new; answers whether it was created now. */
  async create(params: { tenant: string; trajectoryId: string }): Promise<{ created: boolean; createdAt: string }> {
    const meta = this.store.meta();
    if (meta) return { created: false, createdAt: meta.createdAt };
    const createdAt = new Date().toISOString();
    this.store.create({ ...params, createdAt });
    return { created: true, createdAt };
  }

  async state(): Promise<TrajectoryState | null> {
    const meta = this.store.meta();
    if (!meta) return null;
    return {
      id: meta.trajectoryId,
      tenant: meta.tenant,
      createdAt: meta.createdAt,
      messageCount: this.transcript.length,
      backendUrl: meta.backendUrl,
      turns: this.store.turns(),
    };
  }

  /** The stored transcript (for tests and the inspector). */
  async messages(): Promise<ChatMessage[] | null> {
    return this.store.meta() ? this.transcript : null;
  }

  /** Ends the trajectory: releases the backend state and deletes everything stored. Refused (`busy`) while a turn runs. */
  async end(): Promise<{ ended: boolean; busy?: boolean }> {
    const meta = this.store.meta();
    if (!meta) return { ended: false };
    if (this.busy) return { ended: false, busy: true };
    // Busy while the backend state is released, so no turn starts between that and the delete.
    this.busy = true;
    try {
      const target = meta.backendUrl ? (await this.backends()).find((b) => b.url === meta.backendUrl) : undefined;
      if (target && meta.stateId) await releaseState(target, meta.stateId, 5000);
      await this.leases.end();
      this.store.deleteAll();
      this.transcript = [];
    } finally {
      this.busy = false;
    }
    return { ended: true };
  }

  override async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    if (request.method !== "POST" || url.pathname !== "/turn") return new Response("not found", { status: 404 });
    const input = (await request.json()) as TurnInput;
    const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
    const writer = writable.getWriter();
    const encoder = new TextEncoder();
    const abort = new AbortController();
    let open = true;
    const emit = async (event: TurnEvent): Promise<boolean> => {
      if (!open) return false;
      try {
        await writer.write(encoder.encode(`${JSON.stringify(event)}\n`));
        return true;
      } catch {
        open = false;
        abort.abort();
        return false;
      }
    };
    void this.turn(input, emit, abort.signal).finally(() => {
      if (open) void writer.close().catch(() => {});
    });
    return new Response(readable, { headers: { "content-type": "application/x-ndjson" } });
  }

  private async turn(input: TurnInput, emit: (e: TurnEvent) => Promise<boolean>, signal: AbortSignal): Promise<void> {
    if (this.busy) {
      await emit(errorEvent(new ProtocolError("trajectory_busy", "another turn of this trajectory is in progress; retry when it has finished")));
      return;
    }
    this.busy = true;
    let leaseStart: Awaited<ReturnType<LeaseKeeper["beforeTurn"]>> | undefined;
    try {
      if (input.kind === "chat") await this.create({ tenant: input.tenant, trajectoryId: input.trajectoryId });
      leaseStart = await this.leases.beforeTurn();
      const settings = edgeSettings(this.env);
      this.transcript = await runTurn(
        {
          store: this.store,
          transcript: this.transcript,
          backends: await this.backends(),
          place: (p) => poolOf(this.env).place(p),
          notePrefix: (key, url, hashes, trajectoryId) => poolOf(this.env).notePrefix(key, url, hashes, trajectoryId),
          waitUntil: (p) => this.ctx.waitUntil(p),
          timeoutMs: settings.backendTimeoutMs,
          policy: routingPolicyOf(settings),
          canonicalize: !settings.canonicalizeOffTenants.has(input.tenant),
          emit,
          signal,
        },
        input,
      );
    } catch (e) {
      await emit(errorEvent(toProtocolError(e)));
    } finally {
      if (leaseStart) this.leases.afterTurn(leaseStart, this.transcript.at(-1));
      this.busy = false;
    }
  }

  /** The lease deadline (the only alarm). */
  override async alarm(): Promise<void> {
    await this.leases.alarm();
  }

  /** The pool's view (registered and static backends), reused for POOL_VIEW_TTL_MS. */
  private async backends(): Promise<RoutedBackend[]> {
    const settings = edgeSettings(this.env);
    if (!this.poolCache || Date.now() - this.poolCache.at > settings.poolViewTtlMs) {
      this.poolCache = { at: Date.now(), backends: await poolOf(this.env).view() };
    }
    return routedBackends(this.poolCache.backends, settings.backendSecret);
  }
}

function errorEvent(err: ProtocolError): TurnEvent {
  return { type: "error", code: err.code, message: err.message, retryable: err.retryable };
}
