import { fnv1a, rendezvous } from "../../protocol/rendezvous";

/**
 * Routing policies: which backend serves a trajectory's next turn. Pure functions over a
 * snapshot of the pool; `placement.ts` applies them (the one placement rule, its load figures).
 *
 * A backend's load has two figures: its sequences (running + waiting) and its prefill queue
 * (`queueS`: its queued prompt tokens over its measured prefill rate, the seconds a new turn
 * waits before its own prefill starts). A backend is OVERLOADED when either figure is past the
 * margins over the smallest one among the backends taking placements: sequences by more than
 * `absMargin` AND `relMargin` times the least, or its queue by more than `queueAbsMarginS` AND
 * `relMargin` times the shortest (a backend that reports no queue counts 0).
 *
 * Cache-aware affinity with bounded load (the default, `affinity`):
 *
 *   1. Keep the pinned backend unless it is down or overloaded by the pin margins (`pinAbsMargin`,
 *      `pinQueueAbsMarginS`, `relMargin`). Reasons when it moves: `pinned-overloaded` (its
 *      sequences), `pinned-queued` (only its prefill queue is far past the others').
 *   1b. A subagent's first placement (no pin yet, `parent`: its parent's pinned backend): take
 *      the parent's backend unless it is down, draining or overloaded by rule 2's test
 *      (`absMargin`): the child starts from the parent's system prompt and tools, whose blocks
 *      are there. Reason `parent`. An overloaded parent backend falls through to rule 2 (the
 *      caller ranks by the parent's prompt blocks, so the child lands where they are).
 *   2. Otherwise (new trajectory, pin down or overloaded) take the backend holding the longest
 *      cached prefix of this trajectory's blocks (from KV events), unless that one is overloaded
 *      by the same test; ties go to the less loaded one.
 *   3. Otherwise the least loaded backend among those whose prefill queue is not past the placing
 *      margins (ties: stable by rendezvous hash of the trajectory id, so equal backends split new
 *      trajectories evenly instead of piling onto the first one). Reason `least-loaded`, or
 *      `queue-avoided` when a backend with as few sequences was passed over for its queue.
 *      The `least-loaded` policy (and failover, stateless turns) picks the same way.
 *
 * Rule 2's load bound is what avoids the hotspot where every new trajectory sharing a popular
 * system prompt lands on the one backend that caches it: once that backend runs `absMargin`
 * and `relMargin` x more than the least loaded one, new trajectories go elsewhere (and cache the
 * prompt there too).
 *
 * Tunables and defaults (why these values, with the routing benchmark's figures:
 * docs/benchmarks.md, Routing):
 *   absMargin = 2     (sequences running + waiting; for placing: rule 2)
 *   pinAbsMargin = 8  (for leaving a pin: rule 1; a move costs a full prefill of the transcript
 *                      elsewhere, so the pinned backend must be much busier before it pays)
 *   queueAbsMarginS = 2     (seconds of queued prefill; for placing: rules 1b, 2, 3. Both queue
 *                            margins mirror the sequence ones; no benchmark has tuned them yet)
 *   pinQueueAbsMarginS = 8  (seconds of queued prefill, for leaving a pin: the same reasoning as
 *                            pinAbsMargin; with the default queue bound of 16,384 tokens it fires
 *                            only on a backend prefilling under ~2,000 tokens/s, a CPU one)
 *   relMargin = 1.5   (x the least loaded backend's figure; both rules, both figures)
 *   minPrefixBlocks = 1 (a prefix hit shorter than this is ignored)
 *
 * Alternatives for comparison: `round-robin`, `least-loaded`, `consistent-hash` (rendezvous
 * hashing on the trajectory id: stable, load-blind).
 */

export type RoutingPolicyName = "affinity" | "round-robin" | "least-loaded" | "consistent-hash";

export const ROUTING_POLICIES: readonly RoutingPolicyName[] = ["affinity", "round-robin", "least-loaded", "consistent-hash"];

export interface BackendSnapshot {
  id: string;
  up: boolean;
  /** Draining (`POST /v1/drain`, SIGTERM): up, serving its blocks, but taking no placements while another backend is up. */
  draining?: boolean;
  /** Sequences running plus waiting on the backend. */
  load: number;
  /** Seconds its queued prompt tokens take to prefill (`queueSeconds`); absent or 0: none or unknown. */
  queueS?: number;
}

export interface RouteRequest {
  trajectoryId: string;
  /** The backend this trajectory is pinned to, if any. */
  pinned?: string | undefined;
  /** A subagent's first placement: its parent trajectory's pinned backend (rule 1b). */
  parent?: string | undefined;
  /** Per backend id: how many of this trajectory's leading blocks it holds (from KV events). */
  prefixBlocks?: ReadonlyMap<string, number> | undefined;
  /** For round-robin: the policy's turn counter (the caller keeps and increments it). */
  counter?: number | undefined;
}

export interface RoutingTunables {
  absMargin: number;
  /** Rule 1's absolute margin (leaving a pin). */
  pinAbsMargin: number;
  /** Absolute margin on the prefill queue, seconds (placing). */
  queueAbsMarginS: number;
  /** Rule 1's absolute margin on the prefill queue, seconds (leaving a pin). */
  pinQueueAbsMarginS: number;
  relMargin: number;
  minPrefixBlocks: number;
}

export const DEFAULT_TUNABLES: RoutingTunables = { absMargin: 2, pinAbsMargin: 8, queueAbsMarginS: 2, pinQueueAbsMarginS: 8, relMargin: 1.5, minPrefixBlocks: 1 };

