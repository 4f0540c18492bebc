import { mulberry32 } from "../protocol/random";
import { mutateValue, randomTree, runFuzz, type FuzzFindings, type ValueKind } from "./fuzz-common";

/**
 * Seeded fuzzing of the edge's JSON routes (issue 19), the edge's counterpart of
 * fuzz-backend.ts: each case is built from seed and case number alone (`edgeFuzzCase`).
 * - A valid body for a route (chat completions, Responses, Messages and count_tokens, a session
 *   URL's create and turns), with a field replaced by a random JSON value, removed, or added (an
 *   own `__proto__` key included); or its text cut short, or with characters inserted; or random
 *   JSON; or random text.
 * - Headers: the tenant's key, no key, a wrong key, or another tenant's key on the tenant's
 *   trajectory URL; a random or mutated `x-trajectory-id`.
 * - Some GETs and DELETEs of the tenant's and another tenant's trajectory routes.
 *
 * Findings: a 5xx (`serverErrors`; a 503 is counted apart, as `unavailable`), an error answer
 * whose JSON has no stable `error.code` (`uncoded`), a 2xx without a valid key or to another
 * tenant (`unauthorized2xx`), a request that threw (`crashes`), and a refused request after which
 * the probe trajectory (`probeTrajectory`) changed (`trajectoriesChangedByRefusals`: its message
 * count or its turns).
 */
export interface EdgeFuzzFindings extends FuzzFindings {
  trajectoriesChangedByRefusals: number;
}

export interface EdgeFuzzContext {
  /** The tenant the fuzzing runs as, its key, and another tenant's name and key. */
  tenant: string;
  key: string;
  otherTenant: string;
  otherKey: string;
  model: string;
  /** A trajectory of `tenant` with turns already: the cases aim at it too. */
  probeTrajectory: string;
}

export interface EdgeFuzzCase {
  method: "GET" | "POST" | "DELETE";
  path: string;
  headers: Record<string, string>;
  body?: string;
  /** Sent with no valid key for the path's tenant: anything but 401/404 is a finding. */
  unauthorized: boolean;
  /** The case may change the probe trajectory if it is accepted. */
  touchesProbe: boolean;
}

/** The request of case `index` under `seed` (deterministic). */
export function edgeFuzzCase(seed: number, index: number, ctx: EdgeFuzzContext): EdgeFuzzCase {
  const rand = mulberry32((Math.imul(seed, 0x27d4eb2f) ^ Math.imul(index + 1, 0x165667b1)) >>> 0);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const messages = [{ role: "user", content: "List the files." }];
  const session = `/v1/tenants/${ctx.tenant}/trajectories`;
  const probe = `${session}/${ctx.probeTrajectory}`;
  const routes: { path: string; body: () => unknown; probe?: boolean }[] = [
    { path: "/v1/chat/completions", body: () => ({ model: ctx.model, messages, max_tokens: 2, temperature: 0 }), probe: true },
    { path: "/v1/responses", body: () => ({ model: ctx.model, input: "List the files.", max_output_tokens: 16, temperature: 0 }) },
    { path: "/v1/messages", body: () => ({ model: ctx.model, max_tokens: 2, temperature: 0, messages }) },
    { path: "/v1/messages/count_tokens", body: () => ({ model: ctx.model, messages }) },
    { path: session, body: () => ({ id: `fuzz-${index}` }) },
    { path: `${probe}/turns`, body: () => ({ messages, max_tokens: 2, temperature: 0 }), probe: true },
  ];
  const auth = rand();
  const as: "own" | "none" | "wrong" | "other" = auth < 0.03 ? "none" : auth < 0.06 ? "wrong" : auth < 0.09 ? "other" : "own";
  const key = { own: ctx.key, none: undefined, wrong: `${ctx.key}x`, other: ctx.otherKey }[as];
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (key !== undefined) headers.authorization = `Bearer ${key}`;
  // No valid key, or another tenant's key on a tenant path: must be refused.
  const refused = (path: string) => as === "none" || as === "wrong" || (path.startsWith("/v1/tenants/") && (as === "other") !== path.startsWith(`/v1/tenants/${ctx.otherTenant}/`));

  if (rand() < 0.08) {
    const gets = [probe, `${probe}/inspect.json`, `/v1/tenants/${ctx.tenant}/metrics`, `/v1/tenants/${ctx.otherTenant}/trajectories/${ctx.probeTrajectory}`, "/v1/models", `${session}/fuzz-${Math.floor(rand() * 50)}`];
    const path = pick(gets);
    const method = rand() < 0.15 && path.startsWith(session) && path !== probe ? "DELETE" : "GET";
    return { method, path, headers, unauthorized: refused(path), touchesProbe: false };
  }
  const route = pick(routes);
  const kind = rand();
  let body: string;
  if (kind < 0.55) body = JSON.stringify(mutateValue(JSON_VALUES, route.body(), rand));
  else if (kind < 0.8) body = mutateText(JSON.stringify(route.body()), rand);
  else if (kind < 0.9) body = JSON.stringify(randomTree(JSON_VALUES, rand, 3));
  else body = Array.from({ length: Math.floor(rand() * 200) }, () => String.fromCharCode(32 + Math.floor(rand() * 95))).join("");
  if (route.path === "/v1/chat/completions" && rand() < 0.6) headers["x-trajectory-id"] = rand() < 0.7 ? ctx.probeTrajectory : mutateText(ctx.probeTrajectory, rand, true);
  return {
    method: "POST",
    path: route.path,
    headers,
    body,
    unauthorized: refused(route.path),
    touchesProbe: as === "own" && route.probe === true && (route.path !== "/v1/chat/completions" || headers["x-trajectory-id"] === ctx.probeTrajectory),
  };
}

