import type { ParentPlacement } from "../routing/placement";
import type { ChildRecord, TrajectoryMeta, TurnRecord } from "../turn/turn-types";

/**
 * The two RPCs a subagent's trajectory object calls on its parent's (`TrajectoryDO.childPlacement`
 * and `TrajectoryDO.childTurn`).
 */
export interface ParentObject {
  childPlacement(child: { trajectoryId: string; createdAt: string }): Promise<ParentPlacement | null>;
  childTurn(child: { trajectoryId: string; createdAt: string }, firstTurn: NonNullable<ChildRecord["firstTurn"]>): Promise<void>;
}

/**
 * Subagent links, the child's side (issue 36): before its first turn a subagent's trajectory
 * notes itself in its parent's object and learns where the parent runs and which prompt blocks it
 * has (placement.ts rule 1b: the child starts from the parent's system prompt and tools); after
 * its first turn it reports that turn's reuse, which the parent's state and inspector page show.
 * Both are best effort: a parent that does not exist, or an RPC that fails, leaves the child
 * placed like any new trajectory and unlisted.
 *
 * @example
 * const parent = await parentPlacement(trajectoryStub(env, tenant, link.trajectoryId), meta, link.trajectoryId); // { url, hashes } | undefined
 */
export async function parentPlacement(parent: ParentObject, child: Pick<TrajectoryMeta, "trajectoryId" | "createdAt" | "tenant">, parentId: string): Promise<ParentPlacement | undefined> {
  try {
    return (await parent.childPlacement({ trajectoryId: child.trajectoryId, createdAt: child.createdAt })) ?? undefined;
  } catch (e) {
    console.error(`subagent ${child.tenant}/${child.trajectoryId}: asking its parent ${parentId} where it runs failed:`, e);
    return undefined;
  }
}

/**
 * Reports a subagent's first turn to its parent (best effort: errors are logged).
 *
 * @example ctx.waitUntil(reportFirstTurn(parentStub, meta, store.lastTurnRecord()!));
 */
export async function reportFirstTurn(parent: ParentObject, child: Pick<TrajectoryMeta, "trajectoryId" | "createdAt" | "tenant">, turn: TurnRecord): Promise<void> {
  try {
    await parent.childTurn({ trajectoryId: child.trajectoryId, createdAt: child.createdAt }, firstTurnOf(turn));
  } catch (e) {
    console.error(`subagent ${child.tenant}/${child.trajectoryId}: reporting its first turn to its parent failed:`, e);
  }
}

/**
 * What a parent keeps of a child's first turn: its prompt and cached (reused) tokens, its backend and route.
 *
 * @example firstTurnOf(record) // { promptTokens: 1310, cachedTokens: 1280, backend: "http://10.0.0.2:8080", route: "parent" }
 */
export function firstTurnOf(turn: TurnRecord): NonNullable<ChildRecord["firstTurn"]> {
  return { promptTokens: turn.promptTokens, cachedTokens: turn.cachedTokens, backend: turn.backend, route: turn.route ?? null };
}
