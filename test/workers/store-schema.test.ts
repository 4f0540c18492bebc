import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { POOL_SCHEMA, PoolStore } from "../../durable-objects/pool/pool-store";
import { openSchema, schemaVersion } from "../../durable-objects/store-schema";
import { tenantIndexOf } from "../../durable-objects/tenant-index/tenant-index-do";
import { TenantIndexStore } from "../../durable-objects/tenant-index/tenant-index-store";
import { TrajectoryStore } from "../../durable-objects/trajectory/trajectory-store";
import type { ChatMessage } from "../../protocol/messages";
import { createTrajectory, getState, seededTurn, stubOf, uid } from "./helpers";

/** The tables as pool-do.ts created them before the pool's store was versioned (main 69be70b). */
const POOL_TABLES_UNVERSIONED = [
  `CREATE TABLE IF NOT EXISTS backends (id TEXT PRIMARY KEY, url TEXT NOT NULL, heartbeat TEXT NOT NULL, last_seen_ms INTEGER NOT NULL)`,
  `CREATE TABLE IF NOT EXISTS prefixes (key TEXT NOT NULL, url TEXT NOT NULL, last_ms INTEGER NOT NULL, PRIMARY KEY (key, url))`,
  `CREATE TABLE IF NOT EXISTS prefix_lists (key TEXT PRIMARY KEY, hashes TEXT NOT NULL, last_ms INTEGER NOT NULL)`,
];

/** The tables as tenant-index-do.ts created them before the index's store was versioned (main 69be70b). */
const TENANT_INDEX_TABLES_UNVERSIONED = [
  `CREATE TABLE IF NOT EXISTS trajectories (id TEXT PRIMARY KEY, created_at TEXT NOT NULL, last_active_ms INTEGER NOT NULL)`,
  `CREATE INDEX IF NOT EXISTS trajectories_by_activity ON trajectories (last_active_ms)`,
  `CREATE TABLE IF NOT EXISTS turns (id TEXT NOT NULL, turn INTEGER NOT NULL, started_at TEXT NOT NULL, end_ms INTEGER NOT NULL,
    prompt_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL, computed_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
    PRIMARY KEY (id, turn))`,
  `CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, n INTEGER NOT NULL)`,
  `CREATE TABLE IF NOT EXISTS pauses (seq INTEGER PRIMARY KEY AUTOINCREMENT, ms INTEGER NOT NULL)`,
];

