import { spawn } from "node:child_process";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, request as httpRequest, type IncomingHttpHeaders } from "node:http";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { brotliDecompressSync, gunzipSync, inflateSync } from "node:zlib";
import { dirname, join } from "node:path";
import { repoRoot } from "../../scripts/stack";
import { textMessages } from "./ws-frames";

/**
 * The four coding-agent CLIs of `test/clients/` (their own package: `npm ci --prefix test/clients`),
 * how each is pointed at a base URL in its default configuration (docs/clients.md: only the base
 * URL, the key and telemetry / update switches, plus the smallest config file where the CLI takes
 * the base URL from nowhere else), a recording loopback proxy, and a bounded run of one CLI.
 */
export const CLIENTS_DIR = join(repoRoot, "test", "clients");
export const CLIENTS_BIN = join(CLIENTS_DIR, "node_modules", ".bin");
export const API_KEY = "sk-local-dev";

type Json = Record<string, unknown>;

export interface CliSpec {
  /** Fixture name, e.g. "claude-code". */
  name: string;
  /** The npm package, for its version. */
  pkg: string;
  /** The binary in node_modules/.bin. */
  bin: string;
  /** The model-call path it posts to. */
  endpoint: "/v1/messages" | "/v1/responses" | "/v1/chat/completions";
  /** Writes its config into the throwaway HOME; returns the env and the argv for a prompt. */
  setup(home: string, baseUrl: string): { env: Record<string, string>; args(prompt: string): string[] };
  /** Whether a request body's transcript holds a tool result. */
  hasToolResult(body: Json): boolean;
  /** The request header that names its session (none: Qwen Code names none). */
  sessionHeader?: string;
}

const json = (v: unknown) => JSON.stringify(v);

export const CLIS: CliSpec[] = [
  {
    name: "claude-code",
    pkg: "@anthropic-ai/claude-code",
    bin: "claude",
    endpoint: "/v1/messages",
    setup: (_home, base) => ({
      env: { ANTHROPIC_BASE_URL: base, ANTHROPIC_API_KEY: API_KEY, DISABLE_TELEMETRY: "1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1", DISABLE_AUTOUPDATER: "1" },
      args: (prompt) => ["-p", prompt],
    }),
    hasToolResult: (b) => json(b.messages ?? []).includes('"type":"tool_result"'),
    sessionHeader: "x-claude-code-session-id",
  },
  {
    name: "codex",
    pkg: "@openai/codex",
    bin: "codex",
    endpoint: "/v1/responses",
    setup: (home, base) => {
      mkdirSync(join(home, ".codex"), { recursive: true });
      writeFileSync(join(home, ".codex", "config.toml"), `openai_base_url = "${base}/v1"\ncheck_for_update_on_startup = false\n\n[analytics]\nenabled = false\n`);
      // `codex exec` reads its key from CODEX_API_KEY (0.171.0 sends no Authorization with OPENAI_API_KEY alone).
      return { env: { CODEX_HOME: join(home, ".codex"), CODEX_API_KEY: API_KEY }, args: (prompt) => ["exec", prompt] };
    },
    hasToolResult: (b) => /"type":"(function_call_output|custom_tool_call_output)"/.test(json(b.input ?? [])),
    sessionHeader: "session-id",
  },
  {
    name: "opencode",
    pkg: "opencode-ai",
    bin: "opencode",
    endpoint: "/v1/chat/completions",
    setup: (home, base) => {
      const dir = join(home, ".config", "opencode");
      mkdirSync(dir, { recursive: true });
      const provider = { npm: "@ai-sdk/openai-compatible", options: { baseURL: `${base}/v1`, apiKey: API_KEY }, models: { default: {} } };
      writeFileSync(join(dir, "opencode.json"), JSON.stringify({ $schema: "https://opencode.ai/config.json", provider: { "agent-edge": provider }, model: "agent-edge/default" }, null, 2));
      return { env: { OPENCODE_DISABLE_AUTOUPDATE: "1", OPENCODE_DISABLE_MODELS_FETCH: "1" }, args: (prompt) => ["run", prompt] };
    },
    hasToolResult: (b) => json(b.messages ?? []).includes('"role":"tool"'),
    sessionHeader: "x-session-id",
  },
  {
    name: "qwen-code",
    pkg: "@qwen-code/qwen-code",
    bin: "qwen",
    endpoint: "/v1/chat/completions",
    setup: (home, base) => {
      mkdirSync(join(home, ".qwen"), { recursive: true });
      writeFileSync(join(home, ".qwen", "settings.json"), JSON.stringify({ security: { auth: { selectedType: "openai" } }, privacy: { usageStatisticsEnabled: false } }));
      return { env: { OPENAI_BASE_URL: `${base}/v1`, OPENAI_API_KEY: API_KEY }, args: (prompt) => ["-p", prompt] };
    },
    hasToolResult: (b) => json(b.messages ?? []).includes('"role":"tool"'),
  },
];