export type RouteReason = "pinned" | "parent" | "prefix" | "least-loaded" | "queue-avoided" | "round-robin" | "hash" | "pinned-down" | "pinned-overloaded" | "pinned-queued" | "pinned-draining";

export interface RouteDecision {
  backendId: string;
  reason: RouteReason;
}

/**
 * Picks the backend for a turn; `null` when no backend is up.
 *
 * @example
 * route("affinity", { trajectoryId: "t1", pinned: "b0" }, [{ id: "b0", up: true, load: 3 }, { id: "b1", up: true, load: 0 }])
 * // { backendId: "b0", reason: "pinned" }   (3 is within 0 + pinAbsMargin 8)
 */
export function route(
  policy: RoutingPolicyName,
  req: RouteRequest,
  backends: readonly BackendSnapshot[],
  tunables: RoutingTunables = DEFAULT_TUNABLES,
): RouteDecision | null {
  // Draining backends take nothing while any other is up (and everything when none is).
  const live = backends.filter((b) => b.up);
  const taking = live.filter((b) => !b.draining);
  const up = taking.length > 0 ? taking : live;
  if (up.length === 0) return null;
  switch (policy) {
    case "round-robin": {
      const sorted = [...up].sort((a, b) => (a.id < b.id ? -1 : 1));
      return { backendId: sorted[(req.counter ?? 0) % sorted.length]!.id, reason: "round-robin" };
    }
    case "least-loaded":
      return { backendId: leastLoaded(up, req.trajectoryId, tunables).id, reason: "least-loaded" };
    case "consistent-hash":
      return { backendId: byHash(up, req.trajectoryId).id, reason: "hash" };
    case "affinity":
      return affinity(req, backends, up, tunables);
  }
}

function affinity(req: RouteRequest, all: readonly BackendSnapshot[], up: BackendSnapshot[], t: RoutingTunables): RouteDecision {
  const minLoad = Math.min(...up.map((b) => b.load));
  const busy = (b: BackendSnapshot, abs: number) => b.load > minLoad + abs && b.load > minLoad * t.relMargin;
  const queued = queuedPast(up, t);
  const overloaded = (b: BackendSnapshot) => busy(b, t.absMargin) || queued(b, t.queueAbsMarginS);

  let why: RouteReason | undefined;
  if (req.pinned !== undefined) {
    const pinned = all.find((b) => b.id === req.pinned);
    const takes = pinned !== undefined && up.includes(pinned);
    const pinBusy = takes && busy(pinned, t.pinAbsMargin);
    const pinQueued = takes && queued(pinned, t.pinQueueAbsMarginS);
    if (takes && !pinBusy && !pinQueued) return { backendId: pinned.id, reason: "pinned" };
    why = takes ? (pinBusy ? "pinned-overloaded" : "pinned-queued") : pinned?.up ? "pinned-draining" : "pinned-down";
  } else if (req.parent !== undefined) {
    const parent = up.find((b) => b.id === req.parent);
    if (parent !== undefined && !overloaded(parent)) return { backendId: parent.id, reason: "parent" };
  }

  let best: BackendSnapshot | undefined;
  let bestBlocks = t.minPrefixBlocks - 1;
  for (const b of up) {
    const blocks = req.prefixBlocks?.get(b.id) ?? 0;
    if (overloaded(b) || blocks < t.minPrefixBlocks) continue;
    if (blocks > bestBlocks || (blocks === bestBlocks && best !== undefined && b.load < best.load)) {
      best = b;
      bestBlocks = blocks;
    }
  }
  if (best) return { backendId: best.id, reason: "prefix" };
  const choice = leastLoaded(up, req.trajectoryId, t);
  // A backend running no more sequences than the choice was passed over for its prefill queue.
  const avoided = up.some((b) => b.load <= choice.load && queued(b, t.queueAbsMarginS));
  return { backendId: choice.id, reason: why ?? (avoided ? "queue-avoided" : "least-loaded") };
}

/** Whether a backend's prefill queue exceeds the shortest among `up` by more than `abs` seconds AND `relMargin` times. */
function queuedPast(up: readonly BackendSnapshot[], t: RoutingTunables): (b: BackendSnapshot, abs: number) => boolean {
  const minQueue = Math.min(...up.map(queueOf));
  return (b, abs) => queueOf(b) > minQueue + abs && queueOf(b) > minQueue * t.relMargin;
}

function queueOf(b: BackendSnapshot): number {
  return b.queueS ?? 0;
}

/**
 * A round-robin counter for callers without a shared one (a trajectory object): the trajectory's
 * hash plus how far it has come, so successive turns walk the backends from a per-trajectory start.
 */
export function routeCounter(trajectoryId: string, step: number): number {
  return (fnv1a(trajectoryId) + step) >>> 0;
}

/** A policy name from configuration, or undefined when it names none. */
export function parsePolicy(name: string | undefined): RoutingPolicyName | undefined {
  return ROUTING_POLICIES.find((p) => p === name);
}

/** The least loaded backend of those whose prefill queue is not past the placing margins (never none: the shortest queue qualifies). */
function leastLoaded(up: BackendSnapshot[], key: string, t: RoutingTunables): BackendSnapshot {
  const queued = queuedPast(up, t);
  const candidates = up.filter((b) => !queued(b, t.queueAbsMarginS));
  const min = Math.min(...candidates.map((b) => b.load));
  return byHash(
    candidates.filter((b) => b.load === min),
    key,
  );
}

/** Rendezvous hashing over the backends (protocol/rendezvous.ts). */
function byHash(candidates: BackendSnapshot[], key: string): BackendSnapshot {
  return rendezvous(candidates, key, (b) => b.id);
}
