import { hmacSha256Hex, secretsEqual } from "../../protocol/hex";

/**
 * Browser access to the inspector. A browser cannot send `Authorization: Bearer` when it
 * navigates, so an inspector page opened once with `?key=<API key>` answers a redirect to the
 * same URL without the key and sets a session cookie: HttpOnly, SameSite=Strict, Path
 * `/v1/tenants/<tenant>`, 12 hours. The cookie holds no key: `<tenant>.<expiry>.<mac>`, the
 * HMAC of tenant, expiry and the key's SHA-256 digest under the edge's secret, so removing the key
 * from API_KEYS ends its sessions. It is accepted only on the inspector's GET routes.
 */

export const INSPECT_COOKIE = "agent_edge_inspect";
export const SESSION_TTL_S = 12 * 60 * 60;

const INSPECTOR_PATH = /^\/v1\/tenants\/[^/]+\/(?:trajectories\/[^/]+\/)?inspect(?:\.json)?$/;

/** Whether a request may authenticate with the inspector cookie or `?key=`: GET/HEAD of an inspector route. */
export function isInspectorRequest(method: string, path: string): boolean {
  return (method === "GET" || method === "HEAD") && INSPECTOR_PATH.test(path);
}

/**
 * A session token for `tenant`, bound to the key's digest.
 *
 * @example const token = await sessionToken({ secret, tenant: "local", keyDigest, nowS: Date.now() / 1000 });
 */
export async function sessionToken(params: { secret: string; tenant: string; keyDigest: string; nowS: number }): Promise<string> {
  const exp = Math.floor(params.nowS) + SESSION_TTL_S;
  return `${params.tenant}.${exp}.${await mac(params.secret, params.tenant, exp, params.keyDigest)}`;
}

/** The tenant of a valid, unexpired token made with one of that tenant's key digests; null otherwise. */
export async function verifySessionToken(params: { secret: string; token: string; digestsOf: (tenant: string) => string[]; nowS: number }): Promise<string | null> {
  const m = /^([A-Za-z0-9_-]{1,64})\.(\d{1,12})\.([0-9a-f]{64})$/.exec(params.token);
  if (!m) return null;
  const [, tenant, expText, given] = m as unknown as [string, string, string, string];
  const exp = Number(expText);
  if (exp <= params.nowS) return null;
  for (const digest of params.digestsOf(tenant)) {
    if (await secretsEqual(given, await mac(params.secret, tenant, exp, digest))) return tenant;
  }
  return null;
}

/** The Set-Cookie value for a tenant's session (Secure over https). */
export function sessionCookie(params: { tenant: string; token: string; secure: boolean }): string {
  return `${INSPECT_COOKIE}=${params.token}; Path=/v1/tenants/${params.tenant}; Max-Age=${SESSION_TTL_S}; HttpOnly; SameSite=Strict${params.secure ? "; Secure" : ""}`;
}

/** A cookie's value from a Cookie header. */
export function readCookie(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? "").split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** The request's path and query without `key`, for the redirect that takes the key out of the URL. */
export function withoutKey(url: string): string {
  const u = new URL(url);
  u.searchParams.delete("key");
  return `${u.pathname}${u.search}`;
}

async function mac(secret: string, tenant: string, exp: number, keyDigest: string): Promise<string> {
  return hmacSha256Hex(secret, `inspect|${tenant}|${exp}|${keyDigest}`);
}
