import { ProtocolError } from "../protocol";

/**
 * The tenant named in a `/v1/tenants/{tenant}/...` URL, when it is the API key's own; any other
 * tenant's URL is answered as if nothing were there (404), so keys cannot probe other tenants.
 *
 * @example const tenant = ownTenant(c.req.param("tenant"), c.get("tenant"));
 */
export function ownTenant(inUrl: string, authenticated: string): string {
  if (inUrl !== authenticated) throw new ProtocolError("not_found", "no such trajectory for this API key");
  return inUrl;
}
