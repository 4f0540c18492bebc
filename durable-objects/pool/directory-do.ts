import { DurableObject } from "cloudflare:workers";
import { edgeSettings } from "../settings";
import { openSchema, type SqlHost, type StoreSchema } from "../store-schema";
import { assignBackend, EMPTY_CELL_MAP, forgetBackends, rebalance, type CellBackend, type CellMap } from "./cells";

/** The directory object (there is one, named "directory"). */
export function directoryOf(env: Env): DurableObjectStub<PoolDirectoryDO> {
  return env.POOL_DIRECTORY.get(env.POOL_DIRECTORY.idFromName("directory"));
}

/** A backend the directory has not seen up in any cell's report for this many POOL_DOWN_AFTER_MS is forgotten. */
export const FORGET_AFTER_DOWN = 10;

/** Version 1: `cell_map`, one row: the `CellMap` as JSON. */
export const DIRECTORY_SCHEMA: StoreSchema = {
  name: "pool directory",
  version: 1,
  create(sql) {
    sql.exec(`CREATE TABLE IF NOT EXISTS cell_map (id INTEGER PRIMARY KEY CHECK (id = 1), map TEXT NOT NULL)`);
  },
};

/**
 * The pool's directory: which backend is in which cell (`CellMap`, the rules in cells.ts), one
 * small object that changes only when a backend joins, is forgotten, or cells split or merge. Every
 * edge isolate caches its map (cell-route.ts) and asks it only for a backend it does not know.
 *
 * Cells report the backends up in them (`report`, from `PoolDO.heartbeat`, at most every
 * CELL_REPORT_EVERY_MS a cell); a backend no cell reported up for FORGET_AFTER_DOWN x
 * POOL_DOWN_AFTER_MS leaves the map, and the cells are then rebalanced (merged, or split after
 * POOL_CELL_BACKENDS was lowered). A moved backend's next beats go to its new cell (once the
 * isolate's cached map has the move), which registers it and asks its KV blocks as a snapshot.
 * The map is stored in SQLite; when the object wakes, every backend counts as seen then.
 *
 * RPC: `map()`, `assign(backend)`, `report(cell, upIds)`.
 */
export class PoolDirectoryDO extends DurableObject<Env> {
  private cells: CellMap = EMPTY_CELL_MAP;
  /** Per backend id, when a cell last reported it up (or the directory assigned it, or woke). */
  private readonly seen = new Map<string, number>();
  private readonly host: SqlHost;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.host = ctx.storage;
    void ctx.blockConcurrencyWhile(async () => {
      openSchema(this.host, DIRECTORY_SCHEMA);
      const row = this.host.sql.exec<{ map: string }>(`SELECT map FROM cell_map WHERE id = 1`).toArray()[0];
      if (row) this.cells = JSON.parse(row.map) as CellMap;
      const now = Date.now();
      for (const c of this.cells.cells) for (const b of c.backends) this.seen.set(b.id, now);
    });
  }

  /** The map as it is now. */
  async map(): Promise<CellMap> {
    return this.cells;
  }

  /** The cell of a backend (joined to one if new: `assignBackend`), and the map after. */
  async assign(b: CellBackend & { model: string }): Promise<{ cell: string; map: CellMap }> {
    this.seen.set(b.id, Date.now());
    const { map, cell } = assignBackend(this.cells, b, this.cellBackends());
    this.save(map);
    return { cell, map: this.cells };
  }

  /**
   * Cell `cell` has `up` (backend ids) up now: they count as seen; backends not seen for
   * FORGET_AFTER_DOWN x POOL_DOWN_AFTER_MS are forgotten and the cells rebalanced. Answers the
   * map's version (a cell can tell that it changed).
   */
  async report(cell: string, up: readonly string[]): Promise<number> {
    const now = Date.now();
    for (const id of up) this.seen.set(id, now);
    const forgetBefore = now - FORGET_AFTER_DOWN * edgeSettings(this.env).poolDownAfterMs;
    const stale = new Set<string>();
    for (const c of this.cells.cells) for (const b of c.backends) if ((this.seen.get(b.id) ?? 0) < forgetBefore) stale.add(b.id);
    for (const id of stale) this.seen.delete(id);
    this.save(rebalance(forgetBackends(this.cells, stale), this.cellBackends()).map);
    if (stale.size > 0) console.log(`pool directory: forgot ${stale.size} backend(s) no cell reported up (last report from ${cell})`);
    return this.cells.version;
  }

  private cellBackends(): number {
    return edgeSettings(this.env).poolCellBackends;
  }

  private save(map: CellMap): void {
    if (map === this.cells) return;
    this.cells = map;
    this.host.sql.exec(`INSERT OR REPLACE INTO cell_map (id, map) VALUES (1, ?)`, JSON.stringify(map));
  }
}
