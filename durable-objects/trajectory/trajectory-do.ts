import { DurableObject } from "cloudflare:workers";
import { ProtocolError, toProtocolError } from "../../protocol/errors";
import type { ChatMessage } from "../../protocol/messages";
import { releaseState } from "../backend/backend-client";
import { placementCell } from "../pool/cell-route";
import { poolCell } from "../pool/pool-do";
import { routedBackends, type RoutedBackend } from "../routing/placement";
import { edgeSettings, routingPolicyOf } from "../settings";
import { tenantIndexOf } from "../tenant-index/tenant-index-do";
import { trajectoryName } from "../trajectory-name";
import { continuedTurn } from "../turn/continuation";
import { checkLimits } from "../turn/limits";
import { runTurn, turnPrefixKey } from "../turn/turn-runner";
import { encodeTurnEvent, turnEvents } from "../turn/turn-stream";
import type { StoredResponse, TrajectoryState, TurnEvent, TurnInput } from "../turn/turn-types";
import { LeaseKeeper } from "./lease-keeper";
import { parentPlacement, reportFirstTurn } from "./subagent-links";
import { TrajectoryStore } from "./trajectory-store";

/**
 * One trajectory: its transcript (the source of truth), turn records, pinned backend and the
 * backend's state id, in SQLite storage. Named `<tenant>/<trajectory id>` (`trajectoryName`).
 *
 * Thin by design: storage is `TrajectoryStore`, the turn logic `runTurn`. Turns are handled one
 * at a time: a turn that arrives while another runs is refused with `trajectory_busy` (409,
 * retryable) rather than queued, so a client never waits behind a turn it cannot see.
 *
 * - RPC: `turn` (a `TurnInput`; answers its `TurnEvent`s as they happen), `create`, `state`, `end`.
 * - `alarm`: releases a tool-pause lease at its deadline (`LeaseKeeper`, lease-keeper.ts).
 */
