import { ProtocolError } from "../../protocol";

/** The `Idempotency-Key` header: 1-256 characters, or absent. */
export function idempotencyKey(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  if (header.length === 0 || header.length > 256) throw new ProtocolError("invalid_request", "Idempotency-Key must be 1-256 characters");
  return header;
}
