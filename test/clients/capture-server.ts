/**
 * A recording stand-in for an LLM API, to see exactly what a coding-agent CLI sends.
 *
 * Listens on 127.0.0.1 only. Every request (method, path, query, all headers, the JSON body or
 * the text) is appended as one JSON line to the log file. It answers minimal valid replies so the
 * CLI proceeds:
 *
 * - Anthropic Messages: POST .../messages (SSE when `stream`, JSON otherwise), POST
 *   .../messages/count_tokens.
 * - OpenAI Responses: POST .../responses (SSE response.created ... response.completed, or JSON).
 * - OpenAI Chat Completions: POST .../chat/completions (SSE chunks, or JSON).
 * - GET .../models (OpenAI- and Anthropic-shaped list in one; Codex's `models` key too).
 * - anything else: 404 with a JSON error (and logged).
 *
 * The reply policy gives each CLI one tool round trip: a request with tools whose transcript has
 * no tool result yet is answered with a call of a harmless read-only tool the request offers
 * (Glob / glob `*`, a directory listing, a shell `pwd`); a request whose transcript has a tool
 * result, or that has no such tool, is answered with plain text that ends the turn. A request that
 * asks for JSON output (a json_schema format) gets a minimal instance of its schema.
 *
 * @example
 * npx tsx test/clients/capture-server.ts --port 8790 --log /tmp/capture.jsonl
 */
import { appendFileSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: {
    port: { type: "string", default: "8790" },
    log: { type: "string", default: "capture.jsonl" },
    /** Text of the final (non-tool) reply. */
    text: { type: "string", default: "Done: I listed the folder." },
    /** Answer the first request that offers a subagent tool (Agent, task, spawn_agent) with a call of it, once. */
    subagent: { type: "boolean", default: false },
  },
});
const PORT = Number(values.port);
const LOG = values.log!;
const FINAL_TEXT = values.text!;
let subagentSpawned = !values.subagent;

/** The subagent tools, with arguments that start one small read-only task. */
const SUBAGENT_TOOLS: { name: string; args: Json }[] = [
  { name: "Agent", args: { description: "List files", prompt: "List the files in this folder.", subagent_type: "general-purpose", run_in_background: false } }, // Claude Code
  { name: "task", args: { description: "List files", prompt: "List the files in this folder.", subagent_type: "general" } }, // OpenCode
  { name: "spawn_agent", args: { task_name: "list_files", message: "List the files in this folder.", fork_turns: "none" } }, // Codex
];

type Json = Record<string, unknown>;
let seq = 0;

/** The tool to call, by the name a CLI offers, and the arguments it gets. First match wins. */
const HARMLESS_TOOLS: { name: string; args: Json }[] = [
  { name: "Glob", args: { pattern: "*" } }, // Claude Code
  { name: "glob", args: { pattern: "*" } }, // OpenCode, Qwen Code
  { name: "list_directory", args: { path: "$CWD" } }, // Qwen Code (absolute path)
  { name: "list", args: { path: "$CWD" } }, // OpenCode
  { name: "Read", args: { file_path: "$CWD/README.md" } }, // Claude Code (no Glob in its default set)
  { name: "read_file", args: { absolute_path: "$CWD/README.md" } }, // Qwen Code
  { name: "read", args: { filePath: "$CWD/README.md" } }, // OpenCode
  { name: "exec_command", args: { cmd: "pwd" } }, // Codex (unified exec)
  { name: "shell_command", args: { command: "pwd" } }, // Codex
  { name: "shell", args: { command: ["pwd"] } }, // Codex (older)
  { name: "list_agents", args: {} }, // Codex 0.171 code mode: its shell is only reachable through the JavaScript `exec` tool
];

function toolName(t: Json): string | undefined {
  if (typeof t.name === "string") return t.name; // Anthropic, Responses function tools
  const f = t.function as Json | undefined; // Chat Completions
  return typeof f?.name === "string" ? f.name : undefined;
}

/**
 * Every tool a request offers, by name, with its namespace: top-level `tools`, and (Codex 0.171's
 * "responses lite") the `additional_tools` input items; `namespace` tools are flattened.
 */
function offeredTools(body: Json): Map<string, { namespace?: string }> {
  const out = new Map<string, { namespace?: string }>();
  const add = (tools: unknown, namespace?: string) => {
    if (!Array.isArray(tools)) return;
    for (const t of tools as Json[]) {
      if (t.type === "namespace") add(t.tools, String(t.name));
      else {
        const name = toolName(t);
        if (name !== undefined) out.set(name, { namespace });
      }
    }
  };
  add(body.tools);
  if (Array.isArray(body.input)) for (const item of body.input as Json[]) if (item.type === "additional_tools") add(item.tools);
  return out;
}

