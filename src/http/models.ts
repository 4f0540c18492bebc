import { SECRET_HEADER } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import { fleetView } from "../../durable-objects/pool/cell-route";
import { edgeSettings } from "../../durable-objects/settings";
import { limit, mergeModels, type ServedModel } from "./model-list";

export { modelListEntry, type ServedModel } from "./model-list";

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

let cache: { at: number; key: string; models: ServedModel[] } | undefined;

/**
 * The models that live backends serve, from the pool's view (`PoolDO.view`): a registered
 * backend that is up serves the model of its last heartbeat; a static one (BACKEND_URLS, which
 * the pool always counts as up) serves what its `/v1/models` answers, and nothing when it does not
 * answer. Empty while no backend is live. Cached for MODELS_TTL_MS per isolate.
 *
 * @example const ids = await servedModels(env); // ["demo-llama-random"], or [] while no backend is up
 */
export async function servedModels(env: Env): Promise<string[]> {
  return (await servedModelList(env)).map((m) => m.id);
}

/**
 * The served models with their limits: a static backend's `/v1/models` entries keep their
 * `context_length` and `max_output_tokens`; a registered backend's heartbeat names only its model,
 * so its entry has none. A model served by several backends has the smallest of each limit
 * reported. Same cache as `servedModels`.
 *
 * @example (await servedModelList(env))[0] // { id: "demo-llama-random", contextLength: 2048, maxOutputTokens: 2048 }
 */
export async function servedModelList(env: Env): Promise<ServedModel[]> {
  const settings = edgeSettings(env);
  const key = settings.backends.map((t) => t.url).join(",");
  if (cache && cache.key === key && Date.now() - cache.at < MODELS_TTL_MS) return cache.models;
  const up = (await fleetView(env, settings)).filter((b) => b.up);
  const lists = await Promise.all(up.map((b) => (b.source === "registered" ? [{ id: b.model }] : probeModels(b.url, settings.backendSecret))));
  const models = mergeModels(lists.flat());
  cache = { at: Date.now(), key, models };
  return models;
}

/** A backend's `/v1/models` entries (id and limits); none when it does not answer in time or answers an error. */
async function probeModels(url: string, secret: string): Promise<ServedModel[]> {
  try {
    const res = await fetch(`${url}${ROUTES.backend.models}`, { headers: { [SECRET_HEADER]: secret }, signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) });
    if (!res.ok) {
      await res.body?.cancel();
      return [];
    }
    const body = (await res.json()) as { data?: { id?: unknown; context_length?: unknown; max_output_tokens?: unknown }[] };
    return (body.data ?? []).flatMap((m) => {
      if (typeof m.id !== "string") return [];
      const contextLength = limit(m.context_length);
      const maxOutputTokens = limit(m.max_output_tokens);
      return [{ id: m.id, ...(contextLength !== undefined ? { contextLength } : {}), ...(maxOutputTokens !== undefined ? { maxOutputTokens } : {}) }];
    });
  } catch {
    return [];
  }
}
