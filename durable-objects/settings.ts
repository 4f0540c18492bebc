import { ProtocolError } from "../protocol/errors";
import { DEV_SECRET } from "../protocol/messages";
import type { BackendTarget } from "./backend/backend-client";
import { parsePolicy, ROUTING_POLICIES, type RoutingPolicyName } from "./routing/routing-policy";

/**
 * The edge's settings: every Worker var and secret it reads, parsed in this one place
 * (`edgeSettings(env)`), with its default. Bindings (TRAJECTORY, POOL, TENANT_INDEX) are typed by
 * `worker-configuration.d.ts`, which `npm run types` (wrangler types) generates from
 * wrangler.toml.
 *
 * One parse rule for numbers: a finite number > 0, else the default (unset, empty or
 * unparsable alike). An unknown ROUTING_POLICY is an error (`internal_error`) where it is read.
 */
export interface EdgeVars {
  /** Comma-separated base URLs of the GPU backends (static; others register by heartbeat). */
  BACKEND_URLS?: string;
  /** Shared secret sent to backends in `x-agent-edge-secret` (a Worker secret in production). Default `dev-secret`. */
  AGENT_EDGE_SECRET?: string;
  /**
   * API keys: JSON object mapping the SHA-256 hex digest of each key to its tenant, e.g.
   * `{"3f1c...": "acme"}` (a Worker secret). Unset: the key `sk-local-dev` for tenant `local`.
   */
  API_KEYS?: string;
  /** Secret mixed with the tenant name into each tenant's block-hash salt (default AGENT_EDGE_SECRET). */
  CACHE_SALT_SECRET?: string;
  /** Largest accepted request body in bytes (default 4 MiB). */
  MAX_BODY_BYTES?: string;
  /** Most messages a turn's transcript may hold, stored ones included (default 10000; over it: 400 `limit_exceeded`). */
  MAX_MESSAGES?: string;
  /** Most tool definitions a turn may carry (default 512; over it: 400 `limit_exceeded`). */
  MAX_TOOLS?: string;
  /** Most characters of a turn's transcript and tools, stored ones included (default 2000000; over it: 413 `payload_too_large`; `transcriptChars`). */
  MAX_TOTAL_CHARS?: string;
  /** Most bytes of a request's header names and values together (default 32768; over it: 431 `headers_too_large`). */
  MAX_HEADER_BYTES?: string;
  /** Wait for a backend's first byte, then between chunks (default 120000). */
  BACKEND_TIMEOUT_MS?: string;
  /** A registered backend silent for this long is down (default 6000: 3 x the 2 s heartbeat). */
  POOL_DOWN_AFTER_MS?: string;
  /** How long a trajectory object reuses the pool's view before asking again (default 1000). */
  POOL_VIEW_TTL_MS?: string;
  /** Most backends in one pool cell (durable-objects/pool/cells.ts; default 32). */
  POOL_CELL_BACKENDS?: string;
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
   * `on` (every tenant) or a comma-separated list of tenants: a request with tools that names no trajectory (an agent that sends no session id, such
   * as Qwen Code) runs in one derived from its start (`conv_<hash of the first two messages and
   * the tools>`), so its later turns are delta turns; while that one is busy it runs statelessly.
   * Default `off` (`npm start` turns it on); docs/edge.md, Sessions.
   */
  DERIVED_SESSIONS?: string;
  /** Tool-pause leases: `on` (default: after a turn that ends in tool calls), `off`, or `always` (after every turn; also true/false, 1/0). */
  LEASES?: string;
  /** Shortest lease in ms (default 1000). */
  LEASE_MIN_MS?: string;
  /** Longest lease in ms (default 120000). */
  LEASE_MAX_MS?: string;
  /** Lease TTL base with fewer than 3 observed pauses, in ms (default 15000). */
  LEASE_DEFAULT_MS?: string;
  /** Multiplier on the predicted p90 pause (default 1.5). */
  LEASE_SAFETY_FACTOR?: string;
  /** An `Idempotency-Key` is remembered for the trajectory's last N turns (default 64); older keys expire. */
  IDEMPOTENCY_TURNS?: string;
  /**
   * Model aliases per tenant (src/http/model-names.ts): JSON mapping a tenant name, or `*` for
   * every tenant, to `{pattern: model}` where a pattern may hold `*` globs, e.g.
   * `{"*": {"claude-*": "demo-llama-random", "gpt-*": "demo-llama-random"}, "acme": {"fast": "qwen3-0.6b"}}`.
   * The tenant's own map is tried first, then `*`'s, each in its order; the first match wins.
   * Unset: no aliases. Not a JSON object of objects of strings: an error (`internal_error`) where
   * a model is resolved.
   */
  MODEL_ALIASES?: string;
  /**
   * Strict tenants (comma-separated names): a model name must be served or aliased (no "the one
   * served model answers any name"), and tools this server cannot run (Responses: hosted tools
   * and `local_shell`; Messages: server tools) are refused with a 400 instead of dropped with a warning.
   * Default: none.
   */
  STRICT_TENANTS?: string;
}

