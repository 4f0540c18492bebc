import { poolCell, type PoolBackend } from "./pool-do";
import { ViewCache } from "./view-cache";

/**
 * A pool cell's view (`PoolDO.view`: its registered backends and the static ones), shared by every
 * trajectory object and edge route running in this isolate for `ttlMs` (POOL_VIEW_TTL_MS, 1 s by
 * default), so that a sessionless request, whose trajectory object is new and has no view of its
 * own, makes one pool call on its hot path (`place`) instead of two. A failed call is not kept.
 * Per pool namespace (one per environment), so stacks in one process never see each other's pools.
 *
 * @example const backends = routedBackends(await cachedPoolView(env, settings.poolViewTtlMs, cell), settings.backendSecret);
 */
export function cachedPoolView(env: Env, ttlMs: number, cell = "pool"): Promise<PoolBackend[]> {
  let cells = caches.get(env.POOL);
  if (!cells) caches.set(env.POOL, (cells = new Map()));
  let cache = cells.get(cell);
  if (!cache) cells.set(cell, (cache = new ViewCache(() => poolCell(env, cell).view())));
  return cache.get(ttlMs);
}

const caches = new WeakMap<object, Map<string, ViewCache<PoolBackend[]>>>();
