import { openSchema, type SqlHost, type StoreSchema } from "../store-schema";
import { MISS_REASONS, type MissReason } from "../turn/cache-miss";
import { PREFIX_BREAK_CAUSES, type PrefixBreakCause } from "../turn/prefix-break";

/** Trajectories kept per tenant: the most recently active ones; older rows are dropped. */
export const MAX_INDEXED_TRAJECTORIES = 1000;

/** Tool pauses kept per tenant for lease predictions (the most recent). */
export const MAX_TENANT_PAUSES = 256;

/** One trajectory as the tenant's index lists it (totals over its recorded turns). */
export interface IndexedTrajectory {
  id: string;
  createdAt: string;
  /** Start of the most recent turn, null before the first. */
  lastTurnAt: string | null;
  /** When the trajectory was last created or had a turn (ms since the epoch): the list order. */
  lastActiveMs: number;
  turns: number;
  promptTokens: number;
  cachedTokens: number;
  computedTokens: number;
  completionTokens: number;
}

/** What the Worker notes about a finished turn (from the turn record of its done event). */
export interface IndexedTurn {
  turn: number;
  startedAt: string;
  totalMs: number;
  promptTokens: number;
  cachedTokens: number;
  computedTokens: number;
  completionTokens: number;
  /** The turn's prefix-break cause (absent on records from before the explainer). */
  prefixBreak?: PrefixBreakCause;
  /** What safe canonicalization repaired in the turn, and the client quirks the edge repaired (`quirks`). */
  repaired?: { toolCallIds: number; jsonArguments: number; quirks?: readonly string[] };
  /** Its cache miss (cache-miss.ts): why, and the tokens computed for it. */
  miss?: { reason: MissReason; tokens: number };
}

/** The tenant's counters since its index object was created (never decrease). */
export interface TenantCounters {
  turns: number;
  prefixBreaks: Record<PrefixBreakCause, number>;
  repairs: { toolCallIds: number; jsonArguments: number };
  /** Turns with each client quirk repaired (`Repairs.quirks`), by quirk name, e.g. `{"billing-header": 12}`. */
  quirks: Record<string, number>;
  /** Turns with a cache miss, and the prompt tokens they computed for it, by reason. */
  misses: Record<MissReason, { turns: number; tokens: number }>;
}

/**
 * Version 1: `trajectories` (id, creation, last activity; indexed by activity), `turns` (one row
 * per noted turn, keyed by trajectory and number), `counters` (name -> count) and `pauses` (the
 * tenant's recent tool pauses); the tables the index created before it was versioned.
 */
export const TENANT_INDEX_SCHEMA: StoreSchema = {
  name: "tenant index",
  version: 1,
  create(sql) {
    sql.exec(`CREATE TABLE IF NOT EXISTS trajectories (id TEXT PRIMARY KEY, created_at TEXT NOT NULL, last_active_ms INTEGER NOT NULL)`);
    sql.exec(`CREATE INDEX IF NOT EXISTS trajectories_by_activity ON trajectories (last_active_ms)`);
    sql.exec(
      `CREATE TABLE IF NOT EXISTS turns (id TEXT NOT NULL, turn INTEGER NOT NULL, started_at TEXT NOT NULL, end_ms INTEGER NOT NULL,
        prompt_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL, computed_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
        PRIMARY KEY (id, turn))`,
    );
    // Counters for the tenant's metrics (GET /v1/tenants/{tenant}/metrics): bumped once per turn.
    sql.exec(`CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, n INTEGER NOT NULL)`);
    // The tenant's most recent tool pauses, for lease TTLs of trajectories with few of their own.
    sql.exec(`CREATE TABLE IF NOT EXISTS pauses (seq INTEGER PRIMARY KEY AUTOINCREMENT, ms INTEGER NOT NULL)`);
  },
};

