import { assignBackend, cellOrder, EMPTY_CELL_MAP, type CellMap } from "../../durable-objects/pool/cells";

/** The pool's design in the bench: one `PoolDO` for every backend, or cells of backends, one `PoolDO` each (issue 38). */
export type PoolDesign = "single" | "sharded";

/** The simulated backends' model (their heartbeats say "sim"). */
export const SIM_MODEL = "sim";

/**
 * Which pool object each call of a run goes to: a backend's beats to its cell's object, a turn's
 * placement to its cells in `cellOrder` (the edge's rule: weighted rendezvous of its prefix key),
 * its note to the cell that placed it. The single design is one cell holding every backend, so
 * both designs take the same code path. Objects are named `<run>/<cell>` so runs do not collide.
 *
 * @example
 * const cells = poolCells("sharded", "pool-64-1", sims, 32); // cells "pool" and "pool-1"
 * cells.poolOf("http://sim-40.bench:8080"); // "pool-64-1/pool-1"
 * cells.order("conv-1-2"); // ["pool-64-1/pool-1", "pool-64-1/pool"]
 */
export interface PoolCells {
  design: PoolDesign;
  /** Every object's name, the first cell's first. */
  pools: string[];
  /** The object backend `url` beats into. */
  poolOf(url: string): string;
  /** The objects a turn under prefix key `key` tries, in order. */
  order(key: string): string[];
  map: CellMap;
}

/** The run's cells over `backends` (in order): `cellBackends` at most a cell when sharded, one cell when single. */
export function poolCells(design: PoolDesign, run: string, backends: readonly { id: string; url: string }[], cellBackends: number): PoolCells {
  let map = EMPTY_CELL_MAP;
  const per = design === "single" ? Number.POSITIVE_INFINITY : cellBackends;
  const cellOfUrl = new Map<string, string>();
  for (const b of backends) {
    const placed = assignBackend(map, { id: b.id, url: b.url, model: SIM_MODEL }, per);
    map = placed.map;
    cellOfUrl.set(b.url, `${run}/${placed.cell}`);
  }
  const pools = map.cells.length > 0 ? map.cells.map((c) => `${run}/${c.name}`) : [`${run}/pool`];
  const orders = new Map<string, string[]>();
  return {
    design,
    pools,
    map,
    poolOf: (url) => cellOfUrl.get(url) ?? pools[0]!,
    order: (key) => {
      let o = orders.get(key);
      if (!o) orders.set(key, (o = cellOrder(map, { key, model: SIM_MODEL }).map((c) => `${run}/${c}`)));
      return o;
    },
  };
}
