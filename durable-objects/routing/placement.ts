import { ProtocolError } from "../../protocol/errors";
import type { BackendTarget } from "../backend/backend-client";
import { DEFAULT_TUNABLES, route, routeCounter, type RouteReason, type RoutingPolicyName, type RoutingTunables } from "./routing-policy";

/**
 * Placement: the one rule for where a trajectory's turn runs, and the load figures it compares.
 * Everything that picks a backend (a trajectory's turn, failover, a stateless turn, the pool's
 * `place`) calls this module; `routing-policy.ts` holds the pure policies it applies.
 *
 * The rule (affinity, the default policy; docs/architecture.md "The pool and placement"):
 *   1. A trajectory stays on its pinned backend unless it is down, or its SMOOTHED load exceeds
 *      the least loaded backend's by more than `pinAbsMargin` and `relMargin` times
 *      (`pinned-overloaded`), or its prefill queue the shortest one by more than
 *      `pinQueueAbsMarginS` and `relMargin` times (`pinned-queued`).
 *      Staying needs no pool call (`staysPinned`).
 *   1b. A subagent's first placement (its trajectory links a parent, issue 36): the parent's
 *      pinned backend, unless it is down, draining or its PLACEMENT load exceeds the least loaded
 *      by more than `absMargin` and `relMargin` times (rule 2's test); reason `parent`. Else rule
 *      2 over the PARENT's prompt block hashes (the child has none yet), with a pull of the
 *      shared prefix from the holder (`kvSource`) when the child lands elsewhere.
 *   2. Otherwise (new trajectory, or leaving its pin) it is PLACED, in the one pool object
 *      (`PoolDO.place` -> `placeOver`): the backend holding the longest run of its leading KV
 *      blocks unless that one's PLACEMENT load exceeds the least loaded by more than `absMargin`
 *      and `relMargin` times, or its prefill queue the shortest by more than `queueAbsMarginS`
 *      and `relMargin` times; else the least loaded of the backends whose queue is not past
 *      those margins (ties by rendezvous hash of the id; `queue-avoided` when one with as few
 *      sequences was passed over for its queue).
 *   3. A backend that fails before answering: the turn fails over to the least loaded up
 *      backend not tried yet, in full (`failoverTarget`).
 *   The margins and their defaults are `DEFAULT_TUNABLES` (routing-policy.ts).
 *   Other policies (round-robin, least-loaded, consistent-hash: for comparison) route locally
 *   over the trajectory object's view.
 *
 * Load figures, two in sequences (running + waiting) and one in seconds:
 *   - smoothed load (`smoothedLoad`): the backend's `loadAvg` (time constant 4 s), else its
 *     instant load. What the pin test compares, so a momentary burst does not move pinned
 *     trajectories (each move is a full prefill elsewhere).
 *   - placement load (`placementLoad`): max(instant, smoothed) plus the placements the pool made
 *     there that its last heartbeat cannot show yet. What placing compares, so a burst of new
 *     trajectories arriving between heartbeats sees itself instead of piling onto one backend.
 *   - prefill queue (`queueSeconds`): its last heartbeat's queued prompt tokens over its measured
 *     prefill rate: how long a new turn waits there before its own prefill starts. Every rule
 *     compares it next to the sequences (routing-policy.ts: `queueAbsMarginS`,
 *     `pinQueueAbsMarginS`), so a backend with a few sequences but a long prompt queue is not
 *     taken for an idle one. 0 when the backend reports no queue or no rate (older backends,
 *     static BACKEND_URLS ones).
 */

/** A backend as a trajectory object routes over it: where it is, whether it is up, its smoothed load. */
export interface RoutedBackend extends BackendTarget {
  up: boolean;
  /** Draining: up (it serves its blocks to the backends its trajectories move to) but taking no placements. */
  draining?: boolean;
  /** `smoothedLoad` of its last heartbeat (0 when unknown). */
  load: number;
  /** `queueSeconds` of its last heartbeat (0 when unknown). */
  queueS?: number;
}

/**
 * The pool's view as trajectory objects and stateless turns route over it: each backend with the
 * shared secret and its smoothed load.
 *
 * @example const backends = routedBackends(await poolOf(env).view(), settings.backendSecret);
 */
