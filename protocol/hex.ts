import { timingSafeEqual } from "node:crypto";

/**
 * Hex digests as both sides write them: block hashes, prefix keys, request fingerprints, API-key
 * digests and MACs are lowercase hex of their bytes. Web Crypto, and node:crypto's
 * `timingSafeEqual` (workerd with nodejs_compat, and Node 20).
 *
 * @example await sha256Hex("sk-local-dev") // "4f1c...", 64 characters
 */
function toHex(bytes: ArrayBuffer | Uint8Array): string {
  const view = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  let out = "";
  for (const b of view) out += b.toString(16).padStart(2, "0");
  return out;
}

/** SHA-256 of the UTF-8 text, as 64 hex characters. */
export async function sha256Hex(text: string): Promise<string> {
  return toHex(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
}

/** HMAC-SHA-256(secret, message), as 64 hex characters. */
export async function hmacSha256Hex(secret: string, message: string): Promise<string> {
  const key = await crypto.subtle.importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return toHex(await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(message)));
}

/**
 * Whether a presented secret equals the expected one, in constant time: both are hashed
 * (SHA-256) and the two 32-byte digests compared with `timingSafeEqual`, so neither how much of a
 * guess was right nor its length shows in the time taken. The one compare for shared secrets and
 * MACs (backend routes, the edge's pool routes, inspector sessions).
 *
 * @example await secretsEqual(req.header("x-agent-edge-secret") ?? "", secret) // true or false
 */
export async function secretsEqual(given: string, expected: string): Promise<boolean> {
  const [a, b] = await Promise.all([given, expected].map(async (s) => new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(s)))));
  return timingSafeEqual(a!, b!);
}
