import { ProtocolError, toProtocolError } from "../../protocol/errors";
import type { DoneFrame, GenerateRequest } from "../../protocol/messages";
import { generateFrames } from "../backend/backend-client";
import { failoverTarget, type RoutedBackend } from "../routing/placement";
import type { RouteReason } from "../routing/routing-policy";
import type { FullReason, TurnEvent, TurnRecord } from "./turn-types";

/** What a relayed turn sends and to whom first. */
export interface RelayParams {
  /** The backend placement chose. */
  backend: RoutedBackend;
  /** The pool's view, for failover. */
  backends: readonly RoutedBackend[];
  /** Failover ties break by this id. */
  trajectoryId: string;
  mode: "delta" | "full";
  fullReason: FullReason | null;
  route: RouteReason;
  /** The request of one attempt to `backend`: a delta turn can become full (state unknown, failover). */
  request: (mode: "delta" | "full", backend: RoutedBackend) => GenerateRequest;
  timeoutMs: number;
  /** Receives token events; returns false once the client is gone. */
  emit: (event: TurnEvent) => Promise<boolean>;
  signal: AbortSignal;
}

/** A relayed turn's outcome: the backend's done frame and how it was reached. */
export interface RelayResult {
  done: DoneFrame;
  mode: "delta" | "full";
  fullReason: FullReason | null;
  backend: RoutedBackend;
  route: RouteReason | "failover";
  /** ms from the relay's start to the first token (undefined: none came). */
  firstTokenMs: number | undefined;
  requestBytes: number;
  /** `performance.now()` and `Date.now()` when the relay started. */
  t0: number;
  startedAt: number;
}

/**
 * Relays one turn to a backend (trajectory and stateless turns alike): tokens go out as they
 * arrive; at most the planned attempt, one resend in full after `state_unknown` (the backend lost
 * the delta's state), and a failover to another up backend (least loaded first, each backend
 * once) when one fails or refuses the turn as `overloaded` before any token went out (the
 * transcript lives at the edge, so another backend can take the turn in full). When every backend
 * refused, the `overloaded` error (429) reaches the client, with the soonest of the refusals'
 * `retryAfterS` estimates (its `Retry-After`).
 * After tokens went out, a failure is a retryable `backend_unavailable`: a retry here would
 * duplicate text. Nothing is stored here; the caller commits on success.
 *
 * @example const r = await relayTurn({ backend, backends, trajectoryId, mode: "full", fullReason: "first-turn", route: "prefix", request, timeoutMs, emit, signal });
 */