/** Runs `cases` cases against `fetch` (the Worker's `fetch`, or a real edge). `state` reads the probe trajectory (null: gone). */
export async function fuzzEdge(p: {
  fetch: (req: Request) => Promise<Response>;
  base: string;
  ctx: EdgeFuzzContext;
  seed: number;
  cases: number;
  state: () => Promise<string>;
  onProgress?: (done: number) => void;
}): Promise<EdgeFuzzFindings> {
  let probeState = await p.state();
  let changed = 0;
  const f = await runFuzz({
    cases: p.cases,
    caseAt: (i) => {
      const c = edgeFuzzCase(p.seed, i, p.ctx);
      return { ...c, request: new Request(`${p.base}${c.path}`, { method: c.method, headers: c.headers, ...(c.body !== undefined ? { body: c.body } : {}) }) };
    },
    fetch: p.fetch,
    // Accepted: read it (a stream to its end: a turn is stored only when it ends), then re-read the probe.
    onAccepted: async (res, c) => {
      await res.arrayBuffer();
      if (c.touchesProbe) probeState = await p.state();
    },
    onRefused: async (c) => {
      if (!c.touchesProbe) return undefined;
      const now = await p.state();
      if (now === probeState) return undefined;
      changed++;
      const was = probeState;
      probeState = now;
      return `the probe trajectory changed: ${was} -> ${now}`;
    },
    progressEvery: 500,
    onProgress: p.onProgress,
  });
  return { ...f, trajectoriesChangedByRefusals: changed };
}

/** JSON values: numbers, strings, the words the APIs know, arrays and objects. */
const JSON_VALUES: ValueKind = {
  scalars: [
    () => null,
    (rand) => rand() < 0.5,
    (rand) => Math.floor(rand() * 2 ** 31) * (rand() < 0.5 ? -1 : 1),
    (rand) => rand() * 1e308,
    (rand) => [0, -1, 1, 2 ** 53, 1e21, 0.5, -0][Math.floor(rand() * 7)],
    (rand) => "x".repeat(Math.floor(rand() * 40)),
    (rand) => String.fromCharCode(...Array.from({ length: Math.floor(rand() * 20) }, () => Math.floor(rand() * 0xd7ff))),
    (rand) => ["user", "assistant", "system", "tool", "developer", "function", "text", "image_url", "auto", "required", "none"][Math.floor(rand() * 11)],
  ],
  keys: ["messages", "role", "content", "model", "max_tokens", "tools", "tool_choice", "stream", "input", "type", "text", "response_format", "n", "x"],
  extraKeys: ["stream", "tools", "tool_choice", "n", "logprobs", "response_format", "__proto__", "unknown_field"],
};

/** `t` cut short, or with junk inserted (`headerSafe`: printable ASCII only, as an HTTP client can send). */
function mutateText(t: string, rand: () => number, headerSafe = false): string {
  const op = rand();
  if (op < 0.5) return t.slice(0, Math.floor(rand() * t.length));
  const at = Math.floor(rand() * (t.length + 1));
  const chars = headerSafe ? "{}[]\",:/\\.%x ?#" : "{}[]\",:\\0x\u0000\u2028é";
  const junk = Array.from({ length: 1 + Math.floor(rand() * 6) }, () => chars[Math.floor(rand() * chars.length)]).join("");
  return t.slice(0, at) + junk + t.slice(at);
}
