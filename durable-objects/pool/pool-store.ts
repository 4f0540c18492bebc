import { SHORT_HASH_HEX } from "../../protocol/block-hash";
import type { Heartbeat } from "../../protocol/messages";
import { openSchema, type SqlHost, type StoreSchema } from "../store-schema";

/** A backend's last heartbeat as the pool keeps it (without its KV events). */
export type BackendHeartbeat = Omit<Heartbeat, "kvEvents">;

/** A registered backend as stored: its last heartbeat, when it came, and whether that makes it up. */
export interface BackendRow {
  heartbeat: BackendHeartbeat;
  lastSeenMs: number;
  up: boolean;
}

/** Rows of the text-level prefix index, and how long one lives without a new note. */
export const MAX_PREFIX_ROWS = 10_000;
export const PREFIX_TTL_MS = 10 * 60_000;
/** Leading block hashes kept per prefix key (the common prefix of the lists noted under it). */
export const PREFIX_LIST_BLOCKS = 256;

/**
 * Version 1: `backends` (one row per registered backend: its last heartbeat as JSON), `prefixes`
 * (prefix key -> the backends that served it) and `prefix_lists` (prefix key -> the leading
 * block hashes its trajectories share, 16 hex each, concatenated); the tables the pool created
 * before it was versioned.
 */
export const POOL_SCHEMA: StoreSchema = {
  name: "pool",
  version: 1,
  create(sql) {
    sql.exec(`CREATE TABLE IF NOT EXISTS backends (id TEXT PRIMARY KEY, url TEXT NOT NULL, heartbeat TEXT NOT NULL, last_seen_ms INTEGER NOT NULL)`);
    sql.exec(`CREATE TABLE IF NOT EXISTS prefixes (key TEXT NOT NULL, url TEXT NOT NULL, last_ms INTEGER NOT NULL, PRIMARY KEY (key, url))`);
    sql.exec(`CREATE TABLE IF NOT EXISTS prefix_lists (key TEXT PRIMARY KEY, hashes TEXT NOT NULL, last_ms INTEGER NOT NULL)`);
  },
};

/**
 * The one rule for a registered backend being up, as SQL over its `backends` row (one parameter:
 * the oldest heartbeat time that still counts): it beat recently and its last beat was not `leaving`.
 */
const UP_SQL = `(last_seen_ms >= ? AND COALESCE(json_extract(heartbeat, '$.leaving'), 0) = 0)`;

/**
 * The pool object's SQLite storage: the registry of backends that heartbeat in, and the
 * text-level prefix index (bounded: the newest MAX_PREFIX_ROWS rows of each table, plus the notes
 * of up to PREFIX_TRIM_EVERY_MS (pool-do.ts), each dropped after PREFIX_TTL_MS without a new note
 * and never read after it; about 100 bytes a holder row, at most 4 KiB a list row).
 * Times are epoch ms, passed in.
 *
 * @example
 * const store = new PoolStore(ctx.storage);
 * store.migrate();
 * store.putBackend(heartbeat, Date.now());
 * store.backends(Date.now() - downAfterMs); // [{ heartbeat, lastSeenMs, up: true }]
 */
export class PoolStore {
  constructor(private readonly host: SqlHost) {}

  /** Creates the tables, or checks the schema version of existing ones (`openSchema`). */
  migrate(): void {
    openSchema(this.host, POOL_SCHEMA);
  }

  /** When backend `id` last beat (undefined: not registered). */
  lastSeenMs(id: string): number | undefined {
    return this.host.sql.exec<{ last_seen_ms: number }>(`SELECT last_seen_ms FROM backends WHERE id = ?`, id).toArray()[0]?.last_seen_ms;
  }

  /** Records a backend's heartbeat (without its KV events), received at `now`. */
  putBackend(h: Heartbeat, now: number): void {
    const { kvEvents: _events, ...load } = h;
    this.host.sql.exec(`INSERT OR REPLACE INTO backends (id, url, heartbeat, last_seen_ms) VALUES (?, ?, ?, ?)`, h.id, h.url, JSON.stringify(load satisfies BackendHeartbeat), now);
  }