/**
 * A tenant's index in its SQLite storage: its trajectories (id, creation, last activity) with one
 * row per noted turn, so a note that arrives twice or out of order changes nothing; its counters
 * (bumped once per newly noted turn, never trimmed); its recent tool pauses. Bounded: the
 * MAX_INDEXED_TRAJECTORIES most recently active trajectories and their turn rows (about 100 bytes
 * a row), the MAX_TENANT_PAUSES most recent pauses.
 *
 * @example
 * const store = new TenantIndexStore(ctx.storage);
 * store.migrate();
 * store.noteCreated({ id: "t1", createdAt: new Date().toISOString() });
 * store.list({ limit: 10 }); // [{ id: "t1", turns: 0, ... }]
 */
export class TenantIndexStore {
  constructor(private readonly host: SqlHost) {}

  /** Creates the tables, or checks the schema version of existing ones (`openSchema`). */
  migrate(): void {
    openSchema(this.host, TENANT_INDEX_SCHEMA);
  }

  /** A trajectory was created (a second note for the same id changes nothing). */
  noteCreated(params: { id: string; createdAt: string }): void {
    this.host.sql.exec(
      `INSERT INTO trajectories (id, created_at, last_active_ms) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING`,
      params.id,
      params.createdAt,
      Date.parse(params.createdAt) || Date.now(),
    );
    this.trim();
  }

