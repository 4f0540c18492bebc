import { decodeLeaseResponse, decodeReleaseLeaseResponse, encode } from "../../protocol/codec";
import { MSGPACK_CONTENT_TYPE, SECRET_HEADER, type LeaseRequest, type LeaseResponse, type ReleaseLeaseRequest, type ReleaseLeaseResponse } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import type { BackendTarget } from "./backend-client";

/**
 * Asks a backend to hold a state's blocks (`POST /v1/leases`). Best effort: null on any failure (logged).
 *
 * @example const r = await requestLease(target, { stateId, ttlMs: 20_000 }, 2000);
 */
export async function requestLease(target: BackendTarget, req: LeaseRequest, timeoutMs: number): Promise<LeaseResponse | null> {
  const bytes = await post(target, ROUTES.backend.leases, req, timeoutMs);
  if (!bytes) return null;
  const r = decodeLeaseResponse(bytes);
  return r.ok ? r.value : null;
}

/**
 * Ends a lease (`POST /v1/leases/release`). Best effort: null on any failure (logged).
 *
 * @example await releaseLease(target, { stateId, expired: true }, 2000);
 */
export async function releaseLease(target: BackendTarget, req: ReleaseLeaseRequest, timeoutMs: number): Promise<ReleaseLeaseResponse | null> {
  const bytes = await post(target, ROUTES.backend.releaseLease, req, timeoutMs);
  if (!bytes) return null;
  const r = decodeReleaseLeaseResponse(bytes);
  return r.ok ? r.value : null;
}

async function post(target: BackendTarget, path: string, body: unknown, timeoutMs: number): Promise<Uint8Array | null> {
  try {
    const res = await fetch(`${target.url}${path}`, {
      method: "POST",
      headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: target.secret },
      body: encode(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const bytes = new Uint8Array(await res.arrayBuffer());
    if (res.ok) return bytes;
    console.error(`lease call ${path} to ${target.url} answered ${res.status}`);
    return null;
  } catch (e) {
    // Best effort (a lease only saves a re-prefill): logged, never the turn's failure.
    console.error(`lease call ${path} to ${target.url} failed:`, e);
    return null;
  }
}
