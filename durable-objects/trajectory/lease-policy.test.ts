import { describe, expect, it } from "vitest";
import { percentile, predictLeaseReturn, predictLeaseTtl, wantsLease } from "./lease-policy";
import { LEASE_DEFAULTS, leaseSettings } from "../settings";

describe("lease policy", () => {
  it("takes the nearest-rank percentile", () => {
    expect(percentile([5, 1, 3, 2, 4], 0.9)).toBe(5);
    expect(percentile(Array.from({ length: 10 }, (_, i) => i + 1), 0.9)).toBe(9);
    expect(percentile([7], 0.5)).toBe(7);
    expect(() => percentile([], 0.9)).toThrow();
  });

  it("takes the nearest-rank percentile at q = p / 100 (the routing bench's p50 and p99)", () => {
    const xs = Array.from({ length: 100 }, (_, i) => 100 - i); // 1..100, unsorted
    expect(percentile(xs, 0.5)).toBe(50);
    expect(percentile(xs, 0.99)).toBe(99);
    expect(percentile(xs, 1)).toBe(100);
    expect(percentile([7], 0.99)).toBe(7);
    expect(percentile([3, 1, 2], 0.5)).toBe(2);
    expect(percentile([1, 2, 3, 4], 0.99)).toBe(4);
    expect(() => percentile([], 0.5)).toThrow(); // the bench guards empty samples itself (routing-report.test.ts)
  });

  it("predicts p90 of the trajectory's pauses x the safety factor, clamped", () => {
    const s = LEASE_DEFAULTS;
    expect(predictLeaseTtl({ pauses: [1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10_000], settings: s })).toEqual({ ttlMs: 13_500, basis: "trajectory" });
    expect(predictLeaseTtl({ pauses: [10, 20, 30], settings: s }).ttlMs).toBe(s.minMs);
    expect(predictLeaseTtl({ pauses: [1e6, 1e6, 1e6], settings: s }).ttlMs).toBe(s.maxMs);
  });

  it("falls back to the tenant's pauses, then the default, below 3 samples", () => {
    const s = LEASE_DEFAULTS;
    expect(predictLeaseTtl({ pauses: [4000, 4000], fallbackPauses: [2000, 2000, 2000], settings: s })).toEqual({ ttlMs: 3000, basis: "fallback" });
    expect(predictLeaseTtl({ pauses: [4000], settings: s })).toEqual({ ttlMs: 22_500, basis: "default" });
  });

  it("expects the agent back after the geometric mean of its own pauses (from the first), else the tenant's median, else the default", () => {
    const s = LEASE_DEFAULTS;
    expect(predictLeaseReturn({ pauses: [1000, 4000], settings: s })).toBe(2000);
    // One sample of its own beats the pooled ones (unlike the TTL, which waits for 3).
    expect(predictLeaseReturn({ pauses: [500], fallbackPauses: [9000, 9000, 9000], settings: s })).toBe(500);
    expect(predictLeaseReturn({ pauses: [], fallbackPauses: [1000, 3000, 8000], settings: s })).toBe(3000);
    expect(predictLeaseReturn({ pauses: [], fallbackPauses: [1000, 3000], settings: s })).toBe(s.defaultMs);
    // A central estimate, not clamped to the TTL's bounds; never below 1 ms.
    expect(predictLeaseReturn({ pauses: [300_000, 300_000], settings: s })).toBe(300_000);
    expect(predictLeaseReturn({ pauses: [0], settings: s })).toBe(1);
  });

  it("reads the Worker vars, defaults for what is unset or nonsense", () => {
    expect(leaseSettings({})).toEqual(LEASE_DEFAULTS);
    expect(leaseSettings({ LEASES: "off" }).mode).toBe("off");
    expect(leaseSettings({ LEASES: "ALWAYS" }).mode).toBe("always");
    expect(leaseSettings({ LEASES: "on", LEASE_MIN_MS: "250", LEASE_MAX_MS: "5000", LEASE_DEFAULT_MS: "x", LEASE_SAFETY_FACTOR: "2" })).toMatchObject({ minMs: 250, maxMs: 5000, defaultMs: 15_000, safetyFactor: 2 });
    expect(leaseSettings({ LEASE_MIN_MS: "9000", LEASE_MAX_MS: "10" }).maxMs).toBe(9000);
  });

  it("leases after tool calls (on), after every turn (always), never (off)", () => {
    const call = { id: "c", type: "function", function: { name: "ls", arguments: "{}" } };
    expect(wantsLease(LEASE_DEFAULTS, { tool_calls: [call] })).toBe(true);
    expect(wantsLease(LEASE_DEFAULTS, { tool_calls: [] })).toBe(false);
    expect(wantsLease(LEASE_DEFAULTS, {})).toBe(false);
    expect(wantsLease({ ...LEASE_DEFAULTS, mode: "always" }, {})).toBe(true);
    expect(wantsLease({ ...LEASE_DEFAULTS, mode: "off" }, { tool_calls: [call] })).toBe(false);
  });
});
