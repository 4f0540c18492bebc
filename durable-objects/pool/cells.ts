import { rendezvousOrder } from "../../protocol/rendezvous";

/**
 * Pool cells: the pool is sharded into cells of backends, each one `PoolDO` with its own registry,
 * block index and text-level prefix index, so no object sees more than a cell's beats and
 * placements. The directory (`PoolDirectoryDO`) keeps which backend is in which cell (a
 * `CellMap`); every edge isolate caches it (cell-route.ts). This module is its pure rules:
 *
 * - a backend joins a cell of its model with room (fewest backends first), else opens a new cell;
 *   a cell holds at most `cellBackends` (POOL_CELL_BACKENDS, 32: where one object's index still
 *   matches an exact one, docs/benchmarks.md "Pool at scale");
 * - cells split when they hold more than that (the setting was lowered) and two cells of a model
 *   merge when together they fill at most MERGE_FILL of one (backends went away): the smaller
 *   cell's backends move, and their next beats register them in the new cell (its index asks
 *   them for a snapshot), while their trajectories stay pinned to the backends themselves;
 * - a trajectory's cell is its pinned backend's (so a trajectory and its forks stay with their
 *   KV), else its prefix key's by weighted rendezvous hashing over the model's cells (shared
 *   prompts meet in one cell; a cell draws keys in proportion to its backends).
 *
 * The first cell is named "pool": a pool of one cell is the single pool object as before.
 *
 * @example
 * let map = EMPTY_CELL_MAP;
 * ({ map } = assignBackend(map, { id: "b1", url: "http://b1", model: "m" }, 32)); // b1 in "pool"
 * cellOrder(map, { key: "prefix-key", model: "m" }); // ["pool"]
 */

/** A backend in a cell. */
export interface CellBackend {
  id: string;
  url: string;
}

/** One cell: its object's name, the model its backends serve and the backends in it. */
export interface Cell {
  name: string;
  model: string;
  backends: CellBackend[];
}

/** The directory's map: every cell, and a version that grows with every change. */
export interface CellMap {
  version: number;
  cells: Cell[];
}

/** A backend the directory moved from one cell to another. */
export interface CellMove {
  id: string;
  from: string;
  to: string;
}

/** The first cell's name: the pool object every edge used before cells. */
export const FIRST_CELL = "pool";
/** Two cells of a model merge when together they hold at most this share of one cell's backends. */
export const MERGE_FILL = 0.75;
/** The map before any backend registered. */
export const EMPTY_CELL_MAP: CellMap = { version: 0, cells: [] };

/** Every cell's name: `["pool"]` while the map has no cell (the static backends' pool). */
export function cellNames(map: CellMap): string[] {
  return map.cells.length === 0 ? [FIRST_CELL] : map.cells.map((c) => c.name);
}

/** The cell backend `id` is in (undefined: none). */
export function cellOfBackend(map: CellMap, id: string): string | undefined {
  return lookupOf(map).byId.get(id);
}

/** The cell of the backend at `url` (undefined: none). */
export function cellOfUrl(map: CellMap, url: string): string | undefined {
  return lookupOf(map).byUrl.get(url);
}

/**
 * Per map, its backends' cells by id and by url, built once: a map is never changed once made
 * (every rule here answers a new one), and the edge asks it on every beat and turn.
 */
const lookups = new WeakMap<CellMap, { byId: Map<string, string>; byUrl: Map<string, string> }>();

function lookupOf(map: CellMap): { byId: Map<string, string>; byUrl: Map<string, string> } {
  let lookup = lookups.get(map);
  if (!lookup) {
    lookup = { byId: new Map(), byUrl: new Map() };
    for (const c of map.cells) for (const b of c.backends) lookup.byId.set(b.id, c.name), lookup.byUrl.set(b.url, c.name);
    lookups.set(map, lookup);
  }
  return lookup;
}

/**
 * Puts a backend in a cell: the one it is in (its url refreshed), else the cell of its model with
 * the fewest backends below `cellBackends`, else a new cell. Answers the (maybe new) map and the cell.
 */
