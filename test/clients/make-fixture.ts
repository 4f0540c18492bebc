/**
 * Turns a capture-server.ts log of one CLI (two sessions run by capture.sh) into the compact fixture
 * `test/clients/fixtures/<cli>-<version>.json`: the first main-turn request (headers and body,
 * every field and every tool schema kept, strings over 200 characters cut to their first 200),
 * what the tool-result turn appends, the side requests, and which body paths differ between the
 * two sessions' first main turns.
 *
 * @example
 * npx tsx test/clients/make-fixture.ts --cli claude-code --version 2.1.332 --log /tmp/cap/claude.jsonl \
 *   --setup "$(cat setup.json)" --out test/clients/fixtures/claude-code-2.1.332.json
 */
import { readFileSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: {
    cli: { type: "string" },
    version: { type: "string" },
    log: { type: "string" },
    out: { type: "string" },
    /** JSON: how the CLI was run ({ command, env, config }). */
    setup: { type: "string", default: "{}" },
  },
});

type Json = Record<string, unknown>;
interface Entry {
  t: string;
  method: string;
  path: string;
  query: Record<string, string>;
  headers: Record<string, string>;
  body?: Json | string;
}

const MAX = 200;
const entries = readFileSync(values.log!, "utf8")
  .split("\n")
  .filter(Boolean)
  .map((l) => JSON.parse(l) as Entry);

/** Machine identifiers and one-off ids replaced by placeholders. */
function scrub(text: string): string {
  return text
    .replace(/("?device_id\\?"?\s*:\s*\\?")[0-9a-f]{64}/g, "$1<device-id>")
    .replace(/("?(?:x-codex-)?installation[_-]id\\?"?\s*:\s*\\?")[0-9a-f-]{36}/g, "$1<installation-id>");
}

function shorten(v: unknown): unknown {
  if (typeof v === "string") return v.length > MAX ? `${scrub(v.slice(0, MAX))}…[+${v.length - MAX} chars]` : scrub(v);
  if (Array.isArray(v)) return v.map(shorten);
  if (v !== null && typeof v === "object")
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, /installation[_-]id|device_id/.test(k) && typeof x === "string" ? `<${k}>` : shorten(x)]));
  return v;
}

const isModelCall = (e: Entry) => e.method === "POST" && /\/(messages|responses|chat\/completions)$/.test(e.path) && typeof e.body === "object";
const transcript = (b: Json) => (b.messages ?? b.input ?? []) as unknown[];
const hasTools = (b: Json) =>
  (Array.isArray(b.tools) && b.tools.length > 0) || (Array.isArray(b.input) && (b.input as Json[]).some((i) => i.type === "additional_tools"));
const hasToolResult = (b: Json) => /"type":"tool_result"|"type":"function_call_output"|"type":"custom_tool_call_output"|"role":"tool"/.test(JSON.stringify(transcript(b)));

function sessionOf(e: Entry): string {
  const h = e.headers;
  const b = (typeof e.body === "object" ? e.body : {}) as Json;
  const userId = (b.metadata as Json | undefined)?.user_id;
  let fromMeta: string | undefined;
  if (typeof userId === "string") {
    try {
      fromMeta = (JSON.parse(userId) as Json).session_id as string | undefined;
    } catch {
      fromMeta = /session_([0-9a-f-]{36})/.exec(userId)?.[1];
    }
  }
  return h["x-claude-code-session-id"] ?? h["session-id"] ?? h["x-session-id"] ?? (b.prompt_cache_key as string | undefined) ?? fromMeta ?? "(none)";
}

const main = entries.filter((e) => isModelCall(e) && hasTools(e.body as Json));
const first = main.find((e) => !hasToolResult(e.body as Json));
if (!first) throw new Error("no main-turn request in the log");
const firstSession = sessionOf(first);
// Without a session key (Qwen Code) the two sessions are told apart by order: each session's first main turn has no tool result.
const firstMains = main.filter((e) => !hasToolResult(e.body as Json));
const second = main.find((e) => e !== first && hasToolResult(e.body as Json) && (sessionOf(e) === firstSession || firstSession === "(none)"));

function delta(a: Json, b: Json): unknown[] {
  const ta = transcript(a);
  const tb = transcript(b);
  return tb.slice(Math.max(0, ta.length - 1)).map(shorten);
}

/** Body paths whose values differ between two requests (strings compared whole, listed cut). */
function diff(a: unknown, b: unknown, path = "", out: { path: string; first: unknown; second: unknown }[] = []): typeof out {
  if (JSON.stringify(a) === JSON.stringify(b)) return out;
  if (a && b && typeof a === "object" && typeof b === "object" && Array.isArray(a) === Array.isArray(b)) {
    const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
    for (const k of keys) diff((a as Json)[k], (b as Json)[k], Array.isArray(a) ? `${path}[${k}]` : `${path}.${k}`, out);
    return out;
  }
  if (typeof a === "string" && typeof b === "string") {
    let i = 0;
    while (i < a.length && a[i] === b[i]) i++;
    out.push({ path, first: `…${a.slice(Math.max(0, i - 40), i + 80)}…`, second: `…${b.slice(Math.max(0, i - 40), i + 80)}…` });
    return out;
  }
  out.push({ path, first: shorten(a), second: shorten(b) });
  return out;
}

const sessionFirsts = firstMains.filter((e, i) => firstSession === "(none)" || sessionOf(e) !== sessionOf(firstMains[0]!) || i === 0);
const betweenSessions =
  sessionFirsts.length >= 2
    ? {
        headers: diff(sessionFirsts[0]!.headers, sessionFirsts[1]!.headers).filter((d) => !/sec-websocket-key|content-length/.test(d.path)),
        body: diff(sessionFirsts[0]!.body, sessionFirsts[1]!.body),
      }
    : null;

const side = entries
  .filter((e) => !(isModelCall(e) && hasTools(e.body as Json)))
  .map((e) => {
    const b = (typeof e.body === "object" ? e.body : undefined) as Json | undefined;
    return {
      method: e.method,
      path: e.path,
      query: e.query,
      session: sessionOf(e),
      upgrade: e.headers.upgrade,
      fields: b ? Object.fromEntries(Object.entries(b).filter(([k]) => !["messages", "input", "system", "instructions", "tools"].includes(k)).map(([k, v]) => [k, shorten(v)])) : undefined,
      last_message: b ? shorten(transcript(b).at(-1)) : undefined,
    };
  });

const fixture = {
  cli: values.cli,
  version: values.version,
  captured_at: first.t,
  note: "Captured with test/clients/capture-server.ts (a recording stand-in) and capture.sh; strings over 200 characters are cut to their first 200, machine ids replaced. See docs/clients.md.",
  setup: JSON.parse(values.setup!) as unknown,
  session_key: firstSession,
  first_turn: { method: first.method, path: first.path, query: first.query, headers: shorten(first.headers), body: shorten(first.body) },
  tool_result_turn: second
    ? { path: second.path, headers_differing_from_first: diff(first.headers, second.headers).filter((d) => !/content-length/.test(d.path)), appended: delta(first.body as Json, second.body as Json) }
    : null,
  side_requests: side,
  between_sessions: betweenSessions,
};
writeFileSync(values.out!, `${JSON.stringify(fixture, null, 1)}\n`);
console.log(`${values.out}: ${JSON.stringify(fixture).length} chars; ${main.length} main-turn requests, ${side.length} side requests, session ${firstSession}`);
