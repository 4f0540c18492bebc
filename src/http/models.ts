import { SECRET_HEADER } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import { poolOf } from "../../durable-objects/pool/pool-do";
import { edgeSettings } from "../../durable-objects/settings";

/** The model the local backend pool serves by default. */
export const DEFAULT_MODEL_ID = "demo-llama-random";

/**
 * How long a model list is reused (per isolate). Short: a list must not outlive its backends
 * going down by more than this (a registered backend counts as down POOL_DOWN_AFTER_MS after its
 * last heartbeat, a static one as soon as it stops answering its `/v1/models`).
 */
export const MODELS_TTL_MS = 2000;
/** How long a static backend may take to answer its `/v1/models`. */
const PROBE_TIMEOUT_MS = 3000;

let cache: { at: number; key: string; models: string[] } | undefined;

/**
 * The models that live backends serve, from the pool's view (`PoolDO.view`): a registered
 * backend that is up serves the model of its last heartbeat; a static one (BACKEND_URLS, which
 * the pool always counts as up) serves what its `/v1/models` answers, and nothing when it does not
 * answer. Empty while no backend is live. Cached for MODELS_TTL_MS per isolate.
 *
 * @example const ids = await servedModels(env); // ["demo-llama-random"], or [] while no backend is up
 */
export async function servedModels(env: Env): Promise<string[]> {
  const settings = edgeSettings(env);
  const key = settings.backends.map((t) => t.url).join(",");
  if (cache && cache.key === key && Date.now() - cache.at < MODELS_TTL_MS) return cache.models;
  const up = (await poolOf(env).view()).filter((b) => b.up);
  const lists = await Promise.all(up.map((b) => (b.source === "registered" ? [b.model] : probeModels(b.url, settings.backendSecret))));
  const models = [...new Set(lists.flat().filter((id) => id.length > 0))];
  cache = { at: Date.now(), key, models };
  return models;
}

/** A backend's `/v1/models` ids; none when it does not answer in time or answers an error. */
async function probeModels(url: string, secret: string): Promise<string[]> {
  try {
    const res = await fetch(`${url}${ROUTES.backend.models}`, { headers: { [SECRET_HEADER]: secret }, signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) });
    if (!res.ok) {
      await res.body?.cancel();
      return [];
    }
    const body = (await res.json()) as { data?: { id?: unknown }[] };
    return (body.data ?? []).map((m) => m.id).filter((id): id is string => typeof id === "string");
  } catch {
    return [];
  }
}