  /** A turn finished; an unknown trajectory is added (created at the turn's start). */
  noteTurn(params: { id: string; turn: IndexedTurn }): void {
    const { id, turn } = params;
    const started = Date.parse(turn.startedAt) || Date.now();
    const end = started + Math.max(0, Math.round(turn.totalMs));
    const sql = this.host.sql;
    this.host.transactionSync(() => {
      const seen = sql.exec(`SELECT 1 FROM turns WHERE id = ? AND turn = ?`, id, turn.turn).toArray().length > 0;
      if (!seen) {
        const bump = (name: string, by = 1) => {
          if (by > 0) sql.exec(`INSERT INTO counters (name, n) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET n = n + excluded.n`, name, by);
        };
        bump("turns");
        if (turn.prefixBreak) bump(`break:${turn.prefixBreak}`);
        bump("repair:toolCallIds", turn.repaired?.toolCallIds ?? 0);
        bump("repair:jsonArguments", turn.repaired?.jsonArguments ?? 0);
        for (const quirk of new Set(turn.repaired?.quirks ?? [])) bump(`quirk:${quirk}`);
        if (turn.miss) {
          bump(`miss:${turn.miss.reason}`);
          bump(`miss_tokens:${turn.miss.reason}`, turn.miss.tokens);
        }
      }
      sql.exec(`INSERT INTO trajectories (id, created_at, last_active_ms) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING`, id, turn.startedAt, end);
      sql.exec(`UPDATE trajectories SET last_active_ms = MAX(last_active_ms, ?) WHERE id = ?`, end, id);
      sql.exec(
        `INSERT OR REPLACE INTO turns (id, turn, started_at, end_ms, prompt_tokens, cached_tokens, computed_tokens, completion_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
        id,
        turn.turn,
        turn.startedAt,
        end,
        turn.promptTokens,
        turn.cachedTokens,
        turn.computedTokens,
        turn.completionTokens,
      );
    });
    this.trim();
  }

  /** The trajectory was deleted: forget it and its turns. */
  noteDeleted(params: { id: string }): void {
    this.host.transactionSync(() => {
      this.host.sql.exec(`DELETE FROM turns WHERE id = ?`, params.id);
      this.host.sql.exec(`DELETE FROM trajectories WHERE id = ?`, params.id);
    });
  }

  /** A trajectory of this tenant waited `ms` on its tools (the newest MAX_TENANT_PAUSES are kept). */
  notePause(ms: number): void {
    const sql = this.host.sql;
    sql.exec(`INSERT INTO pauses (ms) VALUES (?)`, Math.max(0, Math.round(ms)));
    sql.exec(`DELETE FROM pauses WHERE seq <= (SELECT MAX(seq) FROM pauses) - ?`, MAX_TENANT_PAUSES);
  }

  /** The tenant's recent tool pauses in milliseconds (newest last). */
  pauseSample(): number[] {
    return this.host.sql.exec<{ ms: number }>(`SELECT ms FROM pauses ORDER BY seq`).toArray().map((r) => r.ms);
  }

  /** The tenant's counters: turns, prefix breaks by cause, canonicalization repairs, cache misses. */
  counters(): TenantCounters {
    const rows = new Map(this.host.sql.exec<{ name: string; n: number }>(`SELECT name, n FROM counters`).toArray().map((r) => [r.name, r.n]));
    return {
      turns: rows.get("turns") ?? 0,
      prefixBreaks: Object.fromEntries(PREFIX_BREAK_CAUSES.map((c) => [c, rows.get(`break:${c}`) ?? 0])) as Record<PrefixBreakCause, number>,
      repairs: { toolCallIds: rows.get("repair:toolCallIds") ?? 0, jsonArguments: rows.get("repair:jsonArguments") ?? 0 },
      quirks: Object.fromEntries([...rows].filter(([name]) => name.startsWith("quirk:")).map(([name, n]) => [name.slice("quirk:".length), n])),
      misses: Object.fromEntries(MISS_REASONS.map((r) => [r, { turns: rows.get(`miss:${r}`) ?? 0, tokens: rows.get(`miss_tokens:${r}`) ?? 0 }])) as TenantCounters["misses"],
    };
  }

  /** The most recently active trajectories first, at most `limit` (default 100). */
  list(params: { limit?: number } = {}): IndexedTrajectory[] {
    const limit = Math.max(1, Math.min(MAX_INDEXED_TRAJECTORIES, Math.floor(params.limit ?? 100)));
    return this.host.sql
      .exec<{
        id: string;
        created_at: string;
        last_active_ms: number;
        last_turn_at: string | null;
        turns: number;
        prompt_tokens: number;
        cached_tokens: number;
        computed_tokens: number;
        completion_tokens: number;
      }>(
        `SELECT t.id, t.created_at, t.last_active_ms, MAX(u.started_at) AS last_turn_at, COUNT(u.turn) AS turns,
           COALESCE(SUM(u.prompt_tokens), 0) AS prompt_tokens, COALESCE(SUM(u.cached_tokens), 0) AS cached_tokens,
           COALESCE(SUM(u.computed_tokens), 0) AS computed_tokens, COALESCE(SUM(u.completion_tokens), 0) AS completion_tokens
         FROM trajectories t LEFT JOIN turns u ON u.id = t.id
         GROUP BY t.id ORDER BY t.last_active_ms DESC, t.id LIMIT ?`,
        limit,
      )
      .toArray()
      .map((r) => ({
        id: r.id,
        createdAt: r.created_at,
        lastTurnAt: r.last_turn_at,
        lastActiveMs: r.last_active_ms,
        turns: r.turns,
        promptTokens: r.prompt_tokens,
        cachedTokens: r.cached_tokens,
        computedTokens: r.computed_tokens,
        completionTokens: r.completion_tokens,
      }));
  }

  /** Drops the least recently active trajectories beyond MAX_INDEXED_TRAJECTORIES. */
  private trim(): void {
    const sql = this.host.sql;
    const n = Number(sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM trajectories`).one().n);
    if (n <= MAX_INDEXED_TRAJECTORIES) return;
    this.host.transactionSync(() => {
      const stale = `SELECT id FROM trajectories ORDER BY last_active_ms ASC, id DESC LIMIT ?`;
      sql.exec(`DELETE FROM turns WHERE id IN (${stale})`, n - MAX_INDEXED_TRAJECTORIES);
      sql.exec(`DELETE FROM trajectories WHERE id IN (${stale})`, n - MAX_INDEXED_TRAJECTORIES);
    });
  }
}
