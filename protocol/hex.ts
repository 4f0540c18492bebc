/**
 * Hex digests as both sides write them: block hashes, prefix keys, request fingerprints, API-key
 * digests and MACs are lowercase hex of their bytes. Web Crypto only (workerd and Node 20).
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
 * Whether two strings are equal, in time that depends only on their lengths (shared secrets:
 * timing says nothing about how much of a guess was right).
 */
export function secretsEqual(a: string, b: string): boolean {
  const ea = new TextEncoder().encode(a);
  const eb = new TextEncoder().encode(b);
  let diff = ea.length ^ eb.length;
  for (let i = 0; i < Math.max(ea.length, eb.length); i++) diff |= (ea[i] ?? 0) ^ (eb[i] ?? 0);
  return diff === 0;
}
