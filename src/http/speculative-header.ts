import { ProtocolError } from "../../protocol/errors";

/** The request header that turns speculative decoding off for one turn (docs/edge.md, "Request headers"). */
export const SPECULATIVE_HEADER = "x-agent-edge-speculative";

/**
 * A turn's speculative-decoding opt-out from `x-agent-edge-speculative`: `off` -> false (the
 * backend neither drafts for the turn nor learns its reply into the tenant's suffix tree), `on`
 * or absent -> undefined (the backend's `--speculative` mode). Outputs are the same either way
 * (greedy identical, sampled from the same distribution); the opt-out is for measuring and for
 * replies a tenant wants kept out of its drafts. Any other value is a 400 naming the header.
 *
 * @example speculativeOptOut("off") // false
 */
export function speculativeOptOut(value: string | undefined): false | undefined {
  if (value === undefined || value === "on") return undefined;
  if (value === "off") return false;
  throw new ProtocolError("invalid_request", `${SPECULATIVE_HEADER}: must be "on" or "off"`);
}
