import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { SECRET_HEADER } from "../../protocol/messages";
import { DEFAULT_MAX_INDEX_ENTRIES, evictionBatch } from "../../durable-objects/routing/block-index";
import { DEFAULT_TUNABLES } from "../../durable-objects/routing/routing-policy";
import { PLACED_PREFIX_MS, type PoolDO } from "../../durable-objects/pool/pool-do";
import { PREFIX_LIST_BLOCKS, PREFIX_TTL_MS, type BackendHeartbeat } from "../../durable-objects/pool/pool-store";
import type { Heartbeat, KvEventBatch } from "../../protocol/messages";
import { edgeSettings } from "../../durable-objects/settings";
import { call } from "./helpers";

/** The default POOL_DOWN_AFTER_MS (the tests do not set it). */
const DEFAULT_DOWN_AFTER_MS = edgeSettings({}).poolDownAfterMs;

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

  it("answers a draining backend's heartbeat with its peers: the backends up and taking placements", async () => {
    const pool = privatePool();
    const [P, Q, R] = ["http://10.0.4.1:8080", "http://10.0.4.2:8080", "http://10.0.4.3:8080"];
    expect((await pool.heartbeat(beat("dp", { url: P }))).peers).toBeUndefined();
    await pool.heartbeat(beat("dq", { url: Q }));
    await pool.heartbeat(beat("dr", { url: R, draining: true }));
    const reply = await pool.heartbeat(beat("dp", { url: P, draining: true }));
    // Q, and the static backend of this test environment; not P itself, not R (draining too).
    expect(reply.peers).toContain(Q);
    expect(reply.peers).not.toContain(P);
    expect(reply.peers).not.toContain(R);
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

/** Short block hash number i (16 hex). */
const hx = (i: number) => i.toString(16).padStart(16, "0");
const hashes = (from: number, n: number) => Array.from({ length: n }, (_, i) => hx(from + i));
const snapshot = (seq: number, stored: string[]): KvEventBatch => ({ seq, kind: "snapshot", stored, removed: [] });
const delta = (seq: number, stored: string[], removed: string[] = []): KvEventBatch => ({ seq, kind: "delta", stored, removed });
const withEvents = (id: string, kvEvents: KvEventBatch, over: Partial<BackendHeartbeat> = {}): Heartbeat => ({ ...beat(id, over), kvEvents });

describe("PoolDO block index (KV events)", () => {
  const A = "http://10.0.1.1:8080";
  const B = "http://10.0.1.2:8080";

  it("credits blocks a backend holds in its host tier at half a block when placing, and never as a pull source's", async () => {
    const pool = privatePool();
    // a: 2 blocks in its pool, 4 more in its host tier; b: 4 in its pool.
    await pool.heartbeat({ ...withEvents("gpu-a", snapshot(1, hashes(0, 2)), { url: A }), kvEvents: { seq: 1, kind: "snapshot", stored: hashes(0, 2), removed: [], offloaded: hashes(2, 4) } });
    await pool.heartbeat(withEvents("gpu-b", snapshot(1, hashes(0, 4)), { url: B }));
    expect(await pool.prefixBlocks(hashes(0, 6))).toEqual({ [A]: 4, [B]: 4 });
    expect((await pool.indexStats()).tierEntries).toBe(4);
    // A later delta: a evicts block 1 into its tier too.
    expect((await pool.heartbeat({ ...beat("gpu-a", { url: A }), kvEvents: { seq: 2, kind: "delta", stored: [], removed: [], offloaded: [hx(1)] } })).kv).toBe("ok");
    expect(await pool.prefixBlocks(hashes(0, 6))).toEqual({ [A]: 3.5, [B]: 4 });
  });

  it("marks a backend down and forgets its blocks at its leaving beat (its last, as it exits)", async () => {
    const pool = privatePool();
    await pool.heartbeat(withEvents("gpu-a", snapshot(1, hashes(0, 3)), { url: A }));
    await pool.heartbeat(withEvents("gpu-b", snapshot(1, [hx(0)]), { url: B }));
    expect(await pool.prefixBlocks(hashes(0, 3))).toEqual({ [A]: 3, [B]: 1 });
    expect(await pool.heartbeat(beat("gpu-a", { url: A, draining: true, leaving: true }))).toEqual({ registered: false });
    expect((await pool.view()).find((b) => b.id === "gpu-a")).toMatchObject({ up: false, leaving: true });
    expect(await pool.prefixBlocks(hashes(0, 3))).toEqual({ [B]: 1 });
    // Restarted at the same url: up again, with a fresh snapshot.
    await pool.heartbeat(withEvents("gpu-a", snapshot(1, hashes(0, 2)), { url: A }));
    expect((await pool.view()).find((b) => b.id === "gpu-a")!.up).toBe(true);
    expect(await pool.prefixBlocks(hashes(0, 3))).toEqual({ [A]: 2, [B]: 1 });
  });

  it("indexes the blocks each backend reports and counts, per backend, the LEADING hashes it holds", async () => {
    const pool = privatePool();
    expect(await pool.heartbeat(withEvents("gpu-a", snapshot(1, hashes(0, 3)), { url: A }))).toEqual({ registered: true, kv: "ok" });
    expect(await pool.heartbeat(withEvents("gpu-b", snapshot(1, [hx(0)]), { url: B }))).toEqual({ registered: true, kv: "ok" });
    expect(await pool.prefixBlocks(hashes(0, 4))).toEqual({ [A]: 3, [B]: 1 });
    // b now holds block 2 but not block 1: counting stops at its first miss.
    expect((await pool.heartbeat(withEvents("gpu-b", delta(2, [hx(2)]), { url: B }))).kv).toBe("ok");
    expect(await pool.prefixBlocks(hashes(0, 4))).toEqual({ [A]: 3, [B]: 1 });
    // a evicts block 1 (removed) and caches block 3: it now holds only the first block of the list.
    expect((await pool.heartbeat(withEvents("gpu-a", delta(2, [hx(3)], [hx(1)]), { url: A }))).kv).toBe("ok");
    expect(await pool.prefixBlocks(hashes(0, 4))).toEqual({ [A]: 1, [B]: 1 });
    // Both evict block 0: neither holds a leading block any more.
    await pool.heartbeat(withEvents("gpu-a", delta(3, [], [hx(0)]), { url: A }));
    await pool.heartbeat(withEvents("gpu-b", delta(3, [], [hx(0)]), { url: B }));
    expect(await pool.prefixBlocks(hashes(0, 4))).toEqual({});
    expect((await pool.indexStats()).entries).toBe(2); // hx(2) on a and b, hx(3) on a
    // A heartbeat without events changes nothing and gets no kv answer.
    expect(await pool.heartbeat(beat("gpu-a", { url: A }))).toEqual({ registered: false });
  });

  it("answers resync to a delta that does not follow the last batch applied, and after the pool restarts", async () => {
    const pool = privatePool();
    // New to this pool: a delta cannot be applied (the pool never saw the snapshot before it).
    expect((await pool.heartbeat(withEvents("gpu-a", delta(5, [hx(1)]), { url: A }))).kv).toBe("resync");
    expect(await pool.prefixBlocks([hx(1)])).toEqual({});
    expect((await pool.heartbeat(withEvents("gpu-a", snapshot(6, [hx(1), hx(2)]), { url: A }))).kv).toBe("ok");
    expect(await pool.prefixBlocks([hx(1), hx(2)])).toEqual({ [A]: 2 });
    // A batch went missing (seq 7): refused, and what a held is forgotten until its snapshot.
    expect((await pool.heartbeat(withEvents("gpu-a", delta(8, []), { url: A }))).kv).toBe("resync");
    expect(await pool.prefixBlocks([hx(1)])).toEqual({});
    expect((await pool.heartbeat(withEvents("gpu-a", snapshot(9, [hx(1)]), { url: A }))).kv).toBe("ok");
    expect((await pool.heartbeat(withEvents("gpu-a", delta(10, [hx(2)]), { url: A }))).kv).toBe("ok");
    expect(await pool.prefixBlocks([hx(1), hx(2)])).toEqual({ [A]: 2 });
    // The object restarts: the in-memory index is gone, the registry (SQLite) is not.
    await evictDurableObject(pool);
    expect(await pool.prefixBlocks([hx(1), hx(2)])).toEqual({});
    expect(await pool.heartbeat(withEvents("gpu-a", delta(11, [hx(3)]), { url: A }))).toEqual({ registered: false, kv: "resync" });
    expect((await pool.heartbeat(withEvents("gpu-a", snapshot(12, [hx(1), hx(2)]), { url: A }))).kv).toBe("ok");
    expect(await pool.prefixBlocks([hx(1), hx(2)])).toEqual({ [A]: 2 });
  });

  it("stops counting a backend marked down (and drops its blocks), or removed", async () => {
    const pool = privatePool();
    await pool.heartbeat(withEvents("gpu-a", snapshot(1, hashes(0, 4)), { url: A }));
    await pool.heartbeat(withEvents("gpu-b", snapshot(1, hashes(0, 2)), { url: B }));
    expect(await pool.prefixBlocks(hashes(0, 4))).toEqual({ [A]: 4, [B]: 2 });
    await runInDurableObject(pool, (_instance: PoolDO, state) => {
      state.storage.sql.exec(`UPDATE backends SET last_seen_ms = ? WHERE id = 'gpu-a'`, Date.now() - DEFAULT_DOWN_AFTER_MS - 1000);
    });
    expect(await pool.prefixBlocks(hashes(0, 4))).toEqual({ [B]: 2 });
    expect((await pool.indexStats()).backends).toEqual([{ url: B, indexed: true }]);
    // Back up: its next delta is refused until it sends a snapshot (it may have missed events).
    expect((await pool.heartbeat(withEvents("gpu-a", delta(2, []), { url: A }))).kv).toBe("resync");
    expect(await pool.prefixBlocks(hashes(0, 4))).toEqual({ [B]: 2 });
    expect((await pool.heartbeat(withEvents("gpu-a", snapshot(3, hashes(0, 3)), { url: A }))).kv).toBe("ok");
    expect(await pool.prefixBlocks(hashes(0, 4))).toEqual({ [A]: 3, [B]: 2 });
    expect(await pool.remove("gpu-b")).toBe(true);
    expect(await pool.prefixBlocks(hashes(0, 4))).toEqual({ [A]: 3 });
    expect((await pool.indexStats()).entries).toBe(3);
  });

  it("places a new trajectory by the blocks its prefix key's trajectories share; a holder whose blocks were evicted counts 0", async () => {
    const pool = privatePool();
    const S = "http://static-backend:8080"; // never heartbeats: not indexed
    await pool.heartbeat(withEvents("gpu-a", snapshot(1, []), { url: A }));
    await pool.heartbeat(withEvents("gpu-b", snapshot(1, []), { url: B }));
    // Trajectory 1 (system prompt = blocks 0..9, then its own blocks 100..104) served by a.
    const t1 = [...hashes(0, 10), ...hashes(100, 5)];
    await pool.notePrefix("key-1", A, t1);
    // The note marks a's blocks at once, before any heartbeat reports them.
    expect(await pool.prefixBlocks([], "key-1")).toEqual({ [A]: 15 });
    // Trajectory 2, same key, served by b: the key keeps the common prefix (the system prompt).
    await pool.notePrefix("key-1", B, [...hashes(0, 10), ...hashes(200, 5)]);
    expect(await pool.prefixBlocks([], "key-1")).toEqual({ [A]: 10, [B]: 10 });
    await runInDurableObject(pool, (_instance: PoolDO, state) => {
      const row = state.storage.sql.exec<{ hashes: string }>(`SELECT hashes FROM prefix_lists WHERE key = 'key-1'`).one();
      expect(row.hashes).toBe(hashes(0, 10).join(""));
    });
    // a evicts the system prompt's first block: a stale holder of the key, it stops attracting.
    await pool.heartbeat(withEvents("gpu-a", delta(2, [], [hx(0)]), { url: A }));
    expect(await pool.prefixHolders("key-1")).toEqual(expect.arrayContaining([A, B]));
    expect(await pool.prefixBlocks([], "key-1")).toEqual({ [B]: 10 });
    // A moving trajectory asks with its own hashes (the key's list is not used then).
    expect(await pool.prefixBlocks([...hashes(0, 10), ...hashes(200, 5)], "key-1")).toEqual({ [B]: 15 });
    // A backend that is not indexed (static) and served the key counts 1: all the pool knows.
    await pool.notePrefix("key-1", S, hashes(0, 12));
    expect(await pool.prefixBlocks([], "key-1")).toEqual({ [B]: 10, [S]: 1 });
    // A key noted without hashes (no list known): every holder counts 1, as the text index says.
    await pool.notePrefix("key-2", A);
    expect(await pool.prefixBlocks([], "key-2")).toEqual({ [A]: 1 });
    expect(await pool.prefixBlocks([], "key-unknown")).toEqual({});
    // The key's list keeps at most PREFIX_LIST_BLOCKS hashes.
    await pool.notePrefix("key-3", B, hashes(0, PREFIX_LIST_BLOCKS + 50));
    expect(await pool.prefixBlocks([], "key-3")).toEqual({ [B]: PREFIX_LIST_BLOCKS });
  });

  it("names the indexed holder of a longer prefix as the pull source when it places a trajectory elsewhere", async () => {
    const pool = privatePool();
    const [H, T] = ["http://10.0.3.1:8080", "http://10.0.3.2:8080"];
    // H holds the key's blocks (indexed) but runs far more than T: placing goes to T, pulling from H.
    await pool.heartbeat(withEvents("src-h", snapshot(1, hashes(300, 8)), { url: H, running: 12, waiting: 0 }));
    await pool.heartbeat(withEvents("src-t", snapshot(1, []), { url: T, running: 0, waiting: 0 }));
    await pool.notePrefix("hot-key", H, hashes(300, 8));
    // (T or the static backend of this test environment, both idle.)
    const placed = await pool.place({ hashes: [], key: "hot-key", trajectoryId: "copy-1", pinned: undefined });
    expect(placed!.url).not.toBe(H);
    expect(placed!.kvSource).toBe(H);
    // A moving trajectory: its own hashes rank the holders.
    const moved = await pool.place({ hashes: hashes(300, 8), trajectoryId: "copy-2", pinned: H });
    expect(moved!.url).not.toBe(H);
    expect(moved!.kvSource).toBe(H);
    // Once T reports the blocks too, there is nothing to pull.
    await pool.heartbeat(withEvents("src-t", snapshot(2, hashes(300, 8)), { url: T, running: 0, waiting: 0 }));
    const again = await pool.place({ hashes: hashes(300, 8), trajectoryId: "copy-3", pinned: H });
    expect(again!.url).toBe(T);
    expect(again!.kvSource).toBeUndefined();
  });

  it("keeps at most DEFAULT_MAX_INDEX_ENTRIES hashes, forgetting the oldest first", async () => {
    const pool = privatePool();
    const chunk = 50_000;
    const total = DEFAULT_MAX_INDEX_ENTRIES + 2 * chunk - (DEFAULT_MAX_INDEX_ENTRIES % chunk);
    await pool.heartbeat(withEvents("gpu-a", snapshot(1, []), { url: A }));
    for (let from = 0, seq = 2; from < total; from += chunk, seq++) {
      expect((await pool.heartbeat(withEvents("gpu-a", delta(seq, hashes(from, Math.min(chunk, total - from))), { url: A }))).kv).toBe("ok");
    }
    const stats = await pool.indexStats();
    const kept = DEFAULT_MAX_INDEX_ENTRIES - evictionBatch(DEFAULT_MAX_INDEX_ENTRIES);
    expect(stats.maxEntries).toBe(DEFAULT_MAX_INDEX_ENTRIES);
    expect(stats.entries).toBeLessThanOrEqual(DEFAULT_MAX_INDEX_ENTRIES);
    expect(stats.entries).toBeGreaterThan(kept);
    expect(await pool.prefixBlocks([hx(0)])).toEqual({});
    expect(await pool.prefixBlocks([hx(total - DEFAULT_MAX_INDEX_ENTRIES - 1)])).toEqual({});
    expect(await pool.prefixBlocks([hx(total - kept)])).toEqual({ [A]: 1 });
    expect(await pool.prefixBlocks([hx(total - 1)])).toEqual({ [A]: 1 });
  });

  it("rejects a malformed KV event batch on the heartbeat route with invalid_request", async () => {
    const headers = { [SECRET_HEADER]: env.AGENT_EDGE_SECRET! };
    const bad = await call("/v1/pool/heartbeat", { tenant: null, headers, body: withEvents("x", delta(1, ["0123456789ABCDEF"])) });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string; message: string } }).error).toMatchObject({ code: "invalid_request", message: expect.stringMatching(/^kvEvents\.stored\[0\] must be a 16-character lowercase hex string/) });
    const removedInSnapshot = await call("/v1/pool/heartbeat", { tenant: null, headers, body: withEvents("x", { ...snapshot(1, []), removed: [hx(1)] }) });
    expect(removedInSnapshot.status).toBe(400);
    expect(((await removedInSnapshot.json()) as { error: { message: string } }).error.message).toMatch(/^kvEvents\.removed must be empty in a snapshot/);
    const badOffloaded = await call("/v1/pool/heartbeat", { tenant: null, headers, body: withEvents("x", { ...delta(1, []), offloaded: ["nothex"] }) });
    expect(badOffloaded.status).toBe(400);
    expect(((await badOffloaded.json()) as { error: { message: string } }).error.message).toMatch(/^kvEvents\.offloaded\[0\] must be a 16-character lowercase hex string/);
  });
});