export function routedBackends(view: readonly (LoadReport & { url: string; up: boolean; draining?: boolean })[], secret: string): RoutedBackend[] {
  return view.map((b) => ({ url: b.url, secret, up: b.up, load: smoothedLoad(b), queueS: queueSeconds(b), ...(b.draining ? { draining: true } : {}) }));
}

/** The load fields of a heartbeat. */
export interface LoadReport {
  running: number;
  waiting: number;
  loadAvg?: number;
  queuedTokens?: number;
  prefillTokensPerS?: number;
}

/**
 * Seconds the backend's queued prompt tokens take to prefill at its measured rate: 0 without
 * either figure (an older backend, a static one, one that has not measured its rate yet).
 *
 * @example queueSeconds({ running: 1, waiting: 3, queuedTokens: 12_800, prefillTokensPerS: 640 }) // 20
 */
export function queueSeconds(b: LoadReport): number {
  const tokens = b.queuedTokens ?? 0;
  const rate = b.prefillTokensPerS ?? 0;
  return tokens > 0 && rate > 0 ? tokens / rate : 0;
}

/** The load the pin test compares: `loadAvg` when reported, else running + waiting. */
export function smoothedLoad(b: LoadReport): number {
  return b.loadAvg ?? b.running + b.waiting;
}

/** The load placing compares: max(instant, smoothed) plus placements not in the last heartbeat yet. */
export function placementLoad(b: LoadReport, pendingPlacements: number): number {
  return Math.max(b.running + b.waiting, b.loadAvg ?? 0) + pendingPlacements;
}

/** Whether affinity keeps the trajectory on its pinned backend (up, not overloaded): then no placement is needed. */
export function staysPinned(pinned: string | null | undefined, trajectoryId: string, backends: readonly RoutedBackend[], tunables: RoutingTunables = DEFAULT_TUNABLES): boolean {
  if (pinned === null || pinned === undefined) return false;
  return route("affinity", { trajectoryId, pinned }, backends.map(snapshotOf), tunables)?.reason === "pinned";
}

/** Another up backend not tried yet for this turn: the least loaded (ties by trajectory id). */
export function failoverTarget(backends: readonly RoutedBackend[], tried: ReadonlySet<string>, trajectoryId: string): RoutedBackend | undefined {
  const rest = backends.filter((b) => !tried.has(b.url));
  const d = route("least-loaded", { trajectoryId }, rest.map(snapshotOf));
  return rest.find((b) => b.url === d?.backendId);
}

/**
 * What a subagent's first placement knows of its parent trajectory (rule 1b): its pinned backend
 * (null: it has run no turn) and the short hashes of its last prompt's blocks.
 */
export interface ParentPlacement {
  url: string | null;
  hashes: string[];
}

/** Where the pool placed a trajectory, and why. */
export interface Placed {
  url: string;
  reason: RouteReason;
  /**
   * Another live backend (draining ones included) whose indexed blocks hold a longer leading run
   * of this trajectory's blocks than `url`: the placed backend pulls the difference from it
   * (`GenerateRequest.kvSource`) instead of prefilling it. A popular prefix is so copied to a
   * second backend when its holder is overloaded. Absent when `url` holds the longest run.
   */
  kvSource?: string;
}

/**
 * The backend for a trajectory's turn (the rule above). `place` asks the pool (called only when
 * affinity does not keep the pin); its answer is used when it names a backend this view has up,
 * else affinity routes over this view without prefix information.
 *
 * @example const { backend, reason } = await chooseBackend({ policy: "affinity", pinned, trajectoryId, turnsDone, backends, place });
 */
