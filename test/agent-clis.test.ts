import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { materializeModel, tinyDemoConfig } from "../gpu-backend/model/checkpoint/demo-model";
import { freePort, repoRoot, startStack, type Stack } from "../scripts/stack";
import {
  API_KEY,
  cachedShare,
  CLIENTS_DIR,
  CLIS,
  installedVersion,
  makeCliFolders,
  runCli,
  startRecordingProxy,
  type CliRun,
  writeExchanges,
  type Exchange,
  type RecordingProxy,
} from "./support/cli-clients";

/**
 * The real coding-agent CLIs (Claude Code, Codex CLI, OpenCode, Qwen Code; pinned in
 * test/clients/package.json) run unchanged against the local stack (a backend process and
 * `wrangler dev`), each in its default configuration (docs/clients.md): only the base URL, the key
 * and telemetry / update switches, a throwaway HOME (shared by its two sessions, as one user's
 * are), a fresh git folder to work in. They reach the edge through a recording loopback proxy, so
 * every request and answer is on record.
 *
 * The backend serves a tiny random model with a 32k context (the CLIs' prompts are 12-14k tokens)
 * and runs with `--demo-agent`: a reply to a request with tools whose last message is the user's
 * is constrained to a tool call, and every reply is short and ends as a trained model's would. So
 * turn 1 of a run calls a tool, the CLI runs it and sends its result, and turn 2 answers text,
 * which ends the run.
 *
 * Per CLI, two sessions in the same folder (different prompts), then:
 * 1. each run exits 0 within RUN_TIMEOUT_MS;
 * 2. session 1 sent a request whose transcript carries the CLI's tool result;
 * 3. session 1's trajectory (the id the edge answered in `x-trajectory-id`: the CLI's session id,
 *    or for Qwen Code, which names none, the derived `conv_<hash>` of DERIVED_SESSIONS) has >= 2
 *    turns and every turn after the first is a delta turn with cached/prompt >= 0.95;
 * 4. session 2's first main turn reuses the shared prefix: cached/prompt >= SECOND_SESSION_SHARE
 *    (0.75 for Claude Code, 0.9 for the others; read from its trajectory, or from the answer's usage
 *    when the turn was stateless).
 *
 * Wall times per run are printed; every exchange of every run (request bodies, answers) is written
 * to test/artifacts/agent-clis/<cli>#<run>.jsonl. Without `npm ci --prefix test/clients` the file
 * is skipped (outside CI) or fails (in CI).
 */
const RUN_TIMEOUT_MS = 300_000;
const DELTA_SHARE = 0.95;
/**
 * Session 2's first turn, cached/prompt (its prompt differs from session 1's).
 * - Claude Code: its first system block (`x-anthropic-billing-header: cc_version=<version>.<3 hex
 *   that follow the first prompt>`) differs between the sessions and is left out of the prompt by
 *   the edge. Even so the prefix ends at the user's prompt, and after it comes the ~9 kB
 *   `system`-role message (environment, skills): the two requests share 81% of their characters
 *   (40.6k of 50.2k, measured on 2.1.332), so about 0.8 of the tokens is the most a second session
 *   can reuse (measured on main c26d93d: 9664 of 11843, 0.82); 0.75 asserts that reuse.
 * - Codex, OpenCode, Qwen Code: nothing session-specific comes before the user's prompt but ids the
 *   edge does not render (Codex's item ids and metadata); their prompts end near the end of the
 *   request (measured on c26d93d: Codex 16096 of 16118, OpenCode 7184 of 7208, Qwen Code 13664 of
 *   13684).
 */
const SECOND_SESSION_SHARE: Record<string, number> = { "claude-code": 0.75, codex: 0.9, opencode: 0.9, "qwen-code": 0.9 };
const PROMPTS = ["List the files in this folder, then say done.", "Read README.md and tell me in one line what it says."];

const ARTIFACTS = join(repoRoot, "test", "artifacts", "agent-clis");

const versions = new Map(CLIS.map((c) => [c.name, installedVersion(c)] as const));
const missing = CLIS.filter((c) => versions.get(c.name) === undefined).map((c) => c.name);
const INSTALL = "npm ci --prefix test/clients --no-audit --no-fund";
const SKIP = missing.length > 0 && !process.env.CI;
if (SKIP) console.warn(`[agent-clis] skipped: ${missing.join(", ")} not installed in ${CLIENTS_DIR} (run: ${INSTALL})`);

/** Whether a request offers tools (Codex 0.171: in an `additional_tools` input item). */
const hasTools = (b: Record<string, unknown> | undefined): boolean =>
  !!b && ((Array.isArray(b.tools) && b.tools.length > 0) || (Array.isArray(b.input) && b.input.some((i) => (i as { type?: unknown }).type === "additional_tools")));

interface SessionState {
  turns: { turn: number; mode: string; full_reason: string | null; prompt_tokens: number; cached_tokens: number; prefix_break: Record<string, unknown> | null }[];
}