export class TrajectoryDO extends DurableObject<Env> {
  private readonly store: TrajectoryStore;
  private readonly leases: LeaseKeeper;
  private transcript: ChatMessage[] = [];
  private busy = false;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = new TrajectoryStore(ctx.storage, () => edgeSettings(this.env).idempotencyTurns);
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
  async create(params: { tenant: string; trajectoryId: string; parent?: string }): Promise<{ created: boolean; createdAt: string }> {
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
      idempotencyKeys: this.store.idempotencyKeyCount(),
      backendUrl: meta.backendUrl,
      turns: this.store.turns(),
      forks: this.store.forks(),
      parent: this.store.parent(),
      children: this.store.children(),
    };
  }

  /**
   * Notes a subagent of this trajectory (RPC, from the child's object before its first turn) and
   * answers where this one runs and its last prompt block hashes: what the child's first placement
   * needs (placement.ts rule 1b). Null when this trajectory does not exist.
   */
  async childPlacement(child: { trajectoryId: string; createdAt: string }): Promise<{ url: string | null; hashes: string[] } | null> {
    const meta = this.store.meta();
    if (!meta) return null;
    this.store.addChild(child);
    return { url: meta.backendUrl, hashes: this.store.promptBlockHashes() };
  }

  /** Records a subagent's first turn (RPC, from the child's object after it). */
  async childTurn(child: { trajectoryId: string; createdAt: string }, firstTurn: Parameters<TrajectoryStore["setChildFirstTurn"]>[2]): Promise<void> {
    if (this.store.meta()) this.store.setChildFirstTurn(child.trajectoryId, child.createdAt, firstTurn);
  }

  /** A stored Responses API response and its transcript slice (input and reply), or null. */
  async response(token: string): Promise<{ response: StoredResponse; messages: ChatMessage[] } | null> {
    const response = this.store.response(token);
    if (!response) return null;
    return { response, messages: response.rewritten ? [] : this.transcript.slice(response.inputFrom, response.messageEnd) };
  }

  /** Deletes a stored response (the transcript stays: later turns are built on it). */
  async deleteResponse(token: string): Promise<boolean> {
    return this.store.deleteResponse(token);
  }

  /** Creates this trajectory as a fork of another's response (see `TrajectoryStore.createFork`); false when it already exists. */
  async createFork(p: Parameters<TrajectoryStore["createFork"]>[0]): Promise<boolean> {
    if (this.store.meta()) return false;
    this.store.createFork(p);
    this.transcript = this.store.messages();
    return true;
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
      const target = meta.backendUrl ? (await this.backends(meta.backendUrl)).find((b) => b.url === meta.backendUrl) : undefined;
      if (target && meta.stateId) await releaseState(target, meta.stateId, 5000);
      await this.leases.end();
      this.store.deleteAll();
      this.transcript = [];
    } finally {
      this.busy = false;
    }
    return { ended: true };
  }

  /**
   * Runs one turn (RPC): answers its events as they happen, as a byte stream (`encodeTurnEvent`;
   * the Worker reads it with `turnEvents`). The Worker cancelling the stream (its client went away)
   * makes the next write fail, which aborts the turn: nothing is committed.
   */
  async turn(input: TurnInput): Promise<ReadableStream<Uint8Array>> {
    const { readable, writable } = new IdentityTransformStream();
    const writer = writable.getWriter();
    const abort = new AbortController();
    let open = true;
    const emit = async (event: TurnEvent): Promise<boolean> => {
      if (!open) return false;
      try {
        await writer.write(encodeTurnEvent(event));
        return true;
      } catch {
        open = false;
        abort.abort();
        return false;
      }
    };
    void this.serveTurn(input, emit, abort.signal).finally(() => {
      if (open) void writer.close().catch(() => {});
    });
    return readable;
  }

  private async serveTurn(input: TurnInput, emit: (e: TurnEvent) => Promise<boolean>, signal: AbortSignal): Promise<void> {
    if (this.busy) {
      await emit(errorEvent(new ProtocolError("trajectory_busy", "another turn of this trajectory is in progress; retry when it has finished")));
      return;
    }
    this.busy = true;
    let leaseStart: Awaited<ReturnType<LeaseKeeper["beforeTurn"]>> | undefined;
    let fork: { id: string; input: TurnInput } | undefined;
    try {
      if (input.previous) {
        const stored = this.store.response(input.previous.token);
        if (!stored) throw new ProtocolError("not_found", "previous_response_id: no such response");
        const continued = continuedTurn(input, stored, this.transcript);
        // The caps hold for the transcript the model would see, before a fork is created.
        this.checkLimits(continued);
        // A resend of a turn already run (its Idempotency-Key stored) replays here, not as a fork.
        if (stored.turn === this.store.lastTurn() || this.replays(input)) input = continued;
        else fork = await this.fork(continued, stored);
      } else this.checkLimits(input);
      if (!fork) await this.runHere(input, emit, signal, (l) => (leaseStart = l));
    } catch (e) {
      await emit(errorEvent(toProtocolError(e)));
    } finally {
      if (leaseStart) this.leases.afterTurn(leaseStart, this.transcript.at(-1));
      this.busy = false;
    }
    // A fork's turn runs in the fork's object; this one is free meanwhile.
    if (fork) await this.relayFork(fork, emit, signal);
  }

  /** Whether the turn's Idempotency-Key has a stored result (`runTurn` replays it). */
  private replays(input: TurnInput): boolean {
    return input.idempotencyKey !== undefined && this.store.idempotentResult(input.idempotencyKey) !== null;
  }

  /**
   * The configured caps (`checkLimits`) on the transcript this turn would give the model: an
   * append turn's stored messages and tools (unless it sends its own) with the new ones, or a
   * chat turn's whole transcript. Checked before anything is created or stored.
   */
  private checkLimits(input: TurnInput): void {
    const append = input.kind === "append";
    const storedTools = () => JSON.parse(this.store.meta()?.toolsJson ?? "[]") as NonNullable<TurnInput["tools"]>;
    checkLimits({ ...(append ? { stored: this.transcript } : {}), messages: input.messages, tools: input.tools ?? (append ? storedTools() : []) }, edgeSettings(this.env).limits);
  }

  /** Runs a turn in this trajectory (busy is held by the caller). */
  private async runHere(input: TurnInput, emit: (e: TurnEvent) => Promise<boolean>, signal: AbortSignal, onLease: (l: Awaited<ReturnType<LeaseKeeper["beforeTurn"]>>) => void): Promise<void> {
    if (input.kind === "chat") await this.create({ tenant: input.tenant, trajectoryId: input.trajectoryId, ...(input.parent !== undefined ? { parent: input.parent } : {}) });
    onLease(await this.leases.beforeTurn());
    const settings = edgeSettings(this.env);
    const parent = this.store.parent();
    // A subagent's first turn is placed with its parent (issue 36), and reported to it once done.
    const meta = this.store.meta();
    const subagent = parent?.relation === "subagent" && meta && this.store.numTurns() === 0 ? { of: trajectoryStub(this.env, input.tenant, parent.trajectoryId), parentId: parent.trajectoryId, meta } : undefined;
    const placeWith = subagent && !subagent.meta.backendUrl ? await parentPlacement(subagent.of, subagent.meta, subagent.parentId) : undefined;
    // The pool cell of this turn: its pinned backend's (a subagent's first turn: its parent's),
    // else the one its prefix key ranks first (cell-route.ts).
    // One prefix key for the cell and the turn (`runTurn` places and notes under it), computed at most once.
    const transcript = this.transcript;
    let key: Promise<string> | undefined;
    const prefixKey = () => (key ??= turnPrefixKey(input, transcript, meta ?? { toolsJson: "[]" }));
    const { cell, view } = await placementCell(this.env, settings, { key: prefixKey, model: input.model, pinned: meta?.backendUrl ?? placeWith?.url });
    const pool = poolCell(this.env, cell);
    this.transcript = await runTurn(
      {
        store: this.store,
        transcript: this.transcript,
        backends: routedBackends(view, settings.backendSecret),
        prefixKey,
        place: (p) => pool.place(p),
        notePrefix: (key, url, hashes, trajectoryId) => pool.notePrefix(key, url, hashes, trajectoryId),
        waitUntil: (p) => this.ctx.waitUntil(p),
        timeoutMs: settings.backendTimeoutMs,
        policy: routingPolicyOf(settings),
        canonicalize: !settings.canonicalizeOffTenants.has(input.tenant),
        ...(parent?.relation === "fork" ? { forkOf: trajectoryName(input.tenant, parent.trajectoryId) } : {}),
        ...(placeWith ? { parent: placeWith } : {}),
        emit,
        signal,
      },
      input,
    );
    const first = subagent && this.store.numTurns() === 1 ? this.store.lastTurnRecord() : null;
    if (subagent && first) this.ctx.waitUntil(reportFirstTurn(subagent.of, subagent.meta, first));
  }

  /**
   * Forks this trajectory at a stored response that is not its latest: a new trajectory object
   * holding the transcript up to that response, pinned to this one's backend (whose blocks it
   * shares by hash), noted among this one's forks. Answers the fork's id and its turn.
   */
  private async fork(input: TurnInput, stored: StoredResponse): Promise<{ id: string; input: TurnInput }> {
    const meta = this.store.meta()!;
    const id = `fork_${crypto.randomUUID().replace(/-/g, "")}`;
    const createdAt = new Date().toISOString();
    const messages = this.transcript.slice(0, stored.messageEnd);
    await trajectoryStub(this.env, input.tenant, id).createFork({
      tenant: input.tenant,
      trajectoryId: id,
      createdAt,
      parent: { trajectoryId: meta.trajectoryId, turn: stored.turn },
      messages,
      toolsJson: stored.toolsJson,
      backendUrl: meta.backendUrl,
    });
    this.store.addFork({ trajectoryId: id, turn: stored.turn, createdAt });
    return { id, input: { ...input, trajectoryId: id } };
  }

  /** Runs a fork's first turn in its object, passing its events on. */
  private async relayFork(fork: { id: string; input: TurnInput }, emit: (e: TurnEvent) => Promise<boolean>, signal: AbortSignal): Promise<void> {
    try {
      const stream = await trajectoryStub(this.env, fork.input.tenant, fork.id).turn(fork.input);
      const events = turnEvents(stream);
      const stop = () => void events.return(undefined);
      signal.addEventListener("abort", stop);
      try {
        for await (const event of events) if (!(await emit(event))) return;
      } finally {
        signal.removeEventListener("abort", stop);
      }
    } catch (e) {
      await emit(errorEvent(toProtocolError(e)));
    }
  }

  /** The lease deadline (the only alarm). */
  override async alarm(): Promise<void> {
    await this.leases.alarm();
  }

  /** The view of `pinned`'s pool cell (registered and static backends), shared in this isolate for POOL_VIEW_TTL_MS. */
  private async backends(pinned: string): Promise<RoutedBackend[]> {
    const settings = edgeSettings(this.env);
    const { view } = await placementCell(this.env, settings, { key: async () => pinned, pinned });
    return routedBackends(view, settings.backendSecret);
  }
}

/** The object of trajectory `id` of `tenant` (named by `trajectoryName`). */
export function trajectoryStub(env: Env, tenant: string, id: string): DurableObjectStub<TrajectoryDO> {
  return env.TRAJECTORY.get(env.TRAJECTORY.idFromName(trajectoryName(tenant, id)));
}

function errorEvent(err: ProtocolError): TurnEvent {
  return err.toFrame();
}