  /** Forgets backend `id`; answers its url (undefined: it was not registered). */
  removeBackend(id: string): string | undefined {
    return this.host.transactionSync(() => {
      const url = this.host.sql.exec<{ url: string }>(`SELECT url FROM backends WHERE id = ?`, id).toArray()[0]?.url;
      this.host.sql.exec(`DELETE FROM backends WHERE id = ?`, id);
      return url;
    });
  }

  /** Every registered backend by id; up when it beat at `upSince` or later and its last beat was not `leaving`. */
  backends(upSince: number): BackendRow[] {
    return this.host.sql
      .exec<{ heartbeat: string; last_seen_ms: number; up: number }>(`SELECT heartbeat, last_seen_ms, ${UP_SQL} AS up FROM backends ORDER BY id`, upSince)
      .toArray()
      .map((r) => ({ heartbeat: JSON.parse(r.heartbeat) as BackendHeartbeat, lastSeenMs: r.last_seen_ms, up: r.up === 1 }));
  }

  /** The registered backends up (as `backends` tells it): their ids and urls. */
  upBackends(upSince: number): { id: string; url: string }[] {
    return this.host.sql.exec<{ id: string; url: string }>(`SELECT id, url FROM backends WHERE ${UP_SQL}`, upSince).toArray();
  }

  /** Notes that `url` served a trajectory with prefix key `key` at `now`. */
  noteHolder(key: string, url: string, now: number): void {
    this.host.sql.exec(`INSERT OR REPLACE INTO prefixes (key, url, last_ms) VALUES (?, ?, ?)`, key, url, now);
  }

  /** Backends that served `key` within PREFIX_TTL_MS of `now`, most recent first. */
  holders(key: string, now: number): string[] {
    return this.host.sql
      .exec<{ url: string }>(`SELECT url FROM prefixes WHERE key = ? AND last_ms >= ? ORDER BY last_ms DESC`, key, now - PREFIX_TTL_MS)
      .toArray()
      .map((r) => r.url);
  }

  /** Sets the leading hashes `key`'s trajectories share (short hashes, at most PREFIX_LIST_BLOCKS). */
  setList(key: string, hashes: readonly string[], now: number): void {
    this.host.sql.exec(`INSERT OR REPLACE INTO prefix_lists (key, hashes, last_ms) VALUES (?, ?, ?)`, key, hashes.slice(0, PREFIX_LIST_BLOCKS).join(""), now);
  }

  /** The leading hashes `key`'s trajectories share, if noted within PREFIX_TTL_MS of `now`. */
  list(key: string, now: number): string[] | undefined {
    const row = this.host.sql.exec<{ hashes: string }>(`SELECT hashes FROM prefix_lists WHERE key = ? AND last_ms >= ?`, key, now - PREFIX_TTL_MS).toArray()[0];
    if (!row) return undefined;
    const out: string[] = [];
    for (let i = 0; i + SHORT_HASH_HEX <= row.hashes.length; i += SHORT_HASH_HEX) out.push(row.hashes.slice(i, i + SHORT_HASH_HEX));
    return out;
  }

  /** Drops prefix rows older than PREFIX_TTL_MS, then all but the newest MAX_PREFIX_ROWS of each table. */
  trimPrefixes(now: number): void {
    for (const table of ["prefixes", "prefix_lists"]) {
      this.host.sql.exec(`DELETE FROM ${table} WHERE last_ms < ?`, now - PREFIX_TTL_MS);
      this.host.sql.exec(`DELETE FROM ${table} WHERE rowid IN (SELECT rowid FROM ${table} ORDER BY last_ms DESC LIMIT -1 OFFSET ?)`, MAX_PREFIX_ROWS);
    }
  }
}