/** One tenant's aliases: `[pattern, model]` in the order given. */
export type ModelAliasList = readonly (readonly [pattern: string, model: string])[];

const DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024;

/**
 * The caps on what one turn may hold (durable-objects/turn/limits.ts checks them), each with the
 * Worker var that sets it.
 */
export interface Limits {
  maxMessages: number;
  maxTools: number;
  maxTotalChars: number;
}

export const LIMIT_DEFAULTS: Limits & { maxHeaderBytes: number } = { maxMessages: 10_000, maxTools: 512, maxTotalChars: 2_000_000, maxHeaderBytes: 32 * 1024 };

/** Tool-pause lease settings (durable-objects/trajectory/lease-policy.ts uses them). */
export interface LeaseSettings {
  mode: "on" | "off" | "always";
  minMs: number;
  maxMs: number;
  defaultMs: number;
  safetyFactor: number;
  percentile: number;
  minSamples: number;
}

export const LEASE_DEFAULTS: LeaseSettings = { mode: "on", minMs: 1000, maxMs: 120_000, defaultMs: 15_000, safetyFactor: 1.5, percentile: 0.9, minSamples: 3 };

export interface EdgeSettings {
  /** The static backends (BACKEND_URLS), each with the shared secret. */
  backends: BackendTarget[];
  backendSecret: string;
  /** The secret behind tenant salts and inspector sessions. */
  saltSecret: string;
  /** API_KEYS as configured (src/http/auth.ts parses the table); "" when unset. */
  apiKeys: string;
  maxBodyBytes: number;
  /** The caps on a turn's messages, tools and characters. */
  limits: Limits;
  /** The cap on a request's header bytes (src/http/header-limit.ts). */
  maxHeaderBytes: number;
  backendTimeoutMs: number;
  poolDownAfterMs: number;
  poolViewTtlMs: number;
  /** Most backends one pool cell holds (POOL_CELL_BACKENDS). */
  poolCellBackends: number;
  /** Undefined only when ROUTING_POLICY names no policy; `routingPolicyOf` throws then. */
  routingPolicy: RoutingPolicyName | undefined;
  routingPolicyRaw: string | undefined;
  canonicalizeOffTenants: ReadonlySet<string>;
  /** The tenants DERIVED_SESSIONS is on for (`"all"`: every one). */
  derivedSessions: "all" | ReadonlySet<string>;
  leases: LeaseSettings;
  /** Turns an `Idempotency-Key` is remembered for (IDEMPOTENCY_TURNS). */
  idempotencyTurns: number;
  /** MODEL_ALIASES by tenant (`*`: every tenant); undefined only when MODEL_ALIASES is malformed (`modelAliasesOf` throws then). */
  modelAliases: ReadonlyMap<string, ModelAliasList> | undefined;
  modelAliasesRaw: string | undefined;
  /** STRICT_TENANTS. */
  strictTenants: ReadonlySet<string>;
}

const cache = new WeakMap<object, EdgeSettings>();

/**
 * The settings of this environment (parsed once per env object).
 *
 * @example edgeSettings(env).backendTimeoutMs // 120000 unless BACKEND_TIMEOUT_MS says otherwise
 */
export function edgeSettings(env: EdgeVars): EdgeSettings {
  const known = cache.get(env);
  if (known) return known;
  const backendSecret = env.AGENT_EDGE_SECRET ?? DEV_SECRET;
  const settings: EdgeSettings = {
    backends: list(env.BACKEND_URLS)
      .map((u) => u.replace(/\/+$/, ""))
      .filter((u) => u.length > 0)
      .map((url) => ({ url, secret: backendSecret })),
    backendSecret,
    saltSecret: env.CACHE_SALT_SECRET ?? backendSecret,
    apiKeys: env.API_KEYS ?? "",
    maxBodyBytes: positive(env.MAX_BODY_BYTES, DEFAULT_MAX_BODY_BYTES),
    limits: {
      maxMessages: positive(env.MAX_MESSAGES, LIMIT_DEFAULTS.maxMessages),
      maxTools: positive(env.MAX_TOOLS, LIMIT_DEFAULTS.maxTools),
      maxTotalChars: positive(env.MAX_TOTAL_CHARS, LIMIT_DEFAULTS.maxTotalChars),
    },
    maxHeaderBytes: positive(env.MAX_HEADER_BYTES, LIMIT_DEFAULTS.maxHeaderBytes),
    backendTimeoutMs: positive(env.BACKEND_TIMEOUT_MS, 120_000),
    poolDownAfterMs: positive(env.POOL_DOWN_AFTER_MS, 6000),
    poolViewTtlMs: positive(env.POOL_VIEW_TTL_MS, 1000),
    poolCellBackends: Math.floor(positive(env.POOL_CELL_BACKENDS, 32)),
    routingPolicy: env.ROUTING_POLICY ? parsePolicy(env.ROUTING_POLICY) : "affinity",
    routingPolicyRaw: env.ROUTING_POLICY,
    canonicalizeOffTenants: new Set(list(env.CANONICALIZE_OFF_TENANTS)),
    derivedSessions: ["on", "true", "1"].includes((env.DERIVED_SESSIONS ?? "").trim().toLowerCase()) ? "all" : new Set(list(env.DERIVED_SESSIONS).filter((t) => !["off", "false", "0"].includes(t.toLowerCase()))),
    leases: leaseSettings(env),
    idempotencyTurns: Math.floor(positive(env.IDEMPOTENCY_TURNS, 64)),
    modelAliases: parseModelAliases(env.MODEL_ALIASES),
    modelAliasesRaw: env.MODEL_ALIASES,
    strictTenants: new Set(list(env.STRICT_TENANTS)),
  };
  cache.set(env, settings);
  return settings;
}

