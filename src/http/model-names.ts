import { ProtocolError } from "../../protocol";
import { edgeSettings, modelAliasesOf, type EdgeSettings, type EdgeVars, type ModelAliasList } from "../../durable-objects/settings";

/**
 * Which served model a request's `model` names. Agents send the names of their vendor's models
 * (`claude-sonnet-4-5-20250929`, `gpt-5-codex`); the edge maps them to what its backends serve.
 * The rules, first that applies:
 *
 *   1. no name (chat completions, Responses): the first served model (`DEFAULT_MODEL_ID` while none is);
 *   2. a served name: itself;
 *   3. an alias (MODEL_ALIASES): the tenant's own map, then `*`'s, each in its order; the first
 *      pattern that matches the whole name (`*` matches any run of characters) gives the model;
 *      one no backend serves is a 404 `unknown_model` naming the alias;
 *   4. exactly one model served, and the tenant not strict (STRICT_TENANTS): that model, whatever
 *      the name;
 *   5. no model served at all: the name as given (the turn then fails as it does without backends);
 *   6. else a 404 `unknown_model` naming the model and what is served.
 */

export interface ResolveModelParams {
  /** The request's `model` (undefined where the API lets it be absent). */
  requested: string | undefined;
  /** What live backends serve (`servedModels(env)`), in their order. */
  served: readonly string[];
  tenant: string;
  /** MODEL_ALIASES and STRICT_TENANTS as parsed; absent: read from `env`. */
  settings?: Pick<EdgeSettings, "modelAliases" | "modelAliasesRaw" | "strictTenants">;
  /** The Worker's env, when `settings` is not given (`edgeSettings(env)`). */
  env?: EdgeVars;
  /** The model when nothing is served and none is named (default `"demo-llama-random"`). */
  fallback?: string;
}

/**
 * The model id to ask the backends for, by the rules above.
 *
 * @example resolveModel({ requested: "claude-sonnet-4-5", served: ["qwen3-0.6b"], tenant: "acme", env: c.env }) // "qwen3-0.6b"
 */
export function resolveModel(p: ResolveModelParams): string {
  const { requested, served } = p;
  if (requested === undefined) return served[0] ?? p.fallback ?? "demo-llama-random";
  if (served.includes(requested)) return requested;
  const settings = p.settings ?? edgeSettings(p.env ?? {});
  const aliases = modelAliasesOf(settings);
  const alias = matchAlias(requested, aliases.get(p.tenant)) ?? matchAlias(requested, aliases.get("*"));
  if (alias) {
    if (served.length > 0 && !served.includes(alias.model)) {
      throw new ProtocolError("unknown_model", `model ${JSON.stringify(requested)} maps to ${JSON.stringify(alias.model)} (MODEL_ALIASES pattern ${JSON.stringify(alias.pattern)}), which no backend serves (served: ${served.join(", ")})`);
    }
    return alias.model;
  }
  const strict = isStrictTenant(settings, p.tenant);
  if (served.length === 1 && !strict) return served[0]!;
  if (served.length === 0) return requested;
  throw new ProtocolError(
    "unknown_model",
    `model ${JSON.stringify(requested)} is not served (served: ${served.join(", ")})${strict ? "; this tenant takes served names and MODEL_ALIASES only (STRICT_TENANTS)" : "; MODEL_ALIASES can map other names"}`,
  );
}

/**
 * Whether a tenant is strict (STRICT_TENANTS): exact model names or aliases only, and a Responses
 * request's tools this server cannot run refused instead of dropped.
 *
 * @example isStrictTenant(edgeSettings(env), "acme") // true when STRICT_TENANTS names acme
 */
export function isStrictTenant(settings: Pick<EdgeSettings, "strictTenants">, tenant: string): boolean {
  return settings.strictTenants.has(tenant);
}

/** The first alias whose pattern matches the whole name. */
function matchAlias(name: string, list: ModelAliasList | undefined): { pattern: string; model: string } | undefined {
  for (const [pattern, model] of list ?? []) if (globMatches(pattern, name)) return { pattern, model };
  return undefined;
}

/**
 * Whether `pattern` matches all of `name`: `*` matches any run of characters (none included),
 * everything else itself.
 *
 * @example globMatches("claude-*", "claude-opus-4-1") // true
 */
export function globMatches(pattern: string, name: string): boolean {
  const parts = pattern.split("*");
  if (parts.length === 1) return pattern === name;
  const first = parts[0]!;
  const last = parts.at(-1)!;
  if (name.length < first.length + last.length || !name.startsWith(first) || !name.endsWith(last)) return false;
  let at = first.length;
  const end = name.length - last.length;
  for (const middle of parts.slice(1, -1)) {
    const found = name.indexOf(middle, at);
    if (found < 0 || found + middle.length > end) return false;
    at = found + middle.length;
  }
  return true;
}