export async function relayTurn(p: RelayParams): Promise<RelayResult> {
  const startedAt = Date.now();
  const t0 = performance.now();
  const stats = { requestBytes: 0 };
  let done: DoneFrame | undefined;
  let firstTokenMs: number | undefined;
  let mode = p.mode;
  let fullReason = p.fullReason;
  let backend = p.backend;
  let route: RouteReason | "failover" = p.route;
  const tried = new Set<string>();
  let clientGone = false;
  // The soonest any refusing backend expects its queue drained (the 429's Retry-After).
  let soonestRetryS: number | undefined;

  // The planned attempt, one resend in full, and one try on each other backend.
  for (let attempt = 0; attempt < p.backends.length + 2 && !done; attempt++) {
    tried.add(backend.url);
    try {
      for await (const frame of generateFrames(backend, p.request(mode, backend), { timeoutMs: p.timeoutMs, signal: p.signal, stats })) {
        if (frame.type === "token") {
          firstTokenMs ??= performance.now() - t0;
          const logprobs = frame.logprobs !== undefined && frame.logprobs.length > 0 ? frame.logprobs : undefined;
          // `reply` goes out even on a frame without text: a call's name or argument piece may be all
          // it adds (an empty one adds nothing: such a frame, without text, is not sent).
          const event: TurnEvent = { type: "token", text: frame.text, ...(logprobs ? { logprobs } : {}), ...(frame.reply ? { reply: frame.reply } : {}) };
          const adds = frame.reply !== undefined && (frame.reply.content !== undefined || frame.reply.toolCalls !== undefined);
          if ((frame.text || logprobs || adds) && !(await p.emit(event))) {
            clientGone = true;
            throw new ProtocolError("backend_unavailable", "the client went away");
          }
        } else if (frame.type === "done") {
          done = frame;
        } else {
          throw ProtocolError.fromFrame(frame);
        }
      }
    } catch (e) {
      const err = toProtocolError(e);
      const nothingSent = firstTokenMs === undefined;
      if (err.code === "state_unknown" && mode === "delta" && nothingSent) {
        mode = "full";
        fullReason = "state-unknown";
        continue;
      }
      // A backend that is gone, or whose queue is full (`overloaded`), gets the turn elsewhere: the
      // least loaded up backend not tried yet. When every one refused, the client gets the 429.
      const movable = err.code === "backend_unavailable" || err.code === "overloaded";
      if (err.code === "overloaded" && err.retryAfterS !== undefined) soonestRetryS = Math.min(soonestRetryS ?? Infinity, err.retryAfterS);
      const next = movable && nothingSent && !clientGone && !p.signal.aborted ? failoverTarget(p.backends, tried, p.trajectoryId) : undefined;
      if (next) {
        backend = next;
        mode = "full";
        fullReason = "failover";
        route = "failover";
        continue;
      }
      if (err.code === "backend_unavailable" && !nothingSent && !clientGone) {
        throw new ProtocolError("backend_unavailable", `the backend failed during the turn (${err.message}); nothing was stored: retry the turn`, { retryable: true });
      }
      if (err.code === "overloaded" && soonestRetryS !== err.retryAfterS) throw new ProtocolError("overloaded", err.message, { retryable: err.retryable, retryAfterS: soonestRetryS });
      throw err;
    }
  }
  if (!done) throw new ProtocolError("backend_unavailable", "the backend ended the turn without a result");
  if (p.signal.aborted) throw new ProtocolError("backend_unavailable", "the client went away");
  return { done, mode, fullReason, backend, route, firstTokenMs, requestBytes: stats.requestBytes, t0, startedAt };
}

/**
 * The turn record of a relayed turn (`turn`: its number; 0 for a stateless turn).
 *
 * @example const record = turnRecord(result, { turn: store.numTurns() + 1 });
 */
export function turnRecord(r: RelayResult, extra: Pick<TurnRecord, "turn"> & Partial<Pick<TurnRecord, "prefixBreak" | "repaired">>): TurnRecord {
  const { done } = r;
  return {
    turn: extra.turn,
    startedAt: new Date(r.startedAt).toISOString(),
    mode: r.mode,
    fullReason: r.fullReason,
    promptTokens: done.usage.promptTokens,
    cachedTokens: done.usage.cachedTokens,
    computedTokens: done.usage.computedTokens,
    completionTokens: done.usage.completionTokens,
    ttftMs: round(r.firstTokenMs ?? performance.now() - r.t0),
    backendTtftMs: round(done.timings.ttftMs),
    totalMs: round(performance.now() - r.t0),
    backend: done.backendId,
    backendUrl: r.backend.url,
    finishReason: done.finishReason,
    requestBytes: r.requestBytes,
    ...(extra.prefixBreak ? { prefixBreak: extra.prefixBreak } : {}),
    ...(extra.repaired ? { repaired: extra.repaired } : {}),
    route: r.route,
    ...(done.kvPull ? { kvPull: { ...done.kvPull, ms: round(done.kvPull.ms) } } : {}),
    ...(done.hostTierTokens !== undefined ? { hostTierTokens: done.hostTierTokens } : {}),
    ...(done.evicted ? { evicted: done.evicted } : {}),
    ...(done.speculation ? { speculation: done.speculation } : {}),
  };
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}