/** The routing policy, or `internal_error` naming the bad ROUTING_POLICY. */
export function routingPolicyOf(s: EdgeSettings): RoutingPolicyName {
  if (s.routingPolicy) return s.routingPolicy;
  throw new ProtocolError("internal_error", `ROUTING_POLICY ${JSON.stringify(s.routingPolicyRaw)} is not one of ${ROUTING_POLICIES.join(", ")}`);
}

/** The model aliases, or `internal_error` naming the malformed MODEL_ALIASES. */
export function modelAliasesOf(s: Pick<EdgeSettings, "modelAliases" | "modelAliasesRaw">): ReadonlyMap<string, ModelAliasList> {
  if (s.modelAliases) return s.modelAliases;
  throw new ProtocolError("internal_error", `MODEL_ALIASES ${JSON.stringify(s.modelAliasesRaw)} is not a JSON object of {tenant or "*": {pattern: model}}`);
}

/**
 * MODEL_ALIASES parsed: tenant -> `[pattern, model]` in the JSON's order. Unset or blank: no
 * aliases; malformed (not JSON, or not an object of objects of non-empty strings): undefined.
 *
 * @example parseModelAliases('{"*": {"claude-*": "demo"}}')?.get("*") // [["claude-*", "demo"]]
 */
export function parseModelAliases(raw: string | undefined): Map<string, ModelAliasList> | undefined {
  const out = new Map<string, ModelAliasList>();
  if (raw === undefined || raw.trim() === "") return out;
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    return undefined;
  }
  if (!isObject(json)) return undefined;
  for (const [tenant, map] of Object.entries(json)) {
    if (!isObject(map)) return undefined;
    const entries = Object.entries(map);
    if (!entries.every(([p, m]) => p.length > 0 && typeof m === "string" && m.length > 0)) return undefined;
    out.set(tenant, entries as [string, string][]);
  }
  return out;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * Lease settings from Worker vars; an unset or unparsable value takes its default. `LEASES`
 * accepts on/off/always (also true/false, 1/0).
 *
 * @example leaseSettings({ LEASES: "off" }).mode // "off"
 */
export function leaseSettings(vars: Pick<EdgeVars, "LEASES" | "LEASE_MIN_MS" | "LEASE_MAX_MS" | "LEASE_DEFAULT_MS" | "LEASE_SAFETY_FACTOR">): LeaseSettings {
  const raw = (vars.LEASES ?? "").trim().toLowerCase();
  const mode = raw === "off" || raw === "false" || raw === "0" ? "off" : raw === "always" ? "always" : "on";
  const minMs = positive(vars.LEASE_MIN_MS, LEASE_DEFAULTS.minMs);
  const maxMs = Math.max(minMs, positive(vars.LEASE_MAX_MS, LEASE_DEFAULTS.maxMs));
  return {
    ...LEASE_DEFAULTS,
    mode,
    minMs,
    maxMs,
    defaultMs: positive(vars.LEASE_DEFAULT_MS, LEASE_DEFAULTS.defaultMs),
    safetyFactor: positive(vars.LEASE_SAFETY_FACTOR, LEASE_DEFAULTS.safetyFactor),
  };
}

/** The one number rule: a finite number > 0, else `fallback`. */
function positive(v: string | undefined, fallback: number): number {
  if (v === undefined || v.trim() === "") return fallback;
  const n = Number(v);
  return Number.isFinite(n) && n > 0 ? n : fallback;
}

function list(v: string | undefined): string[] {
  return (v ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}