function pickTool(body: Json): { name: string; args: Json; namespace?: string } | undefined {
  const offered = offeredTools(body);
  const sub = subagentSpawned ? undefined : SUBAGENT_TOOLS.find((h) => offered.has(h.name));
  if (sub) {
    subagentSpawned = true;
    return { ...sub, namespace: offered.get(sub.name)!.namespace };
  }
  const tool = HARMLESS_TOOLS.find((h) => offered.has(h.name));
  return tool && { ...tool, namespace: offered.get(tool.name)!.namespace };
}

/** A minimal instance of a JSON schema: required properties only, strings "x", numbers 0, ... */
function instanceOf(schema: unknown): unknown {
  const s = (schema ?? {}) as Json;
  if (Array.isArray(s.enum) && s.enum.length > 0) return s.enum[0];
  if ("const" in s) return s.const;
  if (Array.isArray(s.anyOf) && s.anyOf.length > 0) return instanceOf(s.anyOf[0]);
  if (Array.isArray(s.oneOf) && s.oneOf.length > 0) return instanceOf(s.oneOf[0]);
  const type = Array.isArray(s.type) ? s.type[0] : s.type;
  switch (type) {
    case "object": {
      const props = (s.properties ?? {}) as Record<string, unknown>;
      const required = Array.isArray(s.required) ? (s.required as string[]) : Object.keys(props);
      return Object.fromEntries(required.map((k) => [k, instanceOf(props[k])]));
    }
    case "array":
      return [];
    case "string":
      return "Capture test";
    case "number":
    case "integer":
      return 0;
    case "boolean":
      return false;
    case "null":
      return null;
    default:
      return props(s) ? instanceOf({ ...s, type: "object" }) : "Capture test";
  }
  function props(x: Json) {
    return typeof x.properties === "object";
  }
}

/** Whether a transcript (Anthropic messages, Responses input, chat messages) already holds a tool result. */
function hasToolResult(body: Json): boolean {
  const text = JSON.stringify(body.messages ?? body.input ?? []);
  return /"type":"tool_result"|"type":"function_call_output"|"type":"custom_tool_call_output"|"role":"tool"/.test(text);
}

/** The JSON schema a request asks its reply to follow, if any. */
function jsonSchemaOf(body: Json): unknown {
  const oc = body.output_config as Json | undefined; // Anthropic
  const ocf = oc?.format as Json | undefined;
  if (ocf?.type === "json_schema") return ocf.schema;
  const text = body.text as Json | undefined; // Responses
  const tf = text?.format as Json | undefined;
  if (tf?.type === "json_schema") return tf.schema;
  const rf = body.response_format as Json | undefined; // Chat Completions
  if (rf?.type === "json_schema") return (rf.json_schema as Json | undefined)?.schema;
  if (rf?.type === "json_object") return { type: "object" };
  return undefined;
}

interface Plan {
  kind: "tool" | "text";
  tool?: { name: string; args: Json; namespace?: string };
  text: string;
}

