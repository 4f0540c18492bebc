import { SECRET_HEADER } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import { edgeSettings } from "../../durable-objects/settings";

/** The model the local backend pool serves by default. */
export const DEFAULT_MODEL_ID = "demo-llama-random";

const TTL_MS = 30_000;
let cache: { at: number; key: string; models: string[] } | undefined;

/**
 * The models the configured backends serve (their `/v1/models`), cached for 30 s per isolate;
 * the default model id when none answers.
 *
 * @example const ids = await servedModels(env); // ["demo-llama-random"]
 */
export async function servedModels(env: Env): Promise<string[]> {
  const targets = edgeSettings(env).backends;
  const key = targets.map((t) => t.url).join(",");
  if (cache && cache.key === key && Date.now() - cache.at < TTL_MS) return cache.models;
  const lists = await Promise.all(
    targets.map(async (t) => {
      try {
        const res = await fetch(`${t.url}${ROUTES.backend.models}`, { headers: { [SECRET_HEADER]: t.secret }, signal: AbortSignal.timeout(3000) });
        if (!res.ok) return [];
        const body = (await res.json()) as { data?: { id?: unknown }[] };
        return (body.data ?? []).map((m) => m.id).filter((id): id is string => typeof id === "string");
      } catch {
        return [];
      }
    }),
  );
  const models = [...new Set(lists.flat())];
  if (models.length === 0) return [DEFAULT_MODEL_ID];
  cache = { at: Date.now(), key, models };
  return models;
}
