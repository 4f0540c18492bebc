import { DurableObject } from "cloudflare:workers";
import { backendTargets, type EdgeEnv } from "./edge-env";

/** What a backend reports about itself on each heartbeat. */
export interface BackendHeartbeat {
  id: string;
  url: string;
  model: string;
  /** KV blocks in its pool. */
  kvCapacityBlocks: number;
  running: number;
  waiting: number;
  /** Fraction of KV blocks in use, 0..1. */
  kvUsage: number;
  tokensPerS: number;
}

/** A backend as the pool sees it. */
export interface PoolBackend extends BackendHeartbeat {
  up: boolean;
  /** "registered": heartbeats; "static": from BACKEND_URLS (always considered up, load unknown). */
  source: "registered" | "static";
  lastSeenMs: number;
}

/** The pool object (there is one, named "pool"). */
export function poolOf(env: EdgeEnv): DurableObjectStub<PoolDO> {
  return env.POOL.get(env.POOL.idFromName("pool"));
}

/** Rows of the approximate prefix index, and how long one lives without a new note. */
export const MAX_PREFIX_ROWS = 10_000;
export const PREFIX_TTL_MS = 10 * 60_000;

/** Default: a backend that missed heartbeats for this long is down (3 x the 2 s interval). */
export const DEFAULT_DOWN_AFTER_MS = 6000;

/**
 * The backend pool: one object (named "pool") holding the registry of backends that heartbeat
 * in (SQLite, so it survives eviction), merged with the static BACKEND_URLS list. A backend that
 * misses heartbeats for `POOL_DOWN_AFTER_MS` is reported down, and up again when they resume.
 *
 * RPC: `heartbeat(h)`, `view()`, `remove(id)`.
 */
export class PoolDO extends DurableObject<EdgeEnv> {
  constructor(ctx: DurableObjectState, env: EdgeEnv) {
    super(ctx, env);
    void ctx.blockConcurrencyWhile(async () => {
      ctx.storage.sql.exec(
        `CREATE TABLE IF NOT EXISTS backends (id TEXT PRIMARY KEY, url TEXT NOT NULL, heartbeat TEXT NOT NULL, last_seen_ms INTEGER NOT NULL)`,
      );
      ctx.storage.sql.exec(
        `CREATE TABLE IF NOT EXISTS prefixes (key TEXT NOT NULL, url TEXT NOT NULL, last_ms INTEGER NOT NULL, PRIMARY KEY (key, url))`,
      );
    });
  }

  /** Registers a backend or refreshes it; answers whether it was new. */
  async heartbeat(h: BackendHeartbeat): Promise<{ registered: boolean }> {
    const existed = this.ctx.storage.sql.exec(`SELECT 1 FROM backends WHERE id = ?`, h.id).toArray().length > 0;
    this.ctx.storage.sql.exec(
      `INSERT OR REPLACE INTO backends (id, url, heartbeat, last_seen_ms) VALUES (?, ?, ?, ?)`,
      h.id,
      h.url,
      JSON.stringify(h),
      Date.now(),
    );
    return { registered: !existed };
  }

  async remove(id: string): Promise<boolean> {
    const n = this.ctx.storage.sql.exec(`DELETE FROM backends WHERE id = ?`, id).rowsWritten;
    return n > 0;
  }

  /**
   * Notes that `url` served (and so caches) the trajectory prefix named `key` (see
   * `prefixKey`). The index is approximate and bounded: the newest MAX_PREFIX_ROWS rows, each
   * dropped after PREFIX_TTL_MS without a new note (about 100 bytes a row).
   */
  async notePrefix(key: string, url: string): Promise<void> {
    const sql = this.ctx.storage.sql;
    sql.exec(`INSERT OR REPLACE INTO prefixes (key, url, last_ms) VALUES (?, ?, ?)`, key, url, Date.now());
    sql.exec(`DELETE FROM prefixes WHERE last_ms < ?`, Date.now() - PREFIX_TTL_MS);
    sql.exec(`DELETE FROM prefixes WHERE rowid IN (SELECT rowid FROM prefixes ORDER BY last_ms DESC LIMIT -1 OFFSET ?)`, MAX_PREFIX_ROWS);
  }

  /** Backends that recently served a trajectory with this prefix key. */
  async prefixHolders(key: string): Promise<string[]> {
    return this.ctx.storage.sql
      .exec<{ url: string }>(`SELECT url FROM prefixes WHERE key = ? AND last_ms >= ? ORDER BY last_ms DESC`, key, Date.now() - PREFIX_TTL_MS)
      .toArray()
      .map((r) => r.url);
  }

  /** Every known backend with its load and whether it is up now. */
  async view(): Promise<PoolBackend[]> {
    const now = Date.now();
    const downAfter = Number(this.env.POOL_DOWN_AFTER_MS ?? "") || DEFAULT_DOWN_AFTER_MS;
    const rows = this.ctx.storage.sql.exec<{ heartbeat: string; last_seen_ms: number }>(`SELECT heartbeat, last_seen_ms FROM backends ORDER BY id`).toArray();
    const registered: PoolBackend[] = rows.map((r) => ({
      ...(JSON.parse(r.heartbeat) as BackendHeartbeat),
      source: "registered",
      lastSeenMs: r.last_seen_ms,
      up: now - r.last_seen_ms <= downAfter,
    }));
    const known = new Set(registered.map((b) => b.url));
    const statics: PoolBackend[] = backendTargets(this.env)
      .filter((t) => !known.has(t.url))
      .map((t) => ({ id: t.url, url: t.url, model: "", kvCapacityBlocks: 0, running: 0, waiting: 0, kvUsage: 0, tokensPerS: 0, source: "static", lastSeenMs: now, up: true }));
    return [...registered, ...statics];
  }
}
