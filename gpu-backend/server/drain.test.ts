import { describe, expect, it } from "vitest";
import { Drain } from "./drain";

describe("Drain", () => {
  it("finishes only after a drain began and the backend stayed idle for the grace period", async () => {
    const drain = new Drain();
    let busy = true;
    let done: string | undefined;
    const finished = drain.finished({ graceMs: 60, timeoutMs: 10_000, busy: () => busy, pollMs: 5 }).then((how) => (done = how));
    await new Promise((r) => setTimeout(r, 50));
    expect(done).toBeUndefined(); // not draining yet
    expect(drain.start()).toBe(true);
    expect(drain.start()).toBe(false);
    expect(drain.draining).toBe(true);
    await new Promise((r) => setTimeout(r, 100));
    expect(done).toBeUndefined(); // a turn still runs
    busy = false;
    const t0 = Date.now();
    drain.noteActivity();
    await finished;
    expect(done).toBe("idle");
    expect(Date.now() - t0).toBeGreaterThanOrEqual(55);
  });

  it("gives up waiting at the timeout", async () => {
    const drain = new Drain();
    drain.start();
    expect(await drain.finished({ graceMs: 10_000, timeoutMs: 80, busy: () => true, pollMs: 5 })).toBe("timeout");
  });
});