export async function chooseBackend<P extends Placed>(p: {
  policy: RoutingPolicyName;
  pinned: string | null;
  trajectoryId: string;
  /** Turns already done (round-robin walks one backend per turn). */
  turnsDone: number;
  backends: readonly RoutedBackend[];
  /** A subagent's first placement: its parent's pinned backend (rule 1b). */
  parent?: string | undefined;
  place: () => Promise<P | null>;
}): Promise<{ backend: RoutedBackend; reason: RouteReason; placed?: P }> {
  if (p.backends.length === 0) throw new ProtocolError("backend_unavailable", "no backend is configured or registered");
  if (p.policy === "affinity" && !staysPinned(p.pinned, p.trajectoryId, p.backends)) {
    const placed = await p.place();
    const backend = placed ? p.backends.find((b) => b.url === placed.url && b.up) : undefined;
    // `placed`: the pool's answer the turn follows (its pull source, the prefix counts it ranked by).
    if (backend) return { backend, reason: placed!.reason, placed: placed! };
  }
  const req = { trajectoryId: p.trajectoryId, pinned: p.pinned ?? undefined, parent: p.parent, counter: routeCounter(p.trajectoryId, p.turnsDone) };
  const d = route(p.policy, req, p.backends.map(snapshotOf));
  if (!d) throw new ProtocolError("backend_unavailable", "no backend is up (none answered its heartbeats)");
  return { backend: p.backends.find((b) => b.url === d.backendId)!, reason: d.reason };
}

/** A turn without a trajectory: the least loaded up backend (ties by a fresh id). */
export function statelessTarget(backends: readonly RoutedBackend[]): RoutedBackend {
  const d = route("least-loaded", { trajectoryId: crypto.randomUUID() }, backends.map(snapshotOf));
  if (!d) throw new ProtocolError("backend_unavailable", "no backend is configured or up");
  return backends.find((b) => b.url === d.backendId)!;
}

/** A backend as the pool sees it when placing (`PoolDO.place`). */
export interface PlacementCandidate extends LoadReport {
  url: string;
  up: boolean;
  draining?: boolean;
  /** Placements made there that its last heartbeat cannot show yet. */
  pending: number;
}

/**
 * The pool's placement decision over its view (`PoolDO.place`, serialized in the pool object):
 * affinity over placement loads, ranked by leading blocks held. Null when no backend is up.
 *
 * @example placeOver({ trajectoryId: "t1", prefixBlocks: { a: 12 } }, [{ url: "a", up: true, running: 1, waiting: 0, pending: 0 }])
 */
export function placeOver(
  p: { trajectoryId: string; pinned?: string | undefined; parent?: string | undefined; prefixBlocks: Record<string, number>; policy?: RoutingPolicyName },
  candidates: readonly PlacementCandidate[],
  tunables: RoutingTunables = DEFAULT_TUNABLES,
): Placed | null {
  const snapshot = candidates.map((b) => ({ id: b.url, up: b.up, load: placementLoad(b, b.pending), queueS: queueSeconds(b), ...(b.draining ? { draining: true } : {}) }));
  const d = route(p.policy ?? "affinity", { trajectoryId: p.trajectoryId, pinned: p.pinned, parent: p.parent, prefixBlocks: new Map(Object.entries(p.prefixBlocks)) }, snapshot, tunables);
  return d ? { url: d.backendId, reason: d.reason } : null;
}

/**
 * The pull source for a placement on `target`: the live backend other than `target` whose
 * INDEXED blocks (`heldBlocks`: the block index's counts, not placement marks) hold the longest
 * leading run, when that run is longer than `target`'s. Ties go to a backend not draining (it
 * stays), then by url.
 *
 * @example pullSource("b", { a: 12, b: 3 }, [{ url: "a", up: true }, { url: "b", up: true }]) // "a"
 */
export function pullSource(target: string, heldBlocks: Record<string, number>, backends: readonly { url: string; up: boolean; draining?: boolean }[]): string | undefined {
  let best: { url: string; draining: boolean } | undefined;
  let bestBlocks = heldBlocks[target] ?? 0;
  for (const b of [...backends].sort((x, y) => (x.url < y.url ? -1 : 1))) {
    const n = heldBlocks[b.url] ?? 0;
    if (b.url === target || !b.up || n < bestBlocks || n === 0) continue;
    if (n > bestBlocks || (best !== undefined && best.draining && !b.draining)) {
      best = { url: b.url, draining: b.draining === true };
      bestBlocks = n;
    }
  }
  return best?.url;
}

function snapshotOf(b: RoutedBackend) {
  return { id: b.url, up: b.up, load: b.load, queueS: b.queueS ?? 0, ...(b.draining ? { draining: true } : {}) };
}
