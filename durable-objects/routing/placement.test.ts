import { describe, expect, it } from "vitest";
import { chooseBackend, failoverTarget, placementLoad, placeOver, pullSource, queueSeconds, routedBackends, smoothedLoad, statelessTarget, staysPinned, type RoutedBackend } from "./placement";

const b = (url: string, load: number, up = true): RoutedBackend => ({ url, secret: "s", up, load });

describe("placement", () => {
  it("names its two load figures: smoothed for the pin test, max(instant, smoothed) + pending for placing", () => {
    expect(smoothedLoad({ running: 5, waiting: 1, loadAvg: 2.5 })).toBe(2.5);
    expect(smoothedLoad({ running: 5, waiting: 1 })).toBe(6);
    expect(placementLoad({ running: 5, waiting: 1, loadAvg: 2.5 }, 2)).toBe(8);
    expect(placementLoad({ running: 0, waiting: 0, loadAvg: 3 }, 1)).toBe(4);
  });

  it("keeps a pin unless it is down or over the pin margin", () => {
    expect(staysPinned("a", "t", [b("a", 8), b("b", 0)])).toBe(true);
    expect(staysPinned("a", "t", [b("a", 9), b("b", 0)])).toBe(false);
    expect(staysPinned("a", "t", [b("a", 0, false), b("b", 0)])).toBe(false);
    expect(staysPinned(null, "t", [b("a", 0)])).toBe(false);
  });

  it("fails over to the least loaded up backend not tried yet", () => {
    const backends = [b("a", 0), b("b", 3), b("c", 1), b("d", 0, false)];
    expect(failoverTarget(backends, new Set(["a"]), "t")?.url).toBe("c");
    expect(failoverTarget(backends, new Set(["a", "b", "c"]), "t")).toBeUndefined();
  });

  it("asks the pool only when affinity does not keep the pin, and uses its answer when that backend is up here", async () => {
    let asked = 0;
    const place = async () => {
      asked++;
      return { url: "b", reason: "prefix" as const };
    };
    const base = { policy: "affinity" as const, trajectoryId: "t", turnsDone: 1, place };
    expect(await chooseBackend({ ...base, pinned: "a", backends: [b("a", 1), b("b", 0)] })).toMatchObject({ backend: { url: "a" }, reason: "pinned" });
    expect(asked).toBe(0);
    expect(await chooseBackend({ ...base, pinned: null, backends: [b("a", 1), b("b", 0)] })).toMatchObject({ backend: { url: "b" }, reason: "prefix" });
    expect(asked).toBe(1);
    // The pool names a backend this view has down: route here without prefix information.
    expect(await chooseBackend({ ...base, pinned: null, backends: [b("a", 1), b("b", 0, false)] })).toMatchObject({ backend: { url: "a" }, reason: "least-loaded" });
    await expect(chooseBackend({ ...base, pinned: null, backends: [] })).rejects.toThrow(/no backend/);
  });

  it("routes the comparison policies locally, without the pool", async () => {
    const place = async () => {
      throw new Error("not asked");
    };
    const backends = [b("a", 0), b("b", 0)];
    const first = await chooseBackend({ policy: "round-robin", pinned: null, trajectoryId: "t", turnsDone: 0, backends, place });
    const second = await chooseBackend({ policy: "round-robin", pinned: first.backend.url, trajectoryId: "t", turnsDone: 1, backends, place });
    expect(second.backend.url).not.toBe(first.backend.url);
    expect(second.reason).toBe("round-robin");
  });

  it("places over placement loads: pending placements push a holder over the margin", () => {
    const holder = { url: "a", up: true, running: 2, waiting: 0, pending: 0 };
    const other = { url: "b", up: true, running: 0, waiting: 0, pending: 0 };
    expect(placeOver({ trajectoryId: "t", prefixBlocks: { a: 10 } }, [holder, other])).toEqual({ url: "a", reason: "prefix" });
    expect(placeOver({ trajectoryId: "t", prefixBlocks: { a: 10 } }, [{ ...holder, pending: 1 }, other])).toEqual({ url: "b", reason: "least-loaded" });
    expect(placeOver({ trajectoryId: "t", prefixBlocks: {} }, [{ ...holder, up: false }])).toBeNull();
  });

  it("places a subagent with its parent until the children placed there push it over the margin, then by the parent's blocks", async () => {
    const parent = { url: "a", up: true, running: 1, waiting: 0, pending: 0 };
    const others = [
      { url: "b", up: true, running: 0, waiting: 0, pending: 0 },
      { url: "c", up: true, running: 0, waiting: 0, pending: 0 },
    ];
    // The parent's prompt blocks: all on its backend, the shared system prompt also on c.
    const p = { trajectoryId: "child", parent: "a", prefixBlocks: { a: 20, c: 8 } };
    expect(placeOver(p, [parent, ...others])).toEqual({ url: "a", reason: "parent" });
    expect(placeOver(p, [{ ...parent, pending: 1 }, ...others])).toEqual({ url: "a", reason: "parent" });
    // 1 running + 2 children placed = 3 > 0 + absMargin 2: the next child goes where the parent's prefix also is.
    expect(placeOver(p, [{ ...parent, pending: 2 }, ...others])).toEqual({ url: "c", reason: "prefix" });
    // Without the pool's answer the trajectory object applies the same rule over its own view.
    const place = async () => null;
    expect(await chooseBackend({ policy: "affinity", pinned: null, parent: "b", trajectoryId: "child", turnsDone: 0, backends: [b("a", 0), b("b", 1)], place })).toMatchObject({ backend: { url: "b" }, reason: "parent" });
  });

  it("names as pull source the live backend holding the longest leading run beyond the target's", () => {
    const up = (url: string, draining = false) => ({ url, up: true, ...(draining ? { draining: true } : {}) });
    expect(pullSource("b", { a: 12, b: 3 }, [up("a"), up("b")])).toBe("a");
    // The target already holds as much: nothing to pull.
    expect(pullSource("b", { a: 12, b: 12 }, [up("a"), up("b")])).toBeUndefined();
    expect(pullSource("b", {}, [up("a"), up("b")])).toBeUndefined();
    // A down holder is no source; a draining one is (it serves its blocks until it exits) ...
    expect(pullSource("b", { a: 12 }, [{ url: "a", up: false }, up("b")])).toBeUndefined();
    expect(pullSource("b", { a: 12 }, [up("a", true), up("b")])).toBe("a");
    // ... but on a tie a backend that stays is preferred.
    expect(pullSource("c", { a: 12, b: 12 }, [up("a", true), up("b"), up("c")])).toBe("b");
    expect(pullSource("c", { a: 14, b: 12 }, [up("a", true), up("b"), up("c")])).toBe("a");
  });

  it("hands the placement's pull source to the turn", async () => {
    const place = async () => ({ url: "b", reason: "least-loaded" as const, kvSource: "a" });
    const got = await chooseBackend({ policy: "affinity", pinned: null, trajectoryId: "t", turnsDone: 0, backends: [b("a", 9), b("b", 0)], place });
    expect(got).toMatchObject({ backend: { url: "b" }, placed: { kvSource: "a" } });
  });

  it("names the prefill queue figure: queued prompt tokens over the measured prefill rate, 0 without either", () => {
    expect(queueSeconds({ running: 1, waiting: 3, queuedTokens: 12_800, prefillTokensPerS: 640 })).toBe(20);
    expect(queueSeconds({ running: 1, waiting: 3, queuedTokens: 12_800 })).toBe(0);
    expect(queueSeconds({ running: 1, waiting: 3, prefillTokensPerS: 640 })).toBe(0);
    expect(queueSeconds({ running: 0, waiting: 0, queuedTokens: 0, prefillTokensPerS: 0 })).toBe(0);
    const [routed] = routedBackends([{ url: "a", up: true, running: 1, waiting: 0, queuedTokens: 6400, prefillTokensPerS: 640 }], "s");
    expect(routed).toMatchObject({ url: "a", load: 1, queueS: 10 });
  });

  it("places a new trajectory away from a prefix holder with a long prefill queue (its heartbeat's queued tokens), and a sessionless turn away from the shortest load with one", () => {
    // The holder runs one sequence but 16,000 prompt tokens wait there at 800 tokens/s: 20 s.
    const holder = { url: "a", up: true, running: 1, waiting: 0, pending: 0, queuedTokens: 16_000, prefillTokensPerS: 800 };
    const other = { url: "b", up: true, running: 1, waiting: 0, pending: 0, queuedTokens: 400, prefillTokensPerS: 800 };
    expect(placeOver({ trajectoryId: "t", prefixBlocks: { a: 10 } }, [holder, other])).toEqual({ url: "b", reason: "queue-avoided" });
    // The same holder with its queue drained takes it.
    expect(placeOver({ trajectoryId: "t", prefixBlocks: { a: 10 } }, [{ ...holder, queuedTokens: 800 }, other])).toEqual({ url: "a", reason: "prefix" });
    const view = [
      { url: "a", up: true, running: 0, waiting: 0, queuedTokens: 16_000, prefillTokensPerS: 800 },
      { url: "b", up: true, running: 1, waiting: 0 },
    ];
    for (let i = 0; i < 20; i++) expect(statelessTarget(routedBackends(view, "s")).url).toBe("b");
  });

  it("moves a pinned trajectory off a backend whose prefill queue is far past the others', and keeps it within the pin margin", () => {
    const pinned = (queueS: number): RoutedBackend => ({ ...b("a", 2), queueS });
    expect(staysPinned("a", "t", [pinned(8), b("b", 0)])).toBe(true);
    expect(staysPinned("a", "t", [pinned(9), b("b", 0)])).toBe(false);
    const pinnedCandidate = { url: "a", up: true, running: 2, waiting: 0, pending: 0, queuedTokens: 9000, prefillTokensPerS: 600 };
    const other = { url: "b", up: true, running: 0, waiting: 0, pending: 0 };
    expect(placeOver({ trajectoryId: "t", pinned: "a", prefixBlocks: {} }, [pinnedCandidate, other])).toEqual({ url: "b", reason: "pinned-queued" });
  });
});
