import { describe, expect, it } from "vitest";
import { parsePolicy, route, routeCounter, ROUTING_POLICIES, type BackendSnapshot, type RouteDecision, type RouteRequest, type RoutingPolicyName } from "./routing-policy";

const b = (id: string, load: number, up = true): BackendSnapshot => ({ id, load, up });
/** A backend with `queueS` seconds of queued prefill. */
const q = (id: string, load: number, queueS: number): BackendSnapshot => ({ id, load, up: true, queueS });
const prefix = (entries: [string, number][]) => new Map(entries);

interface Case {
  name: string;
  policy: RoutingPolicyName;
  req: RouteRequest;
  backends: BackendSnapshot[];
  want: Partial<RouteDecision> | null;
}

const cases: Case[] = [
  { name: "keeps the pin under equal load", policy: "affinity", req: { trajectoryId: "t", pinned: "b1" }, backends: [b("b0", 2), b("b1", 2)], want: { backendId: "b1", reason: "pinned" } },
  { name: "keeps the pin within the absolute margin", policy: "affinity", req: { trajectoryId: "t", pinned: "b1" }, backends: [b("b0", 0), b("b1", 8)], want: { backendId: "b1", reason: "pinned" } },
  {
    name: "keeps a pin that placing would avoid (leaving costs a full prefill: a larger margin)",
    policy: "affinity",
    req: { trajectoryId: "t", pinned: "b1" },
    backends: [b("b0", 1), b("b1", 7)],
    want: { backendId: "b1", reason: "pinned" },
  },
  { name: "keeps the pin within the relative margin", policy: "affinity", req: { trajectoryId: "t", pinned: "b1" }, backends: [b("b0", 20), b("b1", 29)], want: { backendId: "b1", reason: "pinned" } },
  {
    name: "moves off a pin over both margins, to the least loaded",
    policy: "affinity",
    req: { trajectoryId: "t", pinned: "b1" },
    backends: [b("b0", 1), b("b1", 10), b("b2", 3)],
    want: { backendId: "b0", reason: "pinned-overloaded" },
  },
  {
    name: "moves off a down pin, to the backend with its prefix",
    policy: "affinity",
    req: { trajectoryId: "t", pinned: "b1", prefixBlocks: prefix([["b2", 5]]) },
    backends: [b("b0", 0), b("b1", 0, false), b("b2", 2)],
    want: { backendId: "b2", reason: "prefix" },
  },
  {
    name: "places a new trajectory where its longest prefix is",
    policy: "affinity",
    req: { trajectoryId: "t", prefixBlocks: prefix([["b0", 3], ["b2", 8]]) },
    backends: [b("b0", 0), b("b1", 0), b("b2", 2)],
    want: { backendId: "b2", reason: "prefix" },
  },
  {
    name: "places past the longest prefix once its holder runs more than absMargin (2) over the least loaded",
    policy: "affinity",
    req: { trajectoryId: "t", prefixBlocks: prefix([["b0", 3], ["b2", 8]]) },
    backends: [b("b0", 0), b("b1", 0), b("b2", 3)],
    want: { backendId: "b0", reason: "prefix" },
  },
  {
    name: "skips the prefix holder when it is overloaded (no hotspot)",
    policy: "affinity",
    req: { trajectoryId: "t", prefixBlocks: prefix([["b0", 40]]) },
    backends: [b("b0", 12), b("b1", 2), b("b2", 3)],
    want: { backendId: "b1", reason: "least-loaded" },
  },
  {
    name: "prefers the less loaded of equal prefixes",
    policy: "affinity",
    req: { trajectoryId: "t", prefixBlocks: prefix([["b0", 4], ["b1", 4]]) },
    backends: [b("b0", 3), b("b1", 1)],
    want: { backendId: "b1", reason: "prefix" },
  },
  {
    name: "places a subagent with its parent, over a longer prefix elsewhere",
    policy: "affinity",
    req: { trajectoryId: "child", parent: "b1", prefixBlocks: prefix([["b0", 9], ["b1", 6]]) },
    backends: [b("b0", 0), b("b1", 2)],
    want: { backendId: "b1", reason: "parent" },
  },
  {
    name: "places a subagent past its parent's backend once that runs more than absMargin (2) over the least loaded, where the parent's blocks are",
    policy: "affinity",
    req: { trajectoryId: "child", parent: "b1", prefixBlocks: prefix([["b1", 9], ["b2", 4]]) },
    backends: [b("b0", 0), b("b1", 3), b("b2", 1)],
    want: { backendId: "b2", reason: "prefix" },
  },
  { name: "places a subagent elsewhere when its parent's backend drains", policy: "affinity", req: { trajectoryId: "child", parent: "b0" }, backends: [{ ...b("b0", 0), draining: true }, b("b1", 1)], want: { backendId: "b1", reason: "least-loaded" } },
  { name: "places a subagent elsewhere when its parent's backend is down", policy: "affinity", req: { trajectoryId: "child", parent: "b0" }, backends: [b("b0", 0, false), b("b1", 1)], want: { backendId: "b1", reason: "least-loaded" } },
  { name: "a pinned subagent follows its pin, not its parent", policy: "affinity", req: { trajectoryId: "child", pinned: "b0", parent: "b1" }, backends: [b("b0", 1), b("b1", 0)], want: { backendId: "b0", reason: "pinned" } },
  // The prefill queue (queueS: queued prompt tokens / measured prefill rate, seconds).
  {
    name: "moves off a pin whose prefill queue is past pinQueueAbsMarginS (8 s) over the shortest, though its sequences are within the margin",
    policy: "affinity",
    req: { trajectoryId: "t", pinned: "b1" },
    backends: [b("b0", 1), q("b1", 2, 20), q("b2", 3, 1)],
    want: { backendId: "b0", reason: "pinned-queued" },
  },
  { name: "keeps a pin whose prefill queue is within pinQueueAbsMarginS", policy: "affinity", req: { trajectoryId: "t", pinned: "b1" }, backends: [b("b0", 0), q("b1", 2, 8)], want: { backendId: "b1", reason: "pinned" } },
  { name: "keeps a pin whose prefill queue is within relMargin of the shortest", policy: "affinity", req: { trajectoryId: "t", pinned: "b1" }, backends: [q("b0", 0, 20), q("b1", 2, 29)], want: { backendId: "b1", reason: "pinned" } },
  {
    name: "names sequences first when a pin is past both its margins",
    policy: "affinity",
    req: { trajectoryId: "t", pinned: "b1" },
    backends: [b("b0", 0), q("b1", 12, 30)],
    want: { backendId: "b0", reason: "pinned-overloaded" },
  },
  {
    name: "places past the longest prefix when its holder's prefill queue is past queueAbsMarginS (2 s)",
    policy: "affinity",
    req: { trajectoryId: "t", prefixBlocks: prefix([["b0", 3], ["b2", 8]]) },
    backends: [b("b0", 1), b("b1", 0), q("b2", 1, 2.5)],
    want: { backendId: "b0", reason: "prefix" },
  },
  {
    name: "places a new trajectory past a backend running fewer sequences whose prefill queue is long (queue-avoided)",
    policy: "affinity",
    req: { trajectoryId: "t" },
    backends: [q("b0", 0, 30), b("b1", 1), q("b2", 2, 0.5)],
    want: { backendId: "b1", reason: "queue-avoided" },
  },
  {
    name: "ranks by sequences when the queues are within the margins",
    policy: "affinity",
    req: { trajectoryId: "t" },
    backends: [q("b0", 1, 10), q("b1", 0, 14)],
    want: { backendId: "b1", reason: "least-loaded" },
  },
  {
    name: "places a subagent past its parent's backend when that one's prefill queue is long",
    policy: "affinity",
    req: { trajectoryId: "child", parent: "b1" },
    backends: [b("b0", 1), q("b1", 0, 6)],
    want: { backendId: "b0", reason: "queue-avoided" },
  },
  { name: "least-loaded passes over a backend whose prefill queue is long", policy: "least-loaded", req: { trajectoryId: "t" }, backends: [q("b0", 0, 30), b("b1", 1)], want: { backendId: "b1", reason: "least-loaded" } },
  { name: "no backend up", policy: "affinity", req: { trajectoryId: "t" }, backends: [b("b0", 0, false)], want: null },
  { name: "least-loaded ignores pins", policy: "least-loaded", req: { trajectoryId: "t", pinned: "b0" }, backends: [b("b0", 3), b("b1", 2)], want: { backendId: "b1", reason: "least-loaded" } },
  { name: "round-robin follows the counter over sorted ids", policy: "round-robin", req: { trajectoryId: "t", counter: 4 }, backends: [b("b2", 0), b("b0", 9), b("b1", 0)], want: { backendId: "b1" } },
  {
    name: "moves off a draining pin, to the least loaded that is not draining",
    policy: "affinity",
    req: { trajectoryId: "t", pinned: "b0" },
    backends: [{ ...b("b0", 0), draining: true }, b("b1", 3), b("b2", 1)],
    want: { backendId: "b2", reason: "pinned-draining" },
  },
  {
    name: "places nothing new on a draining backend, even one holding the whole prefix",
    policy: "affinity",
    req: { trajectoryId: "t", prefixBlocks: prefix([["b0", 40]]) },
    backends: [{ ...b("b0", 0), draining: true }, b("b1", 2)],
    want: { backendId: "b1", reason: "least-loaded" },
  },
  { name: "keeps a draining pin when every backend drains", policy: "affinity", req: { trajectoryId: "t", pinned: "b1" }, backends: [{ ...b("b0", 0), draining: true }, { ...b("b1", 4), draining: true }], want: { backendId: "b1", reason: "pinned" } },
  { name: "round-robin skips draining backends", policy: "round-robin", req: { trajectoryId: "t", counter: 1 }, backends: [b("b0", 0), { ...b("b1", 0), draining: true }, b("b2", 0)], want: { backendId: "b2" } },
  { name: "round-robin skips down backends", policy: "round-robin", req: { trajectoryId: "t", counter: 1 }, backends: [b("b0", 0), b("b1", 0, false), b("b2", 0)], want: { backendId: "b2" } },
];