/** The pool object's open placements (trajectory id -> backend url, prefix key, time placed). */
function openPlacements(instance: PoolDO): Map<string, { url: string; key: string | undefined; at: number }> {
  return (instance as unknown as { placements: Map<string, { url: string; key: string | undefined; at: number }> }).placements;
}

describe("PoolDO placement", () => {
  it("places a burst of new trajectories with a popular prefix on its holder only until the holder is overloaded (placements count as load before heartbeats show them)", async () => {
    const pool = privatePool();
    const A = "http://10.0.0.1:8080";
    for (const [id, url] of [["ga", A], ["gb", "http://10.0.0.2:8080"], ["gc", "http://10.0.0.3:8080"]] as const) {
      await pool.heartbeat(beat(id, { url, running: 0, waiting: 0 }));
    }
    await pool.notePrefix("popular", A);
    const picks: string[] = [];
    for (let i = 0; i < 24; i++) {
      const p = await pool.place({ hashes: [], key: "popular", trajectoryId: `burst-${i}`, pinned: undefined });
      expect(p).not.toBeNull();
      picks.push(p!.url);
    }
    const count = (url: string) => picks.filter((u) => u === url).length;
    // The holder first (its cache is warm), then, once it runs absMargin more than the least
    // loaded, the others: no heartbeat came in between, so only the pool's own count can see it.
    const first = DEFAULT_TUNABLES.absMargin + 1;
    expect(picks.slice(0, first)).toEqual(Array(first).fill(A));
    expect(count(A)).toBeLessThan(24);
    expect(count("http://10.0.0.2:8080")).toBeGreaterThan(0);
    expect(count("http://10.0.0.3:8080")).toBeGreaterThan(0);
    // A heartbeat reporting the load resets what the pool counts for that backend.
    await pool.heartbeat(beat("ga", { url: A, running: 0, waiting: 0 }));
    await runInDurableObject(pool, (instance: PoolDO) => {
      // Placements long before the heartbeat no longer count.
      for (const p of openPlacements(instance).values()) if (p.url === A) p.at = Date.now() - 60_000;
    });
    expect((await pool.place({ hashes: [], key: "popular", trajectoryId: "after", pinned: undefined }))!.url).toBe(A);
  });

  it("places away from a backend whose heartbeat reports a long prefill queue, and moves a pinned trajectory off it", async () => {
    const pool = privatePool();
    const [Q, R] = ["http://10.0.3.1:8080", "http://10.0.3.2:8080"];
    // Q holds the prefix and runs one sequence, a long prompt: 24,000 tokens left to prefill at 800/s, 30 s.
    await pool.heartbeat(beat("qa", { url: Q, running: 1, waiting: 0, queuedTokens: 24_000, prefillTokensPerS: 800 }));
    await pool.heartbeat(beat("qb", { url: R, running: 2, waiting: 0, queuedTokens: 0, prefillTokensPerS: 800 }));
    await pool.notePrefix("queued-key", Q);
    // (The static BACKEND_URLS backend, idle, is in the pool too.)
    const placed = await pool.place({ hashes: [], key: "queued-key", trajectoryId: "q-new" });
    expect(placed!.url).not.toBe(Q);
    const moved = await pool.place({ hashes: [], trajectoryId: "q-pinned", pinned: Q });
    expect(moved!.url).not.toBe(Q);
    expect(moved!.reason).toBe("pinned-queued");
    // Its queue drained (the next heartbeat): the holder takes new trajectories again.
    await pool.heartbeat(beat("qa", { url: Q, running: 1, waiting: 0, queuedTokens: 0, prefillTokensPerS: 800 }));
    expect(await pool.place({ hashes: [], key: "queued-key", trajectoryId: "q-after" })).toMatchObject({ url: Q, reason: "prefix" });
  });

  it("stops counting a placement as load once its trajectory's turn is noted done there", async () => {
    const pool = privatePool();
    const X = "http://10.0.2.1:8080";
    await pool.heartbeat(beat("px", { url: X, running: 0, waiting: 0 }));
    await pool.heartbeat(beat("py", { url: "http://10.0.2.2:8080", running: 0, waiting: 0 }));
    await pool.notePrefix("seq-key", X, [hx(700), hx(701)]);
    // New trajectories one after another, each done before the next: all stay on the holder,
    // however many, because each finished placement stops counting before the next heartbeat.
    for (let i = 0; i < DEFAULT_TUNABLES.absMargin + 3; i++) {
      const p = await pool.place({ hashes: [], key: "seq-key", trajectoryId: `seq-${i}`, pinned: undefined });
      expect(p!.url).toBe(X);
      await pool.notePrefix("seq-key", X, [hx(700), hx(701)], `seq-${i}`);
    }
    // Without the notes (turns still running) the same burst spreads once X is overloaded.
    const picks: string[] = [];
    for (let i = 0; i < DEFAULT_TUNABLES.absMargin + 3; i++) picks.push((await pool.place({ hashes: [], key: "seq-key", trajectoryId: `burst-${i}`, pinned: undefined }))!.url);
    // (Y, or the static backend of this test environment: whichever is less loaded.)
    expect(picks.some((u) => u !== X)).toBe(true);
  });

  it("places a subagent on its parent's backend; past the margin, where the parent's blocks are, pulling the rest from the parent's backend", async () => {
    const pool = privatePool();
    const [P, Q] = ["http://10.0.4.1:8080", "http://10.0.4.2:8080"];
    // P ran the parent (all its prompt blocks); Q holds the leading 4 (the shared system prompt).
    const parentHashes = hashes(400, 12);
    await pool.heartbeat(withEvents("sub-p", snapshot(1, parentHashes), { url: P, running: 1, waiting: 0 }));
    await pool.heartbeat(withEvents("sub-q", snapshot(1, parentHashes.slice(0, 4)), { url: Q, running: 1, waiting: 0 }));
    const child = { hashes: [] as string[], key: "subagent-key", pinned: undefined, parent: { url: P, hashes: parentHashes } };
    const first = await pool.place({ ...child, trajectoryId: "child-1" });
    expect(first).toMatchObject({ url: P, reason: "parent", prefixBlocks: { [P]: 12, [Q]: 4 } });
    expect(first!.kvSource).toBeUndefined();
    // The parent's backend now runs more than absMargin over the least loaded (the idle static backend).
    await pool.heartbeat(beat("sub-p", { url: P, running: 12, waiting: 0 }));
    const second = await pool.place({ ...child, trajectoryId: "child-2" });
    expect(second).toMatchObject({ url: Q, reason: "prefix", kvSource: P });
    // The same child without its parent link: its key names no holder, nothing to rank or pull.
    const alone = await pool.place({ hashes: [], key: "subagent-key-alone", trajectoryId: "child-3", pinned: undefined });
    expect(alone!.reason).toBe("least-loaded");
    expect(alone!.kvSource).toBeUndefined();
  });

  it("keeps a burst of new trajectories with a prefix no one holds yet together: the first placement marks its backend for the key", async () => {
    const pool = privatePool();
    const urls = ["http://10.0.1.1:8080", "http://10.0.1.2:8080", "http://10.0.1.3:8080", "http://10.0.1.4:8080"];
    for (const [i, url] of urls.entries()) await pool.heartbeat(beat(`gp${i}`, { url, running: 0, waiting: 0 }));
    const picks: { url: string; reason: string }[] = [];
    for (let i = 0; i < 8; i++) picks.push((await pool.place({ hashes: [], key: "fresh-key", trajectoryId: `fresh-${i}`, pinned: undefined }))!);
    // The first goes to the least loaded (all idle); the next ones follow it while its first
    // prefill of the shared prompt may still run, until it runs absMargin more than the rest.
    const n = DEFAULT_TUNABLES.absMargin + 1;
    expect(picks[0]!.reason).toBe("least-loaded");
    expect(picks.slice(1, n).map((p) => p.url)).toEqual(Array(n - 1).fill(picks[0]!.url));
    expect(picks.slice(1, n).every((p) => p.reason === "prefix")).toBe(true);
    // Then the overflow goes to ONE other backend, which it marks in turn, not over all of them.
    expect(picks[n]!.url).not.toBe(picks[0]!.url);
    expect(new Set(picks.slice(n, 2 * n).map((p) => p.url)).size).toBe(1);
    // Another key is unaffected; a moving trajectory (with hashes) does not use the marks.
    expect(await pool.prefixBlocks([], "other-key")).toEqual({});
    expect(await pool.prefixBlocks([hx(9)], "fresh-key")).toEqual({});
    // A turn under the key noted there with its hashes ends that backend's mark: the block index
    // (which has not seen these blocks) counts for it from now on.
    const marked = picks[n]!.url;
    await pool.notePrefix("fresh-key", marked, [hx(500), hx(501)]);
    await runInDurableObject(pool, (instance: PoolDO) => {
      expect([...openPlacements(instance).values()].some((p) => p.key === "fresh-key" && p.url === marked)).toBe(false);
    });
    // Marks expire after PLACED_PREFIX_MS.
    await runInDurableObject(pool, (instance: PoolDO) => {
      for (const p of openPlacements(instance).values()) if (p.key === "fresh-key") p.at = Date.now() - PLACED_PREFIX_MS - 1;
    });
    // Left: what the text index says (the noted backend, not indexed by KV events here, counts 1).
    expect(await pool.prefixBlocks([], "fresh-key")).toEqual({ [marked]: 1 });
  });
});