function plan(body: Json): Plan {
  const schema = jsonSchemaOf(body);
  if (schema !== undefined) return { kind: "text", text: JSON.stringify(instanceOf(schema)) };
  if (!hasToolResult(body)) {
    const tool = pickTool(body);
    if (tool) {
      // Absolute paths: the CLI's working folder, which its prompt names (runs are in /tmp).
      const cwd = /(?:working directory|directory)[^/]{0,40}(\/tmp\/[^\s"'`\\]+)/i.exec(JSON.stringify(body))?.[1] ?? process.cwd();
      const args = JSON.parse(JSON.stringify(tool.args).replaceAll("$CWD", cwd.replace(/[.,;:)]+$/, ""))) as Json;
      return { kind: "tool", tool: { name: tool.name, args, namespace: tool.namespace }, text: "" };
    }
  }
  return { kind: "text", text: FINAL_TEXT };
}

const USAGE_IN = 1000;

function sse(res: ServerResponse, events: { event?: string; data: unknown }[], done = false): void {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  for (const e of events) res.write(`${e.event ? `event: ${e.event}\n` : ""}data: ${typeof e.data === "string" ? e.data : JSON.stringify(e.data)}\n\n`);
  if (done) res.write("data: [DONE]\n\n");
  res.end();
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

// ---- Anthropic Messages ----
function anthropic(res: ServerResponse, body: Json): void {
  const p = plan(body);
  const id = `msg_capture_${++seq}`;
  const model = String(body.model ?? "capture");
  const usage = { input_tokens: USAGE_IN, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
  const content =
    p.kind === "tool" ? [{ type: "tool_use", id: `toolu_capture_${seq}`, name: p.tool!.name, input: p.tool!.args }] : [{ type: "text", text: p.text }];
  const stopReason = p.kind === "tool" ? "tool_use" : "end_turn";
  if (!body.stream) {
    json(res, 200, { id, type: "message", role: "assistant", model, content, stop_reason: stopReason, stop_sequence: null, usage });
    return;
  }
  const events: { event: string; data: unknown }[] = [
    { event: "message_start", data: { type: "message_start", message: { id, type: "message", role: "assistant", model, content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } } } },
  ];
  if (p.kind === "tool") {
    events.push({ event: "content_block_start", data: { type: "content_block_start", index: 0, content_block: { type: "tool_use", id: `toolu_capture_${seq}`, name: p.tool!.name, input: {} } } });
    events.push({ event: "content_block_delta", data: { type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json: JSON.stringify(p.tool!.args) } } });
  } else {
    events.push({ event: "content_block_start", data: { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } } });
    events.push({ event: "content_block_delta", data: { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: p.text } } });
  }
  events.push({ event: "content_block_stop", data: { type: "content_block_stop", index: 0 } });
  events.push({ event: "message_delta", data: { type: "message_delta", delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: 5 } } });
  events.push({ event: "message_stop", data: { type: "message_stop" } });
  sse(res, events);
}

// ---- OpenAI Responses ----
function responses(res: ServerResponse, body: Json): void {
  const p = plan(body);
  const id = `resp_capture_${++seq}`;
  const model = String(body.model ?? "capture");
  const item =
    p.kind === "tool"
      ? {
          type: "function_call",
          id: `fc_capture_${seq}`,
          call_id: `call_capture_${seq}`,
          ...(p.tool!.namespace ? { namespace: p.tool!.namespace } : {}),
          name: p.tool!.name,
          arguments: JSON.stringify(p.tool!.args),
          status: "completed",
        }
      : { type: "message", id: `msg_capture_${seq}`, role: "assistant", status: "completed", content: [{ type: "output_text", text: p.text, annotations: [] }] };
  const usage = { input_tokens: USAGE_IN, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: USAGE_IN + 5 };
  const base = { id, object: "response", created_at: Math.floor(Date.now() / 1000), model, tools: [], parallel_tool_calls: false };
  const completed = { ...base, status: "completed", output: [item], usage };
  if (!body.stream) {
    json(res, 200, completed);
    return;
  }
  let n = 0;
  const ev = (type: string, data: Json) => ({ event: type, data: { type, sequence_number: n++, ...data } });
  const events = [ev("response.created", { response: { ...base, status: "in_progress", output: [] } }), ev("response.in_progress", { response: { ...base, status: "in_progress", output: [] } })];
  if (p.kind === "tool") {
    events.push(ev("response.output_item.added", { output_index: 0, item: { ...item, arguments: "", status: "in_progress" } }));
    events.push(ev("response.function_call_arguments.delta", { output_index: 0, item_id: item.id, delta: (item as Json).arguments as string }));
    events.push(ev("response.function_call_arguments.done", { output_index: 0, item_id: item.id, arguments: (item as Json).arguments as string }));
  } else {
    events.push(ev("response.output_item.added", { output_index: 0, item: { ...item, status: "in_progress", content: [] } }));
    events.push(ev("response.content_part.added", { output_index: 0, item_id: item.id, content_index: 0, part: { type: "output_text", text: "", annotations: [] } }));
    events.push(ev("response.output_text.delta", { output_index: 0, item_id: item.id, content_index: 0, delta: p.text }));
    events.push(ev("response.output_text.done", { output_index: 0, item_id: item.id, content_index: 0, text: p.text }));
    events.push(ev("response.content_part.done", { output_index: 0, item_id: item.id, content_index: 0, part: { type: "output_text", text: p.text, annotations: [] } }));
  }
  events.push(ev("response.output_item.done", { output_index: 0, item }));
  events.push(ev("response.completed", { response: completed }));
  sse(res, events);
}

