import type { MiddlewareHandler } from "hono";
import { ProtocolError } from "../protocol";
import type { EdgeEnv } from "../durable-objects/edge-env";
import { DEV_SECRET } from "../durable-objects/edge-env";
import { errorResponse } from "./errors";

/** The key accepted for tenant `local` when API_KEYS is not configured (local development). */
export const LOCAL_DEV_KEY = "sk-local-dev";
export const LOCAL_DEV_TENANT = "local";

export type AuthVariables = { tenant: string; cacheSalt: string };

/**
 * Bearer API keys mapped to tenants. Keys are never stored or compared in clear: the presented
 * key's SHA-256 digest is looked up in API_KEYS (`{"<sha256 hex>": "<tenant>"}`). Sets the
 * tenant and its block-hash salt, HMAC-SHA-256(CACHE_SALT_SECRET, tenant), on the context.
 *
 * @example app.use("/v1/*", auth());
 */
export function auth(): MiddlewareHandler<{ Bindings: EdgeEnv; Variables: AuthVariables }> {
  return async (c, next) => {
    const header = c.req.header("authorization") ?? "";
    const m = /^Bearer\s+(\S+)$/i.exec(header);
    if (!m) return errorResponse(c, new ProtocolError("unauthorized", "missing API key: send Authorization: Bearer <key>"));
    const tenant = (await keyTable(c.env)).get(await sha256Hex(m[1]!));
    if (!tenant) return errorResponse(c, new ProtocolError("unauthorized", "invalid API key"));
    c.set("tenant", tenant);
    c.set("cacheSalt", await tenantSalt(c.env, tenant));
    await next();
  };
}

let cached: { source: string; table: Map<string, string> } | undefined;

async function keyTable(env: EdgeEnv): Promise<Map<string, string>> {
  const source = env.API_KEYS ?? "";
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

export async function sha256Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

async function tenantSalt(env: EdgeEnv, tenant: string): Promise<string> {
  const secret = env.CACHE_SALT_SECRET ?? env.AGENT_EDGE_SECRET ?? DEV_SECRET;
  const key = await crypto.subtle.importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`tenant:${tenant}`));
  return [...new Uint8Array(mac)].map((b) => b.toString(16).padStart(2, "0")).join("");
}
