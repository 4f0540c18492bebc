import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CpuExecutor } from "../gpu-backend/model/executors/cpu-executor";
import type { LoadedModel } from "../gpu-backend/engine/load-model";
import { DEFAULT_VARIANTS, poolFor, runLeaseVariants, withModel } from "./lease-bench";
import { EventQueue, makeLeaseWorkload, PAUSE_BOUNDS_MS } from "./lease-workload";

describe("lease workload", () => {
  it("is seeded: the same seed gives the same trajectories, another seed others", () => {
    const p = { trajectories: 8, turns: 4, seed: 5, systemWords: 20, observationWords: [10, 20] as [number, number] };
    expect(makeLeaseWorkload(p)).toEqual(makeLeaseWorkload(p));
    expect(makeLeaseWorkload({ ...p, seed: 6 })).not.toEqual(makeLeaseWorkload(p));
  });

  it("draws pauses around each trajectory's own scale, heavy-tailed across trajectories", () => {
    const w = makeLeaseWorkload({ trajectories: 400, turns: 9, seed: 3, systemWords: 1, observationWords: [1, 1] });
    const medians = w.map((t) => t.toolMedianMs).sort((a, b) => a - b);
    expect(medians[40]!).toBeLessThan(1000); // p10 under a second
    expect(medians[360]!).toBeGreaterThan(10_000); // p90 over ten seconds
    for (const t of w) {
      expect(t.pausesMs).toHaveLength(8);
      for (const p of t.pausesMs) expect(p).toBeGreaterThanOrEqual(PAUSE_BOUNDS_MS[0]);
      // Within a trajectory: sigma 0.5, so 5 sigma is x12 either way (barring the clamp).
      const worst = Math.max(...t.pausesMs.map((p) => Math.abs(Math.log(p / t.toolMedianMs))));
      if (t.toolMedianMs > 2 * PAUSE_BOUNDS_MS[0] && t.toolMedianMs < PAUSE_BOUNDS_MS[1] / 20) expect(worst).toBeLessThan(2.5);
    }
    const starts = w.map((t) => t.startMs);
    expect([...starts].sort((a, b) => a - b)).toEqual(starts);
  });

  it("runs events in time order, ties in insertion order", () => {
    const q = new EventQueue<string>();
    for (const [at, e] of [[5, "e"], [1, "a"], [3, "c1"], [3, "c2"], [2, "b"], [3, "c3"]] as const) q.push(at, e);
    const out: string[] = [];
    for (let x = q.pop(); x; x = q.pop()) out.push(x.event);
    expect(out).toEqual(["a", "b", "c1", "c2", "c3", "e"]);
  });
});

describe("lease bench: simulated time, real engine", () => {
  let model: LoadedModel;
  let release: () => void;
  let loaded: Promise<void>;
  beforeAll(async () => {
    loaded = new Promise((ready) => {
      void withModel("tiny", (m) => {
        model = m;
        ready();
        return new Promise<void>((r) => (release = r));
      });
    });
    await loaded;
  });
  afterAll(() => release?.());

  it("gives the same figures for the same seed on every run", async () => {
    const workload = makeLeaseWorkload({ trajectories: 6, turns: 3, seed: 7, systemWords: 60, observationWords: [20, 40], arrivalGapMs: 500, toolMedianMs: 1500 });
    const blockSize = 16;
    const { numBlocks } = poolFor(workload, model, blockSize);
    const once = async () => {
      const executor = await CpuExecutor.create({ spec: model.spec, weights: model.weights, numBlocks, blockSize, threads: 1 });
      try {
        const runs = await runLeaseVariants({ model, executor, workload, numBlocks, blockSize, variants: DEFAULT_VARIANTS });
        return Object.fromEntries(Object.entries(runs).map(([k, r]) => [k, r.result]));
      } finally {
        await executor.dispose();
      }
    };
    const a = await once();
    const b = await once();
    expect(b).toEqual(a);
    const lru = a.lru!;
    expect(lru.promptTokens).toBeGreaterThan(0);
    expect(lru.reprefilledTokens).toBeGreaterThanOrEqual(0);
    // Virtual time: at least the longest trajectory's pauses, whatever the machine's speed.
    const longest = Math.max(...workload.map((t) => t.startMs + t.pausesMs.reduce((x, y) => x + y, 0)));
    expect(lru.jctMs).toBeGreaterThanOrEqual(longest - workload[0]!.startMs);
    expect(a.leases!.leases!.created).toBeGreaterThan(0);
  });
});