// ---- OpenAI Chat Completions ----
function chat(res: ServerResponse, body: Json): void {
  const p = plan(body);
  const id = `chatcmpl-capture-${++seq}`;
  const model = String(body.model ?? "capture");
  const created = Math.floor(Date.now() / 1000);
  const toolCall = p.kind === "tool" ? { id: `call_capture_${seq}`, type: "function", function: { name: p.tool!.name, arguments: JSON.stringify(p.tool!.args) } } : undefined;
  const finish = p.kind === "tool" ? "tool_calls" : "stop";
  const usage = { prompt_tokens: USAGE_IN, completion_tokens: 5, total_tokens: USAGE_IN + 5, prompt_tokens_details: { cached_tokens: 0 } };
  if (!body.stream) {
    const message = toolCall ? { role: "assistant", content: null, tool_calls: [toolCall] } : { role: "assistant", content: p.text };
    json(res, 200, { id, object: "chat.completion", created, model, choices: [{ index: 0, message, finish_reason: finish, logprobs: null }], usage });
    return;
  }
  const chunk = (delta: Json, finish_reason: string | null, extra: Json = {}) => ({ data: { id, object: "chat.completion.chunk", created, model, choices: [{ index: 0, delta, finish_reason, logprobs: null }], ...extra } });
  const events: { data: unknown }[] = [chunk({ role: "assistant", content: "" }, null)];
  if (toolCall) events.push(chunk({ tool_calls: [{ index: 0, ...toolCall }] }, null));
  else events.push(chunk({ content: p.text }, null));
  events.push(chunk({}, finish));
  const opts = body.stream_options as Json | undefined;
  if (opts?.include_usage) events.push({ data: { id, object: "chat.completion.chunk", created, model, choices: [], usage } });
  sse(res, events, true);
}

function models(res: ServerResponse, query: URLSearchParams): void {
  const ids = ["capture-model"];
  const data = ids.map((id) => ({ id, object: "model", type: "model", created: 0, created_at: "2026-01-01T00:00:00Z", owned_by: "agent-edge", display_name: id }));
  json(res, 200, { object: "list", data, has_more: false, first_id: ids[0], last_id: ids.at(-1), ...(query.has("client_version") ? { models: [] } : {}) });
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  let buf: Buffer = Buffer.concat(chunks);
  const enc = req.headers["content-encoding"];
  if (enc === "zstd" || enc === "gzip" || enc === "br" || enc === "deflate") {
    const zlib = await import("node:zlib");
    try {
      buf =
        enc === "gzip"
          ? zlib.gunzipSync(buf)
          : enc === "br"
            ? zlib.brotliDecompressSync(buf)
            : enc === "deflate"
              ? zlib.inflateSync(buf)
              : (zlib as unknown as { zstdDecompressSync(b: Buffer): Buffer }).zstdDecompressSync(buf);
    } catch (e) {
      return `<undecodable ${enc} body: ${(e as Error).message}>`;
    }
  }
  return buf.toString("utf8");
}

const server = createServer(async (req, res) => {
  const url = new URL(req.url ?? "/", `http://127.0.0.1:${PORT}`);
  const text = await readBody(req);
  let body: Json | undefined;
  try {
    body = text ? (JSON.parse(text) as Json) : undefined;
  } catch {
    body = undefined;
  }
  const entry = { t: new Date().toISOString(), method: req.method, path: url.pathname, query: Object.fromEntries(url.searchParams), headers: req.headers, body: body ?? (text || undefined) };
  appendFileSync(LOG, `${JSON.stringify(entry)}\n`);
  const path = url.pathname.replace(/\/+$/, "");
  try {
    if (req.method === "POST" && path.endsWith("/messages/count_tokens")) return json(res, 200, { input_tokens: USAGE_IN });
    if (req.method === "POST" && path.endsWith("/messages") && body) return anthropic(res, body);
    if (req.method === "POST" && path.endsWith("/responses") && body) return responses(res, body);
    if (req.method === "POST" && path.endsWith("/chat/completions") && body) return chat(res, body);
    if (req.method === "GET" && path.endsWith("/models")) return models(res, url.searchParams);
    json(res, 404, { error: { type: "not_found_error", message: `capture server: no route for ${req.method} ${url.pathname}` } });
  } catch (e) {
    json(res, 500, { error: { type: "api_error", message: String(e) } });
  }
});

server.listen(PORT, "127.0.0.1", () => console.log(`capture server on http://127.0.0.1:${PORT}, logging to ${LOG}`));
