import { describe, expect, it } from "vitest";
import { ViewCache } from "./view-cache";

describe("ViewCache", () => {
  it("loads once per ttl whoever asks, and keeps no failure", async () => {
    let t = 0;
    let loads = 0;
    let fail = false;
    const cache = new ViewCache(
      async () => {
        loads++;
        if (fail) throw new Error("pool down");
        return [loads];
      },
      () => t,
    );
    const a = await cache.get(1000);
    expect(a).toEqual([1]);
    expect(await cache.get(1000)).toBe(a);
    t = 1000;
    expect(await cache.get(1000)).toEqual([1]);
    expect(loads).toBe(1);
    t = 1001;
    expect(await cache.get(1000)).toEqual([2]);
    t = 2500;
    fail = true;
    await expect(cache.get(1000)).rejects.toThrow("pool down");
    fail = false;
    expect(await cache.get(1000)).toEqual([4]); // the failed load was not kept
    expect(loads).toBe(4);
  });
});
