/** The slice of `DurableObjectStorage` a store needs (real SQLite storage in workerd). */
export interface SqlHost {
  sql: SqlStorage;
  transactionSync<T>(fn: () => T): T;
}

/**
 * The schema of one Durable Object's SQLite store, versioned. The version is a row of its `meta`
 * table (`key = 'schema_version'`), checked each time the object wakes (`openSchema`).
 */
export interface StoreSchema {
  /** Names the store in errors ("pool", "tenant index", "trajectory"). */
  name: string;
  /** The version this code writes (1 for every store today). */
  version: number;
  /**
   * Creates what is missing of the tables and indexes (`CREATE ... IF NOT EXISTS`); runs on every
   * wake, so adding a table needs no new version. Storage without a version row (version 0: new,
   * or written before the store was versioned, with the same tables) is completed by it.
   */
  create(sql: SqlStorage): void;
}

/**
 * Opens a store's schema in one transaction: reads the version row, refuses storage of another
 * version (written by newer code, or older than any this code can read), runs `create` and records
 * the version. Returns the version found (0: none, e.g. storage written before versioning).
 *
 * A change `create` cannot express (a column changed, rows moved) bumps `version` and adds the
 * step from the previous one here, with the first schema that needs it.
 *
 * @example
 * openSchema(ctx.storage, { name: "pool", version: 1, create: (sql) => sql.exec(`CREATE TABLE IF NOT EXISTS ...`) });
 */
export function openSchema(host: SqlHost, schema: StoreSchema): number {
  return host.transactionSync(() => {
    const sql = host.sql;
    sql.exec(`CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`);
    const found = schemaVersion(sql);
    if (found !== 0 && found !== schema.version) {
      throw new Error(`${schema.name} storage has schema version ${found}, this code reads ${schema.version} (or none)`);
    }
    schema.create(sql);
    // Written once, when the storage is new or unversioned: a wake of current storage writes nothing.
    if (found !== schema.version) sql.exec(`INSERT INTO meta (key, value) VALUES ('schema_version', ?)`, String(schema.version));
    return found;
  });
}

/** The schema version recorded in `meta` (0: none). */
export function schemaVersion(sql: SqlStorage): number {
  const value = sql.exec<{ value: string }>(`SELECT value FROM meta WHERE key = 'schema_version'`).toArray()[0]?.value;
  return value === undefined ? 0 : Number(value);
}