/** Replaces an object's storage by what the code before versioning left: `tables`, then `rows` (statements with their bindings). */
function unversioned(sql: SqlStorage, tables: string[], rows: [string, ...unknown[]][]): void {
  const existing = sql.exec<{ name: string }>(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_cf\\_%' ESCAPE '\\' AND name != 'sqlite_sequence'`).toArray();
  for (const { name } of existing) sql.exec(`DROP TABLE ${name}`);
  for (const ddl of tables) sql.exec(ddl);
  for (const [statement, ...bindings] of rows) sql.exec(statement, ...bindings);
}

const tableNames = (sql: SqlStorage) => sql.exec<{ name: string }>(`SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`).toArray().map((r) => r.name);
const count = (sql: SqlStorage, table: string) => sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM ${table}`).one().n;

describe("store schema versions", () => {
  it("a pool written before versioning (no version row) opens at version 1 with every row, and serves them", async () => {
    const pool = env.POOL.get(env.POOL.idFromName(`pool-legacy-${crypto.randomUUID()}`));
    const now = Date.now();
    const heartbeat = { id: "gpu-old", url: "http://10.0.0.7:8080", model: "m", kvCapacityBlocks: 64, running: 3, waiting: 1, kvUsage: 0.5, tokensPerS: 42 };
    await runInDurableObject(pool, (_instance, state) => {
      unversioned(state.storage.sql, POOL_TABLES_UNVERSIONED, [
        [`INSERT INTO backends (id, url, heartbeat, last_seen_ms) VALUES (?, ?, ?, ?)`, heartbeat.id, heartbeat.url, JSON.stringify(heartbeat), now],
        [`INSERT INTO prefixes (key, url, last_ms) VALUES (?, ?, ?)`, "key-old", heartbeat.url, now],
        [`INSERT INTO prefix_lists (key, hashes, last_ms) VALUES (?, ?, ?)`, "key-old", "0123456789abcdef".repeat(3), now],
      ]);
      expect(tableNames(state.storage.sql)).not.toContain("meta");
    });

    // A new instance opens the storage the old code left.
    await evictDurableObject(pool);
    const view = await pool.view();
    expect(view.find((b) => b.id === "gpu-old")).toMatchObject({ ...heartbeat, source: "registered", up: true, lastSeenMs: now });
    expect(await pool.prefixHolders("key-old")).toEqual([heartbeat.url]);
    await runInDurableObject(pool, (_instance, state) => {
      const sql = state.storage.sql;
      expect(schemaVersion(sql)).toBe(POOL_SCHEMA.version);
      expect([count(sql, "backends"), count(sql, "prefixes"), count(sql, "prefix_lists")]).toEqual([1, 1, 1]);
      expect(new PoolStore(state.storage).list("key-old", Date.now())).toEqual(Array(3).fill("0123456789abcdef"));
      // Opening again finds version 1 and changes nothing.
      expect(openSchema(state.storage, POOL_SCHEMA)).toBe(1);
      expect(count(sql, "backends")).toBe(1);
    });
  });

  it("a tenant index written before versioning opens at version 1 with its trajectories, turns, counters and pauses", async () => {
    const index = tenantIndexOf(env, uid("legacy-tenant"));
    const started = "2026-12-01T10:00:00.000Z";
    await runInDurableObject(index, (_instance, state) => {
      unversioned(state.storage.sql, TENANT_INDEX_TABLES_UNVERSIONED, [
        [`INSERT INTO trajectories (id, created_at, last_active_ms) VALUES (?, ?, ?)`, "t-old", started, Date.parse(started) + 900],
        ...[1, 2].map((turn): [string, ...unknown[]] => [
          `INSERT INTO turns (id, turn, started_at, end_ms, prompt_tokens, cached_tokens, computed_tokens, completion_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
          "t-old", turn, started, Date.parse(started) + 900, 100, 60, 40, 7,
        ]),
        [`INSERT INTO counters (name, n) VALUES ('turns', 2), ('quirk:billing-header', 1)`],
        [`INSERT INTO pauses (ms) VALUES (1200), (3400)`],
      ]);
    });

    await evictDurableObject(index);
    expect(await index.list()).toEqual([
      { id: "t-old", createdAt: started, lastTurnAt: started, lastActiveMs: Date.parse(started) + 900, turns: 2, promptTokens: 200, cachedTokens: 120, computedTokens: 80, completionTokens: 14 },
    ]);
    const counters = await index.counters();
    expect(counters.turns).toBe(2);
    expect(counters.quirks).toEqual({ "billing-header": 1 });
    expect(await index.pauseSample()).toEqual([1200, 3400]);
    // And it goes on from there: a new pause after the old ones; an old turn noted again counts nothing, a new one counts.
    await index.notePause(5600);
    expect(await index.pauseSample()).toEqual([1200, 3400, 5600]);
    const turn = (n: number) => ({ turn: n, startedAt: started, totalMs: 900, promptTokens: 100, cachedTokens: 60, computedTokens: 40, completionTokens: 7 });
    await index.noteTurn({ id: "t-old", turn: turn(2) });
    expect((await index.counters()).turns).toBe(2);
    await index.noteTurn({ id: "t-old", turn: turn(3) });
    expect((await index.counters()).turns).toBe(3);
    expect((await index.list())[0]!.turns).toBe(3);
    await runInDurableObject(index, (_instance, state) => expect(schemaVersion(state.storage.sql)).toBe(1));
  });

  it("a version-1 trajectory from before the Responses API, cache diagnostics and subagent links (no responses, forks, message_answers or children tables) gets them on wake, its transcript kept", async () => {
    const id = uid("legacy-trajectory");
    const transcript: ChatMessage[] = [{ role: "user", content: "before the Responses API" }, { role: "assistant", content: "stored" }];
    await createTrajectory("a", id);
    await runInDurableObject(stubOf("a", id), (_instance, state) => {
      new TrajectoryStore(state.storage).commitTurn(seededTurn(transcript));
      for (const table of ["responses", "response_parts", "forks", "message_answers", "children"]) state.storage.sql.exec(`DROP TABLE ${table}`);
    });
    await evictDurableObject(stubOf("a", id));
    expect(await stubOf("a", id).messages()).toEqual(transcript);
    expect((await getState("a", id)).forks).toEqual([]);
    expect((await getState("a", id)).children).toEqual([]);
    await runInDurableObject(stubOf("a", id), (_instance, state) => {
      expect(tableNames(state.storage.sql)).toEqual(expect.arrayContaining(["responses", "response_parts", "forks", "message_answers", "children"]));
      expect(schemaVersion(state.storage.sql)).toBe(1);
    });
  });

  it("each store refuses storage of a version it does not know, and leaves it as it was", async () => {
    const stores = [
      { name: "pool", stub: env.POOL.get(env.POOL.idFromName(`pool-future-${crypto.randomUUID()}`)), open: (s: DurableObjectStorage) => new PoolStore(s).migrate() },
      { name: "tenant index", stub: tenantIndexOf(env, uid("future-tenant")), open: (s: DurableObjectStorage) => new TenantIndexStore(s).migrate() },
    ];
    for (const { name, stub, open } of stores) {
      await runInDurableObject(stub, (_instance, state) => {
        state.storage.sql.exec(`UPDATE meta SET value = '2' WHERE key = 'schema_version'`);
        expect(() => open(state.storage)).toThrow(`${name} storage has schema version 2, this code reads 1 (or none)`);
        expect(schemaVersion(state.storage.sql)).toBe(2);
        state.storage.sql.exec(`UPDATE meta SET value = '1' WHERE key = 'schema_version'`);
      });
    }
  });
});