describe.skipIf(SKIP)("coding-agent CLIs against the local stack (wrangler dev + backend --demo-agent)", () => {
  if (missing.length > 0) {
    it("has the CLIs installed", () => {
      throw new Error(`${missing.join(", ")} not installed in ${CLIENTS_DIR}: CI must run \`${INSTALL}\``);
    });
    return;
  }

  let stack: Stack | undefined;
  let proxy: RecordingProxy | undefined;
  let modelRoot: string | undefined;
  const logTail: string[] = [];

  beforeAll(async () => {
    modelRoot = mkdtempSync(join(tmpdir(), "agent-edge-clis-"));
    // The tiny test model with a context that holds the CLIs' 12-14k-token prompts.
    const modelDir = await materializeModel({ dir: join(modelRoot, "tiny-32k"), config: { ...tinyDemoConfig(), maxPositionEmbeddings: 32768 }, seed: 1, modelId: "tiny-llama-random-32k" });
    const [edgePort, inspectorPort, backendPort] = [await freePort(), await freePort(), await freePort()];
    stack = await startStack({
      modelDir,
      backendPorts: [backendPort],
      edgePort,
      inspectorPort,
      persistTo: join(modelRoot, "wrangler-state"),
      kvMemory: "512MiB",
      threads: 1,
      backendArgs: ["--demo-agent"],
      // As under `npm start`: a request with tools that names no session (Qwen Code) runs in a
      // trajectory named by its start (`conv_<hash>`), so its later turns can be delta turns.
      vars: { DERIVED_SESSIONS: "on" },
      onLine: (line) => {
        logTail.push(line);
        if (logTail.length > 200) logTail.shift();
      },
    });
    // Codex runs its Responses turns over the edge's WebSocket (AGENT_CLIS_WEBSOCKETS=0: over HTTP, after a 426).
    proxy = await startRecordingProxy(stack.edgeUrl, { websockets: process.env.AGENT_CLIS_WEBSOCKETS !== "0" });
  });

  afterAll(async () => {
    await proxy?.close();
    await stack?.stop();
    if (modelRoot) rmSync(modelRoot, { recursive: true, force: true });
  });

  const trajectory = async (id: string): Promise<SessionState> => {
    const res = await fetch(`${stack!.edgeUrl}/v1/tenants/local/trajectories/${encodeURIComponent(id)}`, { headers: { authorization: `Bearer ${API_KEY}` } });
    expect(res.status, `GET trajectory ${id}`).toBe(200);
    return (await res.json()) as SessionState;
  };

  for (const spec of CLIS) {
    describe(`${spec.name} ${versions.get(spec.name)}`, () => {
      const runs: { label: string; run: CliRun; exchanges: Exchange[] }[] = [];
      let folders: ReturnType<typeof makeCliFolders> | undefined;

      beforeAll(async () => {
        folders = makeCliFolders(spec.name);
        for (const [i, prompt] of PROMPTS.entries()) {
          const label = `${spec.name}#${i + 1}`;
          const home = folders.home;
          const { env, args } = spec.setup(home, proxy!.url);
          proxy!.label = label;
          const run = await runCli(join(CLIENTS_DIR, "node_modules", ".bin", spec.bin), args(prompt), { cwd: folders.work, home, env, timeoutMs: RUN_TIMEOUT_MS });
          const exchanges = proxy!.exchanges.filter((x) => x.run === label);
          runs.push({ label, run, exchanges });
          const calls = exchanges.filter((x) => x.path.split("?")[0] === spec.endpoint);
          console.log(
            `[agent-clis] ${label} ${versions.get(spec.name)}: exit ${run.code ?? run.signal}${run.timedOut ? " (timed out)" : ""} in ${(run.ms / 1000).toFixed(1)} s; ` +
              `${exchanges.length} requests (${calls.length} to ${spec.endpoint}: ${calls.map((x) => x.status).join(" ")}); trajectories ${[...new Set(calls.map((x) => x.responseHeaders["x-trajectory-id"]).filter(Boolean))].join(", ") || "none"}`,
          );
        }
      }, 2 * RUN_TIMEOUT_MS + 60_000);

      afterAll(() => {
        for (const r of runs) writeExchanges(join(ARTIFACTS, `${r.label}.jsonl`), r.exchanges);
        if (folders) rmSync(folders.root, { recursive: true, force: true });
      });

      /** What a failure message shows: the run's exit, output tails and each exchange. */
      const context = (i: number) => {
        const r = runs[i];
        if (!r) return "no run";
        const xs = r.exchanges.map((x) => `${x.method} ${x.path} -> ${x.status} ${String(x.responseHeaders["x-trajectory-id"] ?? "")} ${x.status >= 400 ? x.responseHead.slice(0, 400) : ""}`);
        return [`exit ${r.run.code ?? r.run.signal} timedOut=${r.run.timedOut}`, `stdout: ${r.run.stdout.slice(-1500)}`, `stderr: ${r.run.stderr.slice(-1500)}`, ...xs, "stack log tail:", ...logTail.slice(-30)].join("\n");
      };
      const mainCalls = (i: number) => (runs[i]?.exchanges ?? []).filter((x) => x.path.split("?")[0] === spec.endpoint && x.responseHeaders["x-agent-edge-side"] !== "true" && (x.method === "POST" || x.method === "WS"));
      /**
       * The trajectory a run's session ran in: the `x-trajectory-id` answered to its first main
       * turn (a subagent, which starts later, has a trajectory of its own).
       */
      const trajectoryOf = (i: number): string | undefined => {
        const id = mainCalls(i).find((x) => typeof x.responseHeaders["x-trajectory-id"] === "string")?.responseHeaders["x-trajectory-id"];
        return typeof id === "string" ? id : undefined;
      };

      it("runs a non-interactive prompt to completion (exit 0), twice", () => {
        for (const i of [0, 1]) {
          expect(runs[i]?.run.timedOut, context(i)).toBe(false);
          expect(runs[i]?.run.code, context(i)).toBe(0);
        }
      });

      it("makes a tool round trip: a request carries the CLI's tool result", () => {
        const withResult = mainCalls(0).filter((x) => x.body && spec.hasToolResult(x.body));
        expect(withResult.length, context(0)).toBeGreaterThan(0);
        expect(withResult.every((x) => x.status === 200), context(0)).toBe(true);
      });

      it(`continues its trajectory in delta turns (cached/prompt >= ${DELTA_SHARE})`, async () => {
        const id = trajectoryOf(0);
        expect(id, `no x-trajectory-id on ${spec.name}'s turns: the edge kept no trajectory for its session\n${context(0)}`).toBeDefined();
        // The trajectory is the CLI's session: the id its session header names.
        const sessions = new Set(mainCalls(0).map((x) => (spec.sessionHeader ? x.requestHeaders[spec.sessionHeader] : undefined)));
        if (spec.sessionHeader) expect([...sessions].some((s) => typeof s === "string" && id!.includes(s)), `${id} vs ${spec.sessionHeader}: ${[...sessions].join(", ")}`).toBe(true);
        const state = await trajectory(id!);
        const turns = state.turns.map((t) => ({ turn: t.turn, mode: t.mode, full_reason: t.full_reason, share: t.prompt_tokens > 0 ? t.cached_tokens / t.prompt_tokens : 0, cached: t.cached_tokens, prompt: t.prompt_tokens, prefix_break: t.prefix_break }));
        console.log(`[agent-clis] ${spec.name} trajectory ${id}: ${JSON.stringify(turns)}`);
        expect(turns.length, JSON.stringify(turns)).toBeGreaterThanOrEqual(2);
        for (const t of turns.slice(1)) {
          expect(t.mode, JSON.stringify(turns)).toBe("delta");
          expect(t.share, JSON.stringify(turns)).toBeGreaterThanOrEqual(DELTA_SHARE);
        }
      });

      it(`reuses the shared prefix in a second session (first turn cached/prompt >= ${SECOND_SESSION_SHARE[spec.name]})`, async () => {
        const id = trajectoryOf(1);
        let share: { cached: number; prompt: number } | undefined;
        let source: string;
        if (id !== undefined) {
          expect(id).not.toBe(trajectoryOf(0));
          const first = (await trajectory(id)).turns[0];
          share = first && { cached: first.cached_tokens, prompt: first.prompt_tokens };
          source = `trajectory ${id} turn 1`;
        } else {
          // Stateless turns (no session id): the answer's usage says what the backend reused. The
          // first main turn is the first request with tools (a side request has none).
          const first = mainCalls(1).find((x) => x.status === 200 && hasTools(x.body));
          share = cachedShare(spec.endpoint, first?.usage);
          source = `usage of the first ${spec.endpoint} answer (stateless)`;
        }
        console.log(`[agent-clis] ${spec.name} second session: ${source}: ${JSON.stringify(share)}`);
        expect(share, `${source}\n${context(1)}`).toBeDefined();
        expect(share!.prompt, source).toBeGreaterThan(0);
        expect(share!.cached / share!.prompt, `${source}: ${JSON.stringify(share)}`).toBeGreaterThanOrEqual(SECOND_SESSION_SHARE[spec.name]!);
        if (spec.name === "claude-code") {
          // Of the prefix the two sessions share (their system blocks, billing block repaired away,
          // and tools: counted by the edge's count_tokens with a one-word user message), >= 0.9 is reused.
          const body = mainCalls(1).find((x) => x.status === 200 && hasTools(x.body))!.body as { model: string; system: unknown; tools: unknown[] };
          const counted = await fetch(`${stack!.edgeUrl}/v1/messages/count_tokens`, { method: "POST", headers: { "x-api-key": API_KEY, "content-type": "application/json" }, body: JSON.stringify({ model: body.model, system: body.system, tools: body.tools, messages: [{ role: "user", content: "x" }] }) });
          expect(counted.status, await counted.clone().text()).toBe(200);
          const shared = ((await counted.json()) as { input_tokens: number }).input_tokens;
          console.log(`[agent-clis] claude-code second session: ${share!.cached} cached of the ${shared}-token shared prefix (system and tools)`);
          expect(share!.cached / shared).toBeGreaterThanOrEqual(0.9);
        }
      });
    });
  }
});