describe("routing policy (table)", () => {
  it.each(cases)("$policy: $name", ({ policy, req, backends, want }) => {
    const got = route(policy, req, backends);
    if (want === null) expect(got).toBeNull();
    else expect(got).toMatchObject(want);
  });
});

describe("routing policy (properties)", () => {
  const ids = Array.from({ length: 4000 }, (_, i) => `trajectory-${i}`);
  const four = [b("b0", 0), b("b1", 0), b("b2", 0), b("b3", 0)];

  it("consistent hashing is stable and moves only the removed backend's trajectories", () => {
    const before = ids.map((id) => route("consistent-hash", { trajectoryId: id }, four)!.backendId);
    const after = ids.map((id) => route("consistent-hash", { trajectoryId: id }, four.slice(0, 3))!.backendId);
    ids.forEach((_, i) => {
      if (before[i] !== "b3") expect(after[i]).toBe(before[i]);
    });
    const counts = new Map<string, number>();
    for (const x of before) counts.set(x, (counts.get(x) ?? 0) + 1);
    for (const n of counts.values()) expect(n).toBeGreaterThan(800); // 1000 each, spread evenly
  });

  it("spreads new trajectories over equally loaded backends instead of the first one", () => {
    const picks = ids.map((id) => route("affinity", { trajectoryId: id }, four)!.backendId);
    for (const id of ["b0", "b1", "b2", "b3"]) expect(picks.filter((p) => p === id).length).toBeGreaterThan(800);
  });

  it("bounds the load a popular prefix attracts", () => {
    // Every new trajectory shares a system prompt cached on b0; admit them one by one.
    const loads = new Map([["b0", 0], ["b1", 0], ["b2", 0], ["b3", 0]]);
    for (let i = 0; i < 100; i++) {
      const snapshot = [...loads].map(([id, load]) => b(id, load));
      const d = route("affinity", { trajectoryId: `n${i}`, prefixBlocks: prefix([["b0", 10]]) }, snapshot)!;
      loads.set(d.backendId, loads.get(d.backendId)! + 1);
    }
    const values = [...loads.values()];
    const mean = values.reduce((a, v) => a + v, 0) / values.length;
    expect(Math.max(...values) / mean).toBeLessThanOrEqual(1.5);
    expect(loads.get("b0")).toBe(Math.max(...values)); // it still gets the most: its cache is warm
  });

  it("round-robin by routeCounter walks one trajectory's turns over every backend", () => {
    const seen = [0, 1, 2, 3].map((turn) => route("round-robin", { trajectoryId: "t7", counter: routeCounter("t7", turn) }, four)!.backendId);
    expect(new Set(seen).size).toBe(4);
    // Different trajectories start at different backends.
    const starts = new Set(ids.slice(0, 40).map((id) => route("round-robin", { trajectoryId: id, counter: routeCounter(id, 0) }, four)!.backendId));
    expect(starts.size).toBe(4);
  });

  it("parses policy names from configuration", () => {
    for (const p of ROUTING_POLICIES) expect(parsePolicy(p)).toBe(p);
    expect(parsePolicy("random")).toBeUndefined();
    expect(parsePolicy(undefined)).toBeUndefined();
  });
});
