import { poolOf, type PoolBackend } from "./pool-do";
import { ViewCache } from "./view-cache";

/**
 * The pool's view (`PoolDO.view`: registered and static backends), shared by every trajectory
 * object and edge route running in this isolate for `ttlMs` (POOL_VIEW_TTL_MS, 1 s by default),
 * so that a sessionless request, whose trajectory object is new and has no view of its own, makes
 * one pool call on its hot path (`place`) instead of two. A failed call is not kept. Per pool
 * namespace (one per environment), so stacks in one process never see each other's pools.
 *
 * @example const backends = routedBackends(await cachedPoolView(env, settings.poolViewTtlMs), settings.backendSecret);
 */
export function cachedPoolView(env: Env, ttlMs: number): Promise<PoolBackend[]> {
  let cache = caches.get(env.POOL);
  if (!cache) caches.set(env.POOL, (cache = new ViewCache(() => poolOf(env).view())));
  return cache.get(ttlMs);
}

const caches = new WeakMap<object, ViewCache<PoolBackend[]>>();
