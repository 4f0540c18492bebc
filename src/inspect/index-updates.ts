import type { Context } from "hono";
import { tenantIndexOf } from "../../durable-objects/tenant-index/tenant-index-do";
import type { TurnEvent } from "../../durable-objects/turn/turn-types";

type Edge = { Bindings: Env };

/**
 * Passes a trajectory turn's events through unchanged and, when its (not replayed) done event
 * goes by, notes the turn in the tenant's index after the answer (`waitUntil`), for the
 * inspector's list page (under the trajectory the start event names: a fork's own). A failed
 * note is logged, never the client's problem.
 *
 * @example const events = noteTurns(c, tenant, trajectoryId, trajectoryTurn(c.env, input));
 */
export async function* noteTurns<E extends Edge>(c: Context<E>, tenant: string, trajectoryId: string, events: AsyncGenerator<TurnEvent>): AsyncGenerator<TurnEvent> {
  for await (const event of events) {
    // A turn that forked runs in the fork, which its start event names.
    if (event.type === "start" && event.trajectoryId !== undefined) trajectoryId = event.trajectoryId;
    if (event.type === "done" && !event.replayed) {
      const t = event.turn;
      later(
        c,
        tenantIndexOf(c.env, tenant).noteTurn({
          id: trajectoryId,
          turn: {
            turn: t.turn,
            startedAt: t.startedAt,
            totalMs: t.totalMs,
            promptTokens: t.promptTokens,
            cachedTokens: t.cachedTokens,
            computedTokens: t.computedTokens,
            completionTokens: t.completionTokens,
            ...(t.prefixBreak ? { prefixBreak: t.prefixBreak.cause } : {}),
            ...(t.repaired ? { repaired: t.repaired } : {}),
            ...(t.miss ? { miss: { reason: t.miss.reason, tokens: t.miss.tokens } } : {}),
          },
        }),
      );
    }
    yield event;
  }
}

/** Notes a created trajectory in the tenant's index (after the answer). */
export function noteCreated<E extends Edge>(c: Context<E>, tenant: string, trajectoryId: string, createdAt: string): void {
  later(c, tenantIndexOf(c.env, tenant).noteCreated({ id: trajectoryId, createdAt }));
}

/** Removes a deleted trajectory from the tenant's index (after the answer). */
export function noteDeleted<E extends Edge>(c: Context<E>, tenant: string, trajectoryId: string): void {
  later(c, tenantIndexOf(c.env, tenant).noteDeleted({ id: trajectoryId }));
}

function later<E extends Edge>(c: Context<E>, work: Promise<unknown>): void {
  const guarded = work.catch((e: unknown) => console.error("tenant index update failed", e));
  try {
    c.executionCtx.waitUntil(guarded);
  } catch {
    // No execution context (not in workerd): the promise still runs.
  }
}
