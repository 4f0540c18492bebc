import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { SECRET_HEADER } from "../../protocol/messages";
import { DEFAULT_DOWN_AFTER_MS, PREFIX_TTL_MS, type BackendHeartbeat, type PoolDO } from "../../durable-objects/pool-do";
import { call } from "./helpers";

const beat = (id: string, over: Partial<BackendHeartbeat> = {}): BackendHeartbeat => ({
  id,
  url: `http://10.0.0.${id.length}:8080`,
  model: "demo-llama-random",
  kvCapacityBlocks: 4096,
  running: 1,
  waiting: 2,
  kvUsage: 0.25,
  tokensPerS: 100,
  ...over,
});

/** A pool object of its own, so these tests never touch the pool the other tests route with. */
function privatePool() {
  return env.POOL.get(env.POOL.idFromName(`pool-test-${crypto.randomUUID()}`));
}

describe("PoolDO", () => {
  it("registers backends on their first heartbeat and lists them with their load, next to the static ones", async () => {
    const pool = privatePool();
    expect(await pool.heartbeat(beat("gpu-a"))).toEqual({ registered: true });
    expect(await pool.heartbeat(beat("gpu-a", { running: 5 }))).toEqual({ registered: false });
    await pool.heartbeat(beat("gpu-b", { url: "http://10.0.0.9:8080" }));
    const view = await pool.view();
    const registered = view.filter((b) => b.source === "registered");
    expect(registered.map((b) => [b.id, b.up, b.running, b.waiting])).toEqual([
      ["gpu-a", true, 5, 2],
      ["gpu-b", true, 1, 2],
    ]);
    // The static BACKEND_URLS entries are there too, always up.
    const statics = view.filter((b) => b.source === "static");
    expect(statics.length).toBeGreaterThan(0);
    expect(statics.every((b) => b.up)).toBe(true);
  });

  it("marks a backend down when its heartbeats stop, and up again when they resume", async () => {
    const pool = privatePool();
    await pool.heartbeat(beat("gpu-c"));
    // Pretend the last heartbeat was long ago.
    await runInDurableObject(pool, (_instance: PoolDO, state) => {
      state.storage.sql.exec(`UPDATE backends SET last_seen_ms = ?`, Date.now() - DEFAULT_DOWN_AFTER_MS - 1000);
    });
    expect((await pool.view()).find((b) => b.id === "gpu-c")!.up).toBe(false);
    await pool.heartbeat(beat("gpu-c"));
    expect((await pool.view()).find((b) => b.id === "gpu-c")!.up).toBe(true);
    expect(await pool.remove("gpu-c")).toBe(true);
    expect((await pool.view()).find((b) => b.id === "gpu-c")).toBeUndefined();
  });

  it("keeps an approximate, expiring index of which backends served a prefix", async () => {
    const pool = privatePool();
    await pool.notePrefix("k1", "http://a");
    await pool.notePrefix("k1", "http://b");
    await pool.notePrefix("k2", "http://a");
    expect(await pool.prefixHolders("k1")).toEqual(expect.arrayContaining(["http://a", "http://b"]));
    expect(await pool.prefixHolders("k3")).toEqual([]);
    await runInDurableObject(pool, (_instance: PoolDO, state) => {
      state.storage.sql.exec(`UPDATE prefixes SET last_ms = ? WHERE url = 'http://b'`, Date.now() - PREFIX_TTL_MS - 1000);
    });
    expect(await pool.prefixHolders("k1")).toEqual(["http://a"]);
  });

  it("takes heartbeats only with the backend secret, and validates them", async () => {
    const noSecret = await call("/v1/pool/heartbeat", { tenant: null, body: beat("x") });
    expect(noSecret.status).toBe(401);
    const tenantKey = await call("/v1/pool", { tenant: "a" });
    expect(tenantKey.status).toBe(401);
    const bad = await call("/v1/pool/heartbeat", {
      tenant: null,
      body: { ...beat("x"), running: -1 },
      headers: { [SECRET_HEADER]: env.AGENT_EDGE_SECRET! },
    });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string; message: string } }).error).toMatchObject({ code: "invalid_request", message: expect.stringMatching(/running/) });
    const list = await call("/v1/pool", { tenant: null, headers: { [SECRET_HEADER]: env.AGENT_EDGE_SECRET! } });
    expect(list.status).toBe(200);
    expect(((await list.json()) as { backends: unknown[] }).backends.length).toBeGreaterThan(0);
  });
});
