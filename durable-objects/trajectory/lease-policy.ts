import type { LeaseSettings } from "../settings";

/**
 * Tool-pause lease policy (pure): whether a finished turn asks its backend to hold the
 * trajectory's KV blocks, and for how long.
 *
 * Algorithm: the TTL is the `percentile` (p90) of this trajectory's observed tool pauses (time
 * from a turn that ended in tool calls to the start of the next turn); with fewer than
 * `minSamples` (3) of them, the fallback sample (the tenant's, when the caller has it), else
 * `defaultMs`. Times `safetyFactor`, clamped to [`minMs`, `maxMs`].
 *
 * Settings (Worker vars, parsed by `leaseSettings` in durable-objects/settings.ts), defaults next to the names:
 * - `LEASES` = `on` (lease after turns that end in tool calls) | `off` | `always` (after every
 *   turn: for agents whose tool calls the backend cannot see, e.g. ReAct text protocols)
 * - `LEASE_MIN_MS` = 1000, `LEASE_MAX_MS` = 120000, `LEASE_DEFAULT_MS` = 15000,
 *   `LEASE_SAFETY_FACTOR` = 1.5 (p90 and the safety factor are fixed in code otherwise)
 *
 * @example
 * const s = leaseSettings(env);
 * if (wantsLease(s, reply)) predictLeaseTtl({ pauses: [800, 1200, 950, 4000], settings: s }); // { ttlMs: 6000, basis: "trajectory" }
 */
/** Pauses kept per trajectory (the most recent). */
export const MAX_PAUSE_SAMPLES = 64;

/**
 * Whether a turn that produced `reply` should lease: `on` when it called tools, `always` always.
 *
 * @example wantsLease(LEASE_DEFAULTS, { tool_calls: [call] }) // true
 */
export function wantsLease(settings: LeaseSettings, reply: { tool_calls?: readonly unknown[] | undefined } | undefined): boolean {
  if (settings.mode === "off") return false;
  if (settings.mode === "always") return true;
  return (reply?.tool_calls?.length ?? 0) > 0;
}

/**
 * The TTL of the next lease (see the file comment).
 *
 * @example predictLeaseTtl({ pauses: [], settings: LEASE_DEFAULTS }) // { ttlMs: 22500, basis: "default" }
 */
export function predictLeaseTtl(params: { pauses: readonly number[]; fallbackPauses?: readonly number[]; settings: LeaseSettings }): { ttlMs: number; basis: "trajectory" | "fallback" | "default" } {
  const s = params.settings;
  let base: number;
  let basis: "trajectory" | "fallback" | "default";
  if (params.pauses.length >= s.minSamples) {
    base = percentile(params.pauses, s.percentile);
    basis = "trajectory";
  } else if ((params.fallbackPauses?.length ?? 0) >= s.minSamples) {
    base = percentile(params.fallbackPauses!, s.percentile);
    basis = "fallback";
  } else {
    base = s.defaultMs;
    basis = "default";
  }
  return { ttlMs: Math.round(Math.min(s.maxMs, Math.max(s.minMs, base * s.safetyFactor))), basis };
}

/**
 * When the agent is expected back, in ms after the lease starts: what the backend orders leases
 * by when admission must break one (the one expected back last goes first). The geometric mean of
 * this trajectory's observed pauses (from the first one: pauses cluster per agent, and a
 * trajectory's own single sample beats the pooled one), else the median of the fallback sample
 * (at least `minSamples`), else `defaultMs`. Unlike the TTL it is a central estimate, not a
 * bound, and it is not clamped (at least 1 ms). Measured against ordering by the TTL's deadline:
 * docs/benchmarks.md, Leases.
 *
 * @example predictLeaseReturn({ pauses: [1000, 4000], settings: LEASE_DEFAULTS }) // 2000
 */
export function predictLeaseReturn(params: { pauses: readonly number[]; fallbackPauses?: readonly number[]; settings: LeaseSettings }): number {
  const { pauses, settings: s } = params;
  let ms: number;
  if (pauses.length > 0) ms = Math.exp(pauses.reduce((a, x) => a + Math.log(Math.max(1, x)), 0) / pauses.length);
  else if ((params.fallbackPauses?.length ?? 0) >= s.minSamples) ms = percentile(params.fallbackPauses!, 0.5);
  else ms = s.defaultMs;
  return Math.max(1, Math.round(ms));
}

/**
 * Nearest-rank percentile (q in [0, 1]) of a non-empty sample.
 *
 * @example percentile([5, 1, 3, 2, 4], 0.9) // 5
 */
export function percentile(xs: readonly number[], q: number): number {
  if (xs.length === 0) throw new Error("percentile of an empty sample");
  const sorted = [...xs].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil(q * sorted.length)));
  return sorted[rank - 1]!;
}
