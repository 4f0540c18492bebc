/**
 * Every HTTP route of the system, in one place: the backend's (msgpack, shared secret) and the
 * edge's, grouped as the edge mounts them (Hono sub-apps under base paths, each group behind its
 * own guard: `src/index.ts`).
 *
 * @example fetch(`${backendUrl}${ROUTES.backend.generate}`, ...)
 * @example fetch(`${edgeUrl}${edgePath("pool", "heartbeat")}`, ...) // /v1/pool/heartbeat
 */
export const ROUTES = {
  /** A GPU backend (gpu-backend/server/app.ts): everything but `healthz` needs the shared secret. */
  backend: {
    generate: "/v1/generate",
    releaseState: "/v1/states/release",
    /** POST: the prompt tokens of a conversation, rendered and tokenized as a turn's (`TokenizeRequest`). */
    tokenize: "/v1/tokenize",
    /** POST: lease a state's blocks (`LeaseRequest`); GET: the active leases (JSON, for debugging). */
    leases: "/v1/leases",
    releaseLease: "/v1/leases/release",
    /** POST: a prompt's cached blocks, for another backend (`KvPullRequest`; a binary stream of checked blocks). */
    kvPull: "/v1/kv/pull",
    /** POST: take a prompt's blocks from another backend now (`KvFetchRequest`; a draining backend pushes this way). */
    kvFetch: "/v1/kv/fetch",
    /** POST: start draining (no new placements; trajectories move with their blocks; exit when idle). */
    drain: "/v1/drain",
    models: "/v1/models",
    healthz: "/healthz",
    metrics: "/metrics",
  },
  /** The edge Worker (src/). */
  edge: {
    /** Public liveness. */
    healthz: "/healthz",
    /** Backends, with the shared secret (`x-agent-edge-secret`). */
    pool: { base: "/v1/pool", view: "/", heartbeat: "/heartbeat" },
    /** OpenAI-compatible clients, with an API key. Shares `/v1` with the other groups. */
    openai: { base: "/v1", models: "/models", chatCompletions: "/chat/completions", responses: "/responses", response: "/responses/:id", responseInputItems: "/responses/:id/input_items" },
    /** Anthropic Messages API clients, with an API key (`x-api-key` or bearer). Shares `/v1` with the other groups. */
    anthropic: { base: "/v1", messages: "/messages", countTokens: "/messages/count_tokens" },
    /** Per-tenant trajectory URLs, with an API key (the inspector's GET routes also take its session cookie). */
    tenant: {
      base: "/v1/tenants/:tenant",
      trajectories: "/trajectories",
      trajectory: "/trajectories/:id",
      turns: "/trajectories/:id/turns",
      inspect: "/inspect",
      inspectJson: "/inspect.json",
      trajectoryInspect: "/trajectories/:id/inspect",
      trajectoryInspectJson: "/trajectories/:id/inspect.json",
      metrics: "/metrics",
    },
  },
} as const;

type EdgeGroups = Omit<typeof ROUTES.edge, "healthz">;

/**
 * The full path of an edge route: its group's base plus the route (`"/"` is the base itself).
 *
 * @example edgePath("tenant", "turns") // "/v1/tenants/:tenant/trajectories/:id/turns"
 */
export function edgePath<G extends keyof EdgeGroups>(group: G, route: Exclude<keyof EdgeGroups[G], "base">): string {
  const g = ROUTES.edge[group] as Record<string, string>;
  const path = g[route as string]!;
  return path === "/" ? g.base! : `${g.base}${path}`;
}
