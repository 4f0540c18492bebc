import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { heartbeatCell, placementCell } from "../../durable-objects/pool/cell-route";
import { FIRST_CELL } from "../../durable-objects/pool/cells";
import { FORGET_AFTER_DOWN, type PoolDirectoryDO } from "../../durable-objects/pool/directory-do";
import { poolCell, type PoolDO } from "../../durable-objects/pool/pool-do";
import { edgeSettings } from "../../durable-objects/settings";
import type { Heartbeat } from "../../protocol/messages";

const settings = edgeSettings(env);
const CELL = settings.poolCellBackends; // 32 unless POOL_CELL_BACKENDS says otherwise

const beat = (i: number, model = "cells-model"): Heartbeat => ({ id: `cb-${String(i).padStart(3, "0")}`, url: `http://10.9.${Math.floor(i / 200)}.${i % 200}:8080`, model, kvCapacityBlocks: 4096, running: i % 3, waiting: 0, kvUsage: 0.1, tokensPerS: 0 });

/**
 * An env whose pool cells and directory are objects of this test's own (every name prefixed), so
 * the test never touches the pool the other tests route with. (The cells' reports still go to
 * the environment's directory, which knows none of these backends.)
 */
function privateEnv(): Env {
  const tag = crypto.randomUUID();
  const wrap = <T extends Rpc.DurableObjectBranded | undefined>(ns: DurableObjectNamespace<T>) =>
    ({ idFromName: (name: string) => ns.idFromName(`${tag}/${name}`), get: (id: DurableObjectId) => ns.get(id) }) as unknown as DurableObjectNamespace<T>;
  return { ...env, POOL: wrap(env.POOL), POOL_DIRECTORY: wrap(env.POOL_DIRECTORY) };
}

/** What the edge's heartbeat route does with a beat: the directory's cell for it, then that cell's object. */
async function heartbeat(e: Env, h: Heartbeat): Promise<string> {
  const cell = await heartbeatCell(e, h);
  await poolCell(e, cell).heartbeat(h, cell);
  return cell;
}

describe("pool cells (directory and cell objects)", () => {
  it("puts a cell's worth of backends in the first cell, the rest in a second, and places each key in its cell on its backends", async () => {
    const e = privateEnv();
    const cells: string[] = [];
    for (let i = 0; i < CELL + 8; i++) cells.push(await heartbeat(e, beat(i)));
    expect(cells.filter((c) => c === FIRST_CELL)).toHaveLength(CELL);
    expect(new Set(cells.slice(CELL))).toEqual(new Set(["pool-1"]));
    // A beat of a known backend goes to its cell without asking the directory again.
    expect(await heartbeat(e, beat(CELL + 3))).toBe("pool-1");

    const urlsOf = (cell: string) => new Set(cells.flatMap((c, i) => (c === cell ? [beat(i).url] : [])));
    const chosen = new Map<string, number>();
    for (let k = 0; k < 60; k++) {
      const { cell, view } = await placementCell(e, settings, { key: async () => `key-${k}`, model: "cells-model" });
      chosen.set(cell, (chosen.get(cell) ?? 0) + 1);
      const placed = await poolCell(e, cell).place({ hashes: [], key: `key-${k}`, trajectoryId: `t-${k}` });
      // The cell's view and its placement name only its own backends (and the static ones).
      expect(urlsOf(cell).has(placed!.url) || settings.backends.some((b) => b.url === placed!.url)).toBe(true);
      expect(view.filter((b) => b.source === "registered").every((b) => urlsOf(cell).has(b.url))).toBe(true);
    }
    // Keys split in proportion to the cells' backends (32:8 by default): both cells get some.
    expect(chosen.get(FIRST_CELL)!).toBeGreaterThan(chosen.get("pool-1") ?? 0);
    expect(chosen.get("pool-1") ?? 0).toBeGreaterThan(0);
    // A trajectory pinned to a backend of the second cell is placed there whatever its key.
    for (let k = 0; k < 10; k++) expect((await placementCell(e, settings, { key: async () => `key-${k}`, pinned: beat(CELL + 1).url })).cell).toBe("pool-1");
  });

  it("loses no placement when a cell's backends are all down: the next cell takes the keys it ranked first", async () => {
    const e = privateEnv();
    for (let i = 0; i < CELL + 4; i++) await heartbeat(e, beat(i, "cells-down"));
    const second = poolCell(e, "pool-1");
    await runInDurableObject(second, (_i: PoolDO, state) => {
      state.storage.sql.exec(`UPDATE backends SET last_seen_ms = ?`, Date.now() - settings.poolDownAfterMs - 1000);
    });
    let tried = 0;
    for (let k = 0; k < 80; k++) {
      const { cell, view } = await placementCell(e, settings, { key: async () => `down-${k}`, model: "cells-down" });
      // Cached views may be up to POOL_VIEW_TTL_MS old: only cells with a backend up are chosen once they show it.
      if (view.some((b) => b.source === "registered" && b.up)) {
        tried++;
        const placed = await poolCell(e, cell).place({ hashes: [], key: `down-${k}`, trajectoryId: `d-${k}` });
        expect(placed).not.toBeNull();
        expect((await poolCell(e, cell).view()).find((b) => b.url === placed!.url)?.up).toBe(true);
      }
    }
    expect(tried).toBeGreaterThan(0);
    await new Promise((r) => setTimeout(r, settings.poolViewTtlMs + 50));
    for (let k = 0; k < 40; k++) expect((await placementCell(e, settings, { key: async () => `down-${k}`, model: "cells-down" })).cell).toBe(FIRST_CELL);
  });

  it("forgets backends no cell reported up for a while and merges the cells left small (the smaller cell's backends move)", async () => {
    const e = privateEnv();
    const directory = e.POOL_DIRECTORY.get(e.POOL_DIRECTORY.idFromName("directory"));
    for (let i = 0; i < CELL + 8; i++) await directory.assign({ id: beat(i).id, url: beat(i).url, model: "m" });
    const before = await directory.map();
    expect(before.cells.map((c) => [c.name, c.backends.length])).toEqual([[FIRST_CELL, CELL], ["pool-1", 8]]);
    // Half of the first cell has not been reported up for longer than the forget delay.
    const gone = Array.from({ length: CELL / 2 + 4 }, (_, i) => beat(i).id);
    await runInDurableObject(directory, (instance: PoolDirectoryDO) => {
      const seen = (instance as unknown as { seen: Map<string, number> }).seen;
      for (const id of gone) seen.set(id, Date.now() - FORGET_AFTER_DOWN * settings.poolDownAfterMs - 1000);
    });
    const version = await directory.report("pool-1", Array.from({ length: 8 }, (_, i) => beat(CELL + i).id));
    const after = await directory.map();
    expect(version).toBeGreaterThan(before.version);
    // 12 + 8 backends fit in 0.75 of a cell: pool-1's 8 moved into the first cell.
    expect(after.cells.map((c) => [c.name, c.backends.length])).toEqual([[FIRST_CELL, CELL - gone.length + 8]]);
    expect(after.cells[0]!.backends.map((b) => b.id)).not.toContain(gone[0]);
    // Assigning a known backend changes nothing; an unknown one joins the cell with room.
    expect((await directory.assign({ id: beat(CELL + 2).id, url: beat(CELL + 2).url, model: "m" })).cell).toBe(FIRST_CELL);
    expect((await directory.map()).version).toBe(after.version);
  });
});