/** The installed version of a CLI's package, or undefined when it is not installed. */
export function installedVersion(spec: CliSpec): string | undefined {
  const file = join(CLIENTS_DIR, "node_modules", spec.pkg, "package.json");
  if (!existsSync(file) || !existsSync(join(CLIENTS_BIN, spec.bin))) return undefined;
  return (JSON.parse(readFileSync(file, "utf8")) as { version: string }).version;
}

/** One exchange that went through the proxy. */
export interface Exchange {
  /** The label the proxy had when the request came (which CLI run). */
  run: string;
  /** The HTTP method, or `WS` for one message on a WebSocket (a Responses `response.create`). */
  method: string;
  path: string;
  requestHeaders: IncomingHttpHeaders;
  body: Json | undefined;
  status: number;
  responseHeaders: IncomingHttpHeaders;
  /** The usage object of the answer (the last one seen in the JSON or SSE body), if any. */
  usage: Json | undefined;
  /** The answer's first 20,000 characters, decompressed (for failure messages and the artifacts). */
  responseHead: string;
  upgrade: boolean;
}

export interface RecordingProxy {
  url: string;
  exchanges: Exchange[];
  /** Tags the exchanges that come next. */
  label: string;
  close(): Promise<void>;
}

/** The last `usage` in a JSON body or in an SSE stream's `data:` objects (at `.usage`, `.message.usage`, `.response.usage`). */
export function usageOf(text: string): Json | undefined {
  const objects: Json[] = [];
  const tryParse = (s: string) => {
    try {
      const v = JSON.parse(s) as unknown;
      if (v && typeof v === "object") objects.push(v as Json);
    } catch {
      /* not JSON */
    }
  };
  if (/^\s*[{[]/.test(text)) tryParse(text);
  else for (const line of text.split("\n")) if (line.startsWith("data:")) tryParse(line.slice(5).trim());
  let usage: Json | undefined;
  for (const o of objects) {
    const u = (o.usage ?? (o.message as Json | undefined)?.usage ?? (o.response as Json | undefined)?.usage) as Json | undefined;
    if (u && typeof u === "object") usage = { ...usage, ...u };
  }
  return usage;
}

/** cached / prompt tokens of a usage object, by API. */
export function cachedShare(endpoint: CliSpec["endpoint"], u: Json | undefined): { cached: number; prompt: number } | undefined {
  if (!u) return undefined;
  const n = (v: unknown) => (typeof v === "number" ? v : 0);
  if (endpoint === "/v1/messages") {
    const cached = n(u.cache_read_input_tokens);
    return { cached, prompt: n(u.input_tokens) + cached + n(u.cache_creation_input_tokens) };
  }
  if (endpoint === "/v1/responses") return { cached: n((u.input_tokens_details as Json | undefined)?.cached_tokens), prompt: n(u.input_tokens) };
  return { cached: n((u.prompt_tokens_details as Json | undefined)?.cached_tokens), prompt: n(u.prompt_tokens) };
}

/** A message as a JSON object, or undefined. */
function jsonOf(text: string): Json | undefined {
  try {
    const v = JSON.parse(text) as unknown;
    return v && typeof v === "object" && !Array.isArray(v) ? (v as Json) : undefined;
  } catch {
    return undefined;
  }
}

/** An answer body as text, decompressed by its content-encoding (the edge compresses for clients that accept it). */
function decoded(buf: Buffer, encoding: string | undefined): string {
  try {
    if (encoding === "gzip") return gunzipSync(buf).toString("utf8");
    if (encoding === "br") return brotliDecompressSync(buf).toString("utf8");
    if (encoding === "deflate") return inflateSync(buf).toString("utf8");
  } catch (e) {
    return `<undecodable ${encoding} body: ${String(e)}>`;
  }
  return buf.toString("utf8");
}

/**
 * A loopback reverse proxy in front of `target` that records every exchange (request headers and
 * JSON body, answer status, headers and usage) and passes bodies through as they stream. A
 * WebSocket upgrade (Codex's Responses transport) is piped to the target as raw TCP, offering no
 * compression, and recorded with the answer's status and headers; each `response.create` on it
 * is recorded as an exchange of its own (method `WS`, the upgrade's request headers and the 101's
 * headers, the message as body; status 200 once `response.completed` or `.incomplete` arrived, an
 * `error` event's status otherwise; its events as the answer). `websockets: false` answers every
 * upgrade 426 instead (the client falls back to HTTP).
 */
export async function startRecordingProxy(target: string, options: { websockets?: boolean } = {}): Promise<RecordingProxy> {
  const t = new URL(target);
  const exchanges: Exchange[] = [];
  const proxy: RecordingProxy = { url: "", exchanges, label: "", close: async () => {} };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks);
      let body: Json | undefined;
      try {
        body = raw.length > 0 && !req.headers["content-encoding"] ? (JSON.parse(raw.toString("utf8")) as Json) : undefined;
      } catch {
        body = undefined;
      }
      const ex: Exchange = { run: proxy.label, method: req.method ?? "", path: req.url ?? "", requestHeaders: req.headers, body, status: 0, responseHeaders: {}, usage: undefined, responseHead: "", upgrade: false };
      exchanges.push(ex);
      const up = httpRequest({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: { ...req.headers, host: t.host } }, (answer) => {
        ex.status = answer.statusCode ?? 0;
        ex.responseHeaders = answer.headers;
        res.writeHead(ex.status, answer.headers);
        const seen: Buffer[] = [];
        answer.on("data", (c: Buffer) => {
          seen.push(c);
          res.write(c);
        });
        answer.on("end", () => {
          const text = decoded(Buffer.concat(seen), answer.headers["content-encoding"]);
          ex.responseHead = text.slice(0, 20_000);
          ex.usage = usageOf(text);
          res.end();
        });
        answer.on("error", () => res.destroy());
      });
      up.on("error", (e) => {
        ex.status = 502;
        ex.responseHead = String(e);
        if (!res.headersSent) res.writeHead(502, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { message: `recording proxy: ${String(e)}` } }));
      });
      up.end(raw);
    });
  });
  server.on("upgrade", (req, socket, head) => {
    const ex: Exchange = { run: proxy.label, method: req.method ?? "", path: req.url ?? "", requestHeaders: req.headers, body: undefined, status: 0, responseHeaders: {}, usage: undefined, responseHead: "", upgrade: true };
    exchanges.push(ex);
    if (options.websockets === false) {
      // As the edge answered before it served the transport: Codex falls back to HTTP at once.
      ex.status = 426;
      const body = JSON.stringify({ error: { message: "recording proxy: WebSockets are off (AGENT_CLIS_WEBSOCKETS=0)", type: "invalid_request_error", code: "upgrade_required", param: null } });
      socket.end(`HTTP/1.1 426 Upgrade Required\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
      return;
    }
    // Each response.create is an exchange of its own (method "WS"), answered by its events, in order.
    const turns: Exchange[] = [];
    const fromClient = textMessages((text) => {
      const event = jsonOf(text);
      if (event?.type !== "response.create") return;
      const { type: _type, ...body } = event;
      const turn: Exchange = { run: proxy.label, method: "WS", path: req.url ?? "", requestHeaders: req.headers, body, status: 0, responseHeaders: ex.responseHeaders, usage: undefined, responseHead: "", upgrade: true };
      turns.push(turn);
      exchanges.push(turn);
    });
    const fromServer = textMessages(
      (text) => {
        const turn = turns[0];
        if (!turn) return;
        if (turn.responseHead.length < 20_000) turn.responseHead += `${text.slice(0, 20_000 - turn.responseHead.length)}\n`;
        const event = jsonOf(text);
        if (event?.type === "response.completed" || event?.type === "response.incomplete") turn.status = 200;
        else if (event?.type === "error") turn.status = typeof event.status === "number" ? event.status : 500;
        else return;
        turn.usage = usageOf(text);
        turns.shift();
      },
      {
        head: true,
        onHead: (answer) => {
          ex.responseHead = answer.slice(0, 500);
          ex.status = Number(/^HTTP\/1\.\d (\d{3})/.exec(answer)?.[1] ?? 0);
          for (const line of answer.split("\r\n").slice(1)) {
            const at = line.indexOf(":");
            if (at > 0) ex.responseHeaders[line.slice(0, at).trim().toLowerCase()] = line.slice(at + 1).trim();
          }
        },
      },
    );
    const upstream = connect(Number(t.port), t.hostname, () => {
      const lines = [`${req.method} ${req.url} HTTP/1.1`];
      // No permessage-deflate offered: the frames stay readable for the recording.
      for (let i = 0; i < req.rawHeaders.length; i += 2) {
        const name = req.rawHeaders[i]!;
        if (name.toLowerCase() === "sec-websocket-extensions") continue;
        lines.push(`${name}: ${name.toLowerCase() === "host" ? t.host : req.rawHeaders[i + 1]}`);
      }
      upstream.write(`${lines.join("\r\n")}\r\n\r\n`);
      if (head.length > 0) {
        fromClient(head);
        upstream.write(head);
      }
      upstream.on("data", fromServer);
      socket.on("data", fromClient);
      upstream.pipe(socket);
      socket.pipe(upstream);
    });
    const end = () => {
      upstream.destroy();
      socket.destroy();
    };
    upstream.on("error", end);
    socket.on("error", end);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  proxy.url = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`;
  proxy.close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return proxy;
}

/** Writes exchanges as JSON lines (request body included) to `file`, for reading after a failure. */
export function writeExchanges(file: string, exchanges: Exchange[]): void {
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, exchanges.map((x) => JSON.stringify(x)).join("\n") + "\n");
}

/**
 * A fresh temp folder with a git repository holding a README (`work`) and a throwaway HOME beside
 * it (`home`), which both sessions of a CLI share, as one user's sessions do (Qwen Code's system
 * prompt names a file under HOME, so a HOME per session would split the shared prefix).
 */
export function makeCliFolders(name: string): { root: string; work: string; home: string } {
  const root = mkdtempSync(join(tmpdir(), `agent-edge-cli-${name}-`));
  const work = join(root, "work");
  const home = join(root, "home");
  mkdirSync(work);
  mkdirSync(home);
  writeFileSync(join(work, "README.md"), "# Scratch\n\nA file for the agent to read.\n");
  const git = (...args: string[]) => execFileSync("git", ["-c", "user.email=test@example.invalid", "-c", "user.name=test", ...args], { cwd: work, stdio: "ignore" });
  git("init", "-q");
  git("add", "-A");
  git("commit", "-qm", "init");
  return { root, work, home };
}

export interface CliRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  ms: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs a CLI once, in `cwd`, with only `env` plus PATH / HOME / XDG dirs of `home` (nothing of the
 * caller's environment leaks in), stdin closed, in its own process group; past `timeoutMs` the
 * whole group is killed.
 */
export function runCli(bin: string, args: string[], options: { cwd: string; home: string; env: Record<string, string>; timeoutMs: number }): Promise<CliRun> {
  const { home } = options;
  const env = {
    PATH: `${dirname(process.execPath)}:/usr/local/bin:/usr/bin:/bin`,
    HOME: home,
    USER: "tester",
    TERM: "dumb",
    LANG: "C.UTF-8",
    XDG_CONFIG_HOME: join(home, ".config"),
    XDG_DATA_HOME: join(home, ".local", "share"),
    XDG_CACHE_HOME: join(home, ".cache"),
    XDG_STATE_HOME: join(home, ".local", "state"),
    ...options.env,
  };
  const t0 = performance.now();
  return new Promise((resolve) => {
    const child = spawn(bin, args, { cwd: options.cwd, env, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let stdout = "";
    let stderr = "";
    let timedOut = false;
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString("utf8")));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString("utf8")));
    const kill = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
      } catch {
        /* already gone */
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, options.timeoutMs);
    child.on("error", (e) => {
      clearTimeout(timer);
      resolve({ code: null, signal: null, timedOut, ms: performance.now() - t0, stdout, stderr: `${stderr}\n${String(e)}` });
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      kill(); // whatever the CLI left running in its group
      resolve({ code, signal, timedOut, ms: performance.now() - t0, stdout, stderr });
    });
  });
}
