import { ProtocolError } from "../../protocol";

/**
 * The tenant named in a `/v1/tenants/{tenant}/...` URL, when it is the API key's own; any other
 * tenant's URL is answered as if nothing were there (404), so keys cannot probe other tenants.
 *
 * `inUrl` is the `:tenant` of the tenant group's base path (undefined outside it: not found).
 *
 * @example const tenant = ownTenant(c.req.param("tenant"), c.get("tenant"));
 */
export function ownTenant(inUrl: string | undefined, authenticated: string): string {
  if (inUrl === undefined || inUrl !== authenticated) throw new ProtocolError("not_found", "no such trajectory for this API key");
  return inUrl;
}
