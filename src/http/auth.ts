import type { MiddlewareHandler } from "hono";
import { ProtocolError } from "../../protocol";
import { edgeSettings } from "../../durable-objects/settings";
import { hmacSha256Hex, sha256Hex } from "../../protocol/hex";
import { errorResponse } from "./errors";
import { INSPECT_COOKIE, isInspectorRequest, readCookie, sessionCookie, sessionToken, verifySessionToken, withoutKey } from "../inspect/session";

/** The key accepted for tenant `local` when API_KEYS is not configured (local development). */
export const LOCAL_DEV_KEY = "sk-local-dev";
export const LOCAL_DEV_TENANT = "local";

export type AuthVariables = { tenant: string; cacheSalt: string };

/**
 * API keys mapped to tenants, sent as `Authorization: Bearer <key>` or (Anthropic's way)
 * `x-api-key: <key>`, on any route; the bearer wins when both come. Keys are never stored or
 * compared in clear: the presented key's SHA-256 digest is looked up in API_KEYS
 * (`{"<sha256 hex>": "<tenant>"}`). Sets the tenant and its block-hash salt,
 * HMAC-SHA-256(CACHE_SALT_SECRET, tenant), on the context.
 *
 * The inspector's GET routes (and only those) also take a browser's session cookie, and
 * `?key=<key>`, which answers a 303 to the same URL without the key and sets that cookie
 * (`src/inspect/session.ts`).
 *
 * @example tenantRoutes.use(auth());
 */
export function auth(): MiddlewareHandler<{ Bindings: Env; Variables: AuthVariables }> {
  return async (c, next) => {
    const key = /^Bearer\s+(\S+)$/i.exec(c.req.header("authorization") ?? "")?.[1] ?? c.req.header("x-api-key");
    let tenant: string | undefined;
    if (key !== undefined) {
      tenant = (await keyTable(c.env)).get(await sha256Hex(key));
      if (!tenant) return errorResponse(c, new ProtocolError("unauthorized", "invalid API key"));
    } else if (isInspectorRequest(c.req.method, c.req.path)) {
      const queryKey = c.req.query("key");
      if (queryKey !== undefined) {
        const digest = await sha256Hex(queryKey);
        tenant = (await keyTable(c.env)).get(digest);
        if (!tenant) return errorResponse(c, new ProtocolError("unauthorized", "invalid API key"));
        const token = await sessionToken({ secret: edgeSecret(c.env), tenant, keyDigest: digest, nowS: Date.now() / 1000 });
        const secure = new URL(c.req.url).protocol === "https:";
        return new Response(null, {
          status: 303,
          headers: { location: withoutKey(c.req.url), "set-cookie": sessionCookie({ tenant, token, secure }), "cache-control": "no-store", "referrer-policy": "no-referrer" },
        });
      }
      const token = readCookie(c.req.header("cookie"), INSPECT_COOKIE);
      if (token === undefined) {
        return errorResponse(c, new ProtocolError("unauthorized", "missing API key: send Authorization: Bearer <key>, or open the inspector page once with ?key=<key>"));
      }
      const table = await keyTable(c.env);
      const digestsOf = (t: string) => [...table].filter(([, name]) => name === t).map(([digest]) => digest);
      tenant = (await verifySessionToken({ secret: edgeSecret(c.env), token, digestsOf, nowS: Date.now() / 1000 })) ?? undefined;
      if (!tenant) return errorResponse(c, new ProtocolError("unauthorized", "inspector session expired or invalid: open the page again with ?key=<key>"));
    } else {
      return errorResponse(c, new ProtocolError("unauthorized", "missing API key: send Authorization: Bearer <key> or x-api-key: <key>"));
    }
    c.set("tenant", tenant);
    c.set("cacheSalt", await tenantSalt(c.env, tenant));
    await next();
  };
}

let cached: { source: string; table: Map<string, string> } | undefined;

async function keyTable(env: Env): Promise<Map<string, string>> {
  const source = edgeSettings(env).apiKeys;
  if (cached?.source === source) return cached.table;
  let table: Map<string, string>;
  if (source.trim() === "") {
    table = new Map([[await sha256Hex(LOCAL_DEV_KEY), LOCAL_DEV_TENANT]]);
  } else {
    const parsed = JSON.parse(source) as Record<string, unknown>;
    table = new Map(
      Object.entries(parsed).map(([digest, tenant]) => {
        if (!/^[0-9a-f]{64}$/.test(digest) || typeof tenant !== "string" || !/^[A-Za-z0-9_-]{1,64}$/.test(tenant)) {
          throw new Error("API_KEYS must map SHA-256 hex digests to tenant names ([A-Za-z0-9_-]{1,64})");
        }
        return [digest, tenant];
      }),
    );
  }
  cached = { source, table };
  return table;
}

/** The secret behind tenant salts and inspector sessions (each MACs its own message prefix). */
function edgeSecret(env: Env): string {
  return edgeSettings(env).saltSecret;
}

/**
 * A tenant's block-hash salt, HMAC-SHA-256(CACHE_SALT_SECRET, tenant): what `auth` sets as
 * `cacheSalt` (a Responses WebSocket's turns, which run past the key check, derive it again).
 *
 * @example const cacheSalt = await tenantSalt(env, "local");
 */
export async function tenantSalt(env: Env, tenant: string): Promise<string> {
  return hmacSha256Hex(edgeSecret(env), `tenant:${tenant}`);
}