export function assignBackend(map: CellMap, b: CellBackend & { model: string }, cellBackends: number): { map: CellMap; cell: string } {
  const current = cellOfBackend(map, b.id);
  if (current !== undefined) {
    const cell = map.cells.find((c) => c.name === current)!;
    if (cell.backends.some((x) => x.id === b.id && x.url === b.url)) return { map, cell: current };
    return { map: withCells(map, map.cells.map((c) => (c.name === current ? { ...c, backends: c.backends.map((x) => (x.id === b.id ? { id: b.id, url: b.url } : x)) } : c))), cell: current };
  }
  const room = map.cells.filter((c) => c.model === b.model && c.backends.length < cellBackends).sort((x, y) => x.backends.length - y.backends.length || (x.name < y.name ? -1 : 1))[0];
  const name = room?.name ?? newCellName(map);
  const entry = { id: b.id, url: b.url };
  const cells = room ? map.cells.map((c) => (c.name === name ? { ...c, backends: [...c.backends, entry] } : c)) : [...map.cells, { name, model: b.model, backends: [entry] }];
  return { map: withCells(map, cells), cell: name };
}

/** The map without backends `ids` (cells left empty are dropped). */
export function forgetBackends(map: CellMap, ids: ReadonlySet<string>): CellMap {
  if (!map.cells.some((c) => c.backends.some((b) => ids.has(b.id)))) return map;
  const cells = map.cells.map((c) => ({ ...c, backends: c.backends.filter((b) => !ids.has(b.id)) })).filter((c) => c.backends.length > 0);
  return withCells(map, cells);
}

/**
 * Splits cells over `cellBackends` (their last backends by id move to a cell of the model with
 * room, else a new one) and merges a model's two smallest cells while together they hold at most
 * MERGE_FILL x `cellBackends` (the smaller one's backends move). Answers the map and the moves.
 */
export function rebalance(map: CellMap, cellBackends: number): { map: CellMap; moves: CellMove[] } {
  let cells = map.cells.map((c) => ({ ...c, backends: [...c.backends].sort((x, y) => (x.id < y.id ? -1 : x.id > y.id ? 1 : 0)) }));
  const moves: CellMove[] = [];
  for (const cell of cells) {
    while (cell.backends.length > cellBackends) {
      const b = cell.backends.pop()!;
      let to = cells.filter((c) => c.model === cell.model && c.name !== cell.name && c.backends.length < cellBackends).sort((x, y) => x.backends.length - y.backends.length)[0];
      if (!to) cells.push((to = { name: newCellName({ version: 0, cells }), model: cell.model, backends: [] }));
      to.backends.push(b);
      moves.push({ id: b.id, from: cell.name, to: to.name });
    }
  }
  for (;;) {
    const pair = mergeablePair(cells, cellBackends);
    if (!pair) break;
    const [small, big] = pair;
    for (const b of small.backends) moves.push({ id: b.id, from: small.name, to: big.name });
    big.backends.push(...small.backends);
    cells = cells.filter((c) => c !== small);
  }
  return moves.length === 0 ? { map, moves } : { map: withCells(map, cells), moves };
}

/**
 * The cells a trajectory's placement tries, in order: its pinned backend's cell first (`pinned`:
 * a url), then the cells of `model` (all cells when no cell serves it) by weighted rendezvous of
 * `key` (weights: backends per cell). `["pool"]` while the directory knows no cell.
 */
export function cellOrder(map: CellMap, p: { key: string; model?: string | undefined; pinned?: string | null | undefined }): string[] {
  if (map.cells.length === 0) return [FIRST_CELL];
  const ofModel = map.cells.filter((c) => c.model === p.model);
  const candidates = ofModel.length > 0 ? ofModel : map.cells;
  const ranked = candidates.length === 1 ? candidates : rendezvousOrder(candidates, p.key, (c) => c.name, (c) => c.backends.length);
  const names = ranked.map((c) => c.name);
  const pinnedCell = p.pinned ? cellOfUrl(map, p.pinned) : undefined;
  return pinnedCell === undefined ? names : [pinnedCell, ...names.filter((n) => n !== pinnedCell)];
}

function mergeablePair(cells: readonly Cell[], cellBackends: number): [Cell, Cell] | undefined {
  for (const model of new Set(cells.map((c) => c.model))) {
    const mine = cells.filter((c) => c.model === model).sort((x, y) => x.backends.length - y.backends.length || (x.name < y.name ? 1 : -1));
    if (mine.length >= 2 && mine[0]!.backends.length + mine[1]!.backends.length <= MERGE_FILL * cellBackends) return [mine[0]!, mine[1]!];
  }
  return undefined;
}

/** "pool" when free, else the first free "pool-<n>". */
function newCellName(map: CellMap): string {
  const taken = new Set(map.cells.map((c) => c.name));
  if (!taken.has(FIRST_CELL)) return FIRST_CELL;
  for (let n = 1; ; n++) if (!taken.has(`${FIRST_CELL}-${n}`)) return `${FIRST_CELL}-${n}`;
}

function withCells(map: CellMap, cells: Cell[]): CellMap {
  return { version: map.version + 1, cells };
}
