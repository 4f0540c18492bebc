/**
 * The test tenants of the workers tests. Shared by vitest.config.ts (Node), which puts only
 * the keys' SHA-256 digests into the API_KEYS binding, and the tests (workerd), which present
 * the keys in clear like a client would.
 */
export const TENANTS = {
  a: { name: "tenant-a", key: "sk-test-tenant-a-0123456789" },
  b: { name: "tenant-b", key: "sk-test-tenant-b-9876543210" },
  /** A tenant with safe canonicalization off (CANONICALIZE_OFF_TENANTS). */
  raw: { name: "tenant-raw", key: "sk-test-tenant-raw-5555555555" },
  /** A tenant whose session-less agents get derived trajectories (DERIVED_SESSIONS). */
  derived: { name: "tenant-derived", key: "sk-test-tenant-derived-7777777777" },
} as const;

/** Largest accepted request body in the workers tests (MAX_BODY_BYTES): 4 MiB. */
export const TEST_MAX_BODY_BYTES = 4 * 1024 * 1024;

/** A base URL where nothing listens (port 1 is privileged): the backend-down project's BACKEND_URLS. */
export const CLOSED_BACKEND_URL = "http://127.0.0.1:1";

/** Values the global setup provides to the workers project (see global-setup.ts). */
export interface ProvidedBackend {
  backendUrl: string;
  backendSecret: string;
}
