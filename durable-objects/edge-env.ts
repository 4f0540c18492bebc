import type { BackendTarget } from "./backend-client";

/** Bindings and settings of the edge Worker and its Durable Objects (wrangler.toml, secrets). */
export interface EdgeEnv {
  TRAJECTORY: DurableObjectNamespace<import("./trajectory/trajectory-do").TrajectoryDO>;
  POOL: DurableObjectNamespace<import("./pool/pool-do").PoolDO>;
  /** One per tenant: its trajectories for the inspector's list page. */
  TENANT_INDEX: DurableObjectNamespace<import("./tenant-index/tenant-index-do").TenantIndexDO>;
  /** Comma-separated base URLs of the GPU backends. */
  BACKEND_URLS: string;
  /** Shared secret sent to backends in `x-agent-edge-secret` (a Worker secret in production). */
  AGENT_EDGE_SECRET?: string;
  /**
   * API keys: JSON object mapping the SHA-256 hex digest of each key to its tenant, e.g.
   * `{"3f1c...": "acme"}` (a Worker secret). Unset: the key `sk-local-dev` for tenant `local`.
   */
  API_KEYS?: string;
  /** Secret mixed with the tenant name into each tenant's block-hash salt. */
  CACHE_SALT_SECRET?: string;
  /** Largest accepted request body in bytes (default 4 MiB). */
  MAX_BODY_BYTES?: string;
  /** Wait for a backend's first byte, then between chunks (default 120000). */
  BACKEND_TIMEOUT_MS?: string;
  /** A registered backend silent for this long is down (default 6000). */
  POOL_DOWN_AFTER_MS?: string;
  /** How long a trajectory object reuses the pool's view before asking again (default 1000). */
  POOL_VIEW_TTL_MS?: string;
  /**
   * Routing policy: affinity (default), or round-robin, least-loaded, consistent-hash for
   * comparison (`npm run bench -- routing`). An unknown name is an error at the first turn.
   */
  ROUTING_POLICY?: string;
  /**
   * Tenants (comma-separated names) whose transcripts are NOT canonicalized (tool-call ids, JSON
   * arguments, tool definitions; docs/prefix-breaks.md). Default: every tenant is.
   */
  CANONICALIZE_OFF_TENANTS?: string;
  /**
   * Tool-pause leases (lease-policy.ts): `on` (default: after a turn that ends in tool calls),
   * `off`, or `always` (after every turn).
   */
  LEASES?: string;
  /** Shortest lease in ms (default 1000). */
  LEASE_MIN_MS?: string;
  /** Longest lease in ms (default 120000). */
  LEASE_MAX_MS?: string;
  /** Lease TTL base with fewer than 3 observed pauses, in ms (default 15000). */
  LEASE_DEFAULT_MS?: string;
  /** Multiplier on the predicted p90 pause (default 1.5). */
  LEASE_SAFETY_FACTOR?: string;
}

export const DEV_SECRET = "dev-secret";

/** The configured backends. */
export function backendTargets(env: EdgeEnv): BackendTarget[] {
  const secret = env.AGENT_EDGE_SECRET ?? DEV_SECRET;
  return (env.BACKEND_URLS ?? "")
    .split(",")
    .map((u) => u.trim().replace(/\/+$/, ""))
    .filter((u) => u.length > 0)
    .map((url) => ({ url, secret }));
}
