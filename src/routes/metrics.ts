import { Hono } from "hono";
import { ROUTES } from "../../protocol/routes";
import { MISS_REASONS } from "../../durable-objects/turn/cache-miss";
import { PREFIX_BREAK_CAUSES } from "../../durable-objects/turn/prefix-break";
import { tenantIndexOf } from "../../durable-objects/tenant-index/tenant-index-do";
import type { AuthVariables } from "../http/auth";
import { ownTenant } from "../http/own-tenant";

/** Paths relative to the tenant group's base, `/v1/tenants/:tenant` (src/index.ts mounts it). */
const T = ROUTES.edge.tenant;

/**
 * `GET /v1/tenants/{tenant}/metrics`: the tenant's edge counters in the Prometheus text format
 * (from its index object; updated just after each turn is answered):
 *
 *   agent_edge_turns_total{tenant}
 *   agent_edge_prefix_breaks_total{tenant, cause}       every cause, `none` included
 *   agent_edge_canonical_repairs_total{tenant, kind}    tool_call_ids | json_arguments
 *   agent_edge_quirk_repairs_total{tenant, quirk}       client quirks repaired (billing-header)
 *   agent_edge_cache_miss_turns_total{tenant, reason}   turns that reused less than they could
 *   agent_edge_cache_miss_tokens_total{tenant, reason}  prompt tokens computed for it (cache-miss.ts)
 */
export const metricsRoutes = new Hono<{ Bindings: Env; Variables: AuthVariables }>().get(T.metrics, async (c) => {
  const tenant = ownTenant(c.req.param("tenant"), c.get("tenant"));
  const counters = await tenantIndexOf(c.env, tenant).counters();
  const t = `tenant="${tenant.replace(/["\\\n]/g, "_")}"`;
  const lines = [
    "# HELP agent_edge_turns_total Trajectory turns answered.",
    "# TYPE agent_edge_turns_total counter",
    `agent_edge_turns_total{${t}} ${counters.turns}`,
    "# HELP agent_edge_prefix_breaks_total Turns by prefix-break cause (none: the transcript only grew).",
    "# TYPE agent_edge_prefix_breaks_total counter",
    ...PREFIX_BREAK_CAUSES.map((cause) => `agent_edge_prefix_breaks_total{${t},cause="${cause}"} ${counters.prefixBreaks[cause]}`),
    "# HELP agent_edge_canonical_repairs_total Differences removed by safe canonicalization.",
    "# TYPE agent_edge_canonical_repairs_total counter",
    `agent_edge_canonical_repairs_total{${t},kind="tool_call_ids"} ${counters.repairs.toolCallIds}`,
    `agent_edge_canonical_repairs_total{${t},kind="json_arguments"} ${counters.repairs.jsonArguments}`,
    "# HELP agent_edge_quirk_repairs_total Turns in which the edge repaired a client quirk (e.g. billing-header), by quirk.",
    "# TYPE agent_edge_quirk_repairs_total counter",
    ...Object.entries(counters.quirks).map(([quirk, n]) => `agent_edge_quirk_repairs_total{${t},quirk="${quirk.replace(/[^a-z0-9_-]/gi, "_")}"} ${n}`),
    "# HELP agent_edge_cache_miss_turns_total Turns whose cached prompt tokens fell short of what they could reuse, by reason.",
    "# TYPE agent_edge_cache_miss_turns_total counter",
    ...MISS_REASONS.map((r) => `agent_edge_cache_miss_turns_total{${t},reason="${r}"} ${counters.misses[r].turns}`),
    "# HELP agent_edge_cache_miss_tokens_total Prompt tokens computed that could have been reused, by reason.",
    "# TYPE agent_edge_cache_miss_tokens_total counter",
    ...MISS_REASONS.map((r) => `agent_edge_cache_miss_tokens_total{${t},reason="${r}"} ${counters.misses[r].tokens}`),
  ];
  return c.text(`${lines.join("\n")}\n`, 200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
});
