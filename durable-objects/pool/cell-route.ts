import type { Heartbeat } from "../../protocol/messages";
import type { EdgeSettings } from "../settings";
import { cellNames, cellOfBackend, cellOfUrl, cellOrder, EMPTY_CELL_MAP, FIRST_CELL, type CellMap } from "./cells";
import { directoryOf } from "./directory-do";
import { poolCell, type PoolBackend } from "./pool-do";
import { cachedPoolView } from "./pool-view";
import { ViewCache } from "./view-cache";

/**
 * How the edge finds a pool cell (cells.ts): the directory's map, cached in this isolate for
 * DIRECTORY_TTL_MS (the map changes only when a backend joins or leaves for good), asked again
 * at once for a backend it does not name. A heartbeat goes to its backend's cell; a trajectory's
 * placement to the first cell of `cellOrder` whose view has a backend taking placements.
 */

/** How long an isolate keeps the directory's map. */
export const DIRECTORY_TTL_MS = 5000;

const maps = new WeakMap<object, ViewCache<CellMap>>();

/** The directory's map as this isolate has it (at most DIRECTORY_TTL_MS old; empty where no directory is bound). */
export function cachedCellMap(env: Env): Promise<CellMap> {
  if (!env.POOL_DIRECTORY) return Promise.resolve(EMPTY_CELL_MAP);
  return mapCache(env).get(DIRECTORY_TTL_MS);
}

function mapCache(env: Env): ViewCache<CellMap> {
  let cache = maps.get(env.POOL_DIRECTORY);
  if (!cache) maps.set(env.POOL_DIRECTORY, (cache = new ViewCache(() => directoryOf(env).map())));
  return cache;
}

/** The cell a backend's heartbeat goes to: its cell in the cached map (at its url), else the one the directory assigns it. */
export async function heartbeatCell(env: Env, h: Heartbeat): Promise<string> {
  if (!env.POOL_DIRECTORY) return FIRST_CELL;
  const map = await cachedCellMap(env);
  const known = cellOfBackend(map, h.id);
  // Known at this url: no call. (At a new url, the directory records it, so pins to it find its cell.)
  if (known !== undefined && cellOfUrl(map, h.url) === known) return known;
  const assigned = await directoryOf(env).assign({ id: h.id, url: h.url, model: h.model });
  mapCache(env).put(assigned.map);
  return assigned.cell;
}

/**
 * The cell a trajectory's turn is placed in, with its cached view: the first cell of `cellOrder`
 * (its pinned backend's, else by its prefix key) with a registered backend up and taking
 * placements, else the first with a static one (in every cell's view), else the first. `key` is
 * asked only when the pool has several cells and the pinned backend's cell (when it has one) has
 * no backend taking placements: a pinned trajectory's turn computes no key here.
 *
 * @example const { cell, view } = await placementCell(env, settings, { key: () => prefixKey(base), model, pinned });
 */
export async function placementCell(
  env: Env,
  settings: EdgeSettings,
  p: { key: () => Promise<string>; model?: string | undefined; pinned?: string | null | undefined },
): Promise<{ cell: string; view: PoolBackend[] }> {
  const map = await cachedCellMap(env);
  const viewOf = async (cell: string) => ({ cell, view: await cachedPoolView(env, settings.poolViewTtlMs, cell) });
  if (map.cells.length <= 1) return viewOf(map.cells[0]?.name ?? FIRST_CELL);
  // cellOrder puts the pinned backend's cell first: tried before the key is computed.
  const pinnedCell = p.pinned ? cellOfUrl(map, p.pinned) : undefined;
  const pinned = pinnedCell !== undefined ? await viewOf(pinnedCell) : undefined;
  if (pinned && takesPlacements(pinned.view) === "registered") return pinned;
  let first = pinned;
  let withStatic = pinned && takesPlacements(pinned.view) === "static" ? pinned : undefined;
  for (const cell of cellOrder(map, { key: await p.key(), model: p.model, pinned: p.pinned })) {
    if (cell === pinnedCell) continue;
    const at = await viewOf(cell);
    first ??= at;
    const takes = takesPlacements(at.view);
    if (takes === "registered") return at;
    if (takes === "static") withStatic ??= at;
  }
  return withStatic ?? first!;
}

/**
 * Whether a cell's view has a backend up and taking placements: a registered one of its own, else
 * only a static BACKEND_URLS one (in every cell's view: a cell whose own backends are all down
 * is passed over for one that has some), else none.
 */
function takesPlacements(view: readonly PoolBackend[]): "registered" | "static" | undefined {
  const taking = view.filter((b) => b.up && !b.draining);
  return taking.some((b) => b.source === "registered") ? "registered" : taking.length > 0 ? "static" : undefined;
}

/**
 * Every cell's view, as one list (a static backend, in every cell's view, once): what the model
 * list and the pool route show. Each cell's view as cached in this isolate, or asked now (`fresh`).
 */
export async function fleetView(env: Env, settings: EdgeSettings, fresh = false): Promise<PoolBackend[]> {
  const map = await cachedCellMap(env);
  const names = cellNames(map);
  const views = await Promise.all(names.map((cell) => (fresh ? poolCell(env, cell).view() : cachedPoolView(env, settings.poolViewTtlMs, cell))));
  const byUrl = new Map<string, PoolBackend>();
  for (const b of views.flat()) if (!byUrl.has(b.url) || (b.up && !byUrl.get(b.url)!.up)) byUrl.set(b.url, b);
  return [...byUrl.values()];
}
