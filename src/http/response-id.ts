import { ProtocolError } from "../../protocol";
import { checkTrajectoryId } from "./session-key";

const TOKEN_HEX = 32;

/** A fresh response token: 128 random bits, the unguessable part of a response id. */
export function responseToken(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(TOKEN_HEX / 2));
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * A Responses API id: `resp_<token><trajectory id, base64url>`. It names its trajectory (so any
 * edge isolate finds the object that stores it, with no index to ask) and its token (looked up
 * in that object, which is per tenant: another tenant's key reaches another object, and a 404).
 * A response that is not stored (`store: false` without a session) has the token only.
 *
 * @example responseId("0f...", "traj_1") // "resp_0f...dHJhal8x"
 */
export function responseId(token: string, trajectoryId: string | undefined): string {
  return `resp_${token}${trajectoryId === undefined ? "" : base64url(trajectoryId)}`;
}

/**
 * The token and trajectory of a response id; a malformed id, or one of a response that was
 * never stored, is a 404 `not_found` (as an unknown one is).
 *
 * @example parseResponseId(responseId(token, "traj_1")) // { token, trajectoryId: "traj_1" }
 */
export function parseResponseId(id: string): { token: string; trajectoryId: string } {
  const notFound = () => new ProtocolError("not_found", `no response ${JSON.stringify(id.slice(0, 200))}`);
  const m = /^resp_([0-9a-f]{32})([A-Za-z0-9_-]+)$/.exec(id);
  if (!m) throw notFound();
  let trajectoryId: string;
  try {
    trajectoryId = fromBase64url(m[2]!);
    checkTrajectoryId(trajectoryId);
  } catch {
    throw notFound();
  }
  return { token: m[1]!, trajectoryId };
}

function base64url(s: string): string {
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function fromBase64url(s: string): string {
  return atob(s.replace(/-/g, "+").replace(/_/g, "/"));
}
