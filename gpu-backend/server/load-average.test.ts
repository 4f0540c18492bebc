import { describe, expect, it } from "vitest";
import { LoadAverage } from "./load-average";

describe("LoadAverage", () => {
  it("weighs samples by how long they held, not by how often they came", () => {
    let t = 0;
    const avg = new LoadAverage(1000, () => t);
    avg.sample(0);
    t = 1000;
    avg.sample(10); // 0 held for 1 s
    expect(avg.value).toBeCloseTo(0, 10);
    t = 2000; // 10 held for 1 s (one time constant): 1 - e^-1 of the way
    expect(avg.value).toBeCloseTo(10 * (1 - Math.exp(-1)), 10);
    // Many samples of the same value in a short time move it no more than one would.
    const dense = new LoadAverage(1000, () => t);
    t = 0;
    dense.sample(0);
    for (let i = 1; i <= 100; i++) {
      t = i * 10;
      dense.sample(10);
    }
    expect(dense.value).toBeCloseTo(10 * (1 - Math.exp(-0.99)), 6);
  });

  it("damps a short burst: 8 for 0.5 s on top of 2 stays near 2", () => {
    let t = 0;
    const avg = new LoadAverage(4000, () => t);
    avg.sample(2);
    t = 10_000;
    avg.sample(8);
    t = 10_500;
    avg.sample(2);
    expect(avg.value).toBeLessThan(3);
    expect(avg.value).toBeGreaterThan(2);
  });
});
