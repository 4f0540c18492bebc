import { availableParallelism } from "node:os";
import OpenAI, { APIConnectionError, APIConnectionTimeoutError, APIError } from "openai";
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Stack, StackPart } from "../scripts/stack";
import { startTestStack, type TestStack } from "./support/stack-fixture";

/**
 * The pool under load, end to end: three real backend processes registered with the edge's pool
 * by heartbeat (what `npm start -- --backends 3` runs), six concurrent multi-turn trajectories
 * driven by the official `openai` client (half through `/v1/chat/completions` resending the
 * whole transcript, half through trajectory URLs appending only new messages; streaming and not).
 * Mid-trajectory, while turns are in flight, the backend holding the most trajectories is
 * SIGKILLed. Every trajectory must still reach its last turn, retrying only retryable errors,
 * and end with exactly the transcript the client holds, its turns moved to surviving backends,
 * and the pool reporting the dead backend down.
 */
const MODEL = "tiny-llama-random";
const TRAJECTORIES = 6;
const TURNS = 6;
/** The turn during which the busiest backend is killed (every trajectory waits before it). */
const KILL_TURN = 3;
const MAX_TOKENS = 8;
/**
 * Turns on the doomed backend are long, so they are in flight when it dies: the tiny model decodes
 * 200 tokens in 0.3-0.5 s on one idle core, so at 200 a client slowed by a busy machine (CI runs
 * the test projects in parallel) saw its first chunk after the turn had ended on the backend, and
 * the kill missed it (once in the six runs of 2026-12-03 that ran it). 1,000 tokens leave it seconds.
 */
const KILL_TURN_MAX_TOKENS = 1000;
/** Attempts per turn; only 503 backend_unavailable / 409 trajectory_busy are retried. */
const MAX_ATTEMPTS = 6;
const RETRYABLE = new Set(["backend_unavailable", "trajectory_busy"]);
/**
 * wrangler dev's proxy, when the local runtime it fronts restarted during a POST, answers this 503
 * (no error code) and asks for the request to be sent again: a development-server event, not the
 * edge's answer. Seen in about 1 run in 5 of this test, right after the kill (turn KILL_TURN + 1);
 * retried like a retryable error and recorded as `dev_runtime_restarted`.
 */
const DEV_RUNTIME_RESTARTED = /^503 Your worker restarted mid-request\. Please try sending the request again\./;
/**
 * A request that never got an answer (the client's socket closed or reset: under CI load one run
 * in about 20 saw a non-streaming session turn fail so, right after the kill, on a trajectory the
 * kill did not touch; a keep-alive socket the server closed while the client was stalled is the
 * usual cause). The client cannot know whether the turn ran, so it retries with the same
 * Idempotency-Key, as the edge asks (docs/edge.md): a turn that finished is replayed, one that did
 * not runs again. The exact-transcript checks below catch a duplicate. Recorded as
 * `connection_error`.
 */
const isConnectionError = (e: unknown): boolean => e instanceof APIConnectionError && !(e instanceof APIConnectionTimeoutError);

type Kind = "chat" | "session";

interface TurnRecordView {
  turn: number;
  mode: "delta" | "full";
  full_reason: string | null;
  backend: string;
  completion_tokens: number;
}

interface TrajectoryView {
  message_count: number;
  backend: string | null;
  turns: TurnRecordView[];
}

interface PoolBackendView {
  id: string;
  url: string;
  up: boolean;
  source: "registered" | "static";
  running: number;
  waiting: number;
}

interface Attempt {
  turn: number;
  attempt: number;
  stream: boolean;
  sentAt: number;
  endedAt: number;
  /** Undefined when it succeeded, else the error code (retryable ones only; others fail the test). */
  error?: string;
  /** Content tokens (chunks) received before it ended. */
  chunks: number;
}

interface Trajectory {
  index: number;
  id: string;
  kind: Kind;
  client: OpenAI;
  /** What the client holds: every message it sent and every reply it got, in order. */
  expected: ChatCompletionMessageParam[];
  attempts: Attempt[];
  /** Per completed turn (1-based index - 1): when its successful attempt was sent. */
  successSentAt: number[];
}

describe("pool: 3 registered backends, the busiest SIGKILLed mid-trajectory", () => {
  let fixture: TestStack | undefined;
  let stack: Stack;
  const lines: string[] = [];
  const auth = { authorization: "Bearer sk-local-dev", "content-type": "application/json" };

  beforeAll(async () => {
    // As `npm start -- --backends 3` does (scripts/start.ts), on free ports instead of 8080-8082.
    fixture = await startTestStack({
      name: "pool-kill",
      backends: 3,
      kvMemory: "64MiB",
      threads: Math.max(1, Math.floor(availableParallelism() / 3)),
      onLine: (line) => {
        lines.push(line);
        if (lines.length > 400) lines.shift();
      },
    });
    ({ stack } = fixture);
  }, 600_000);

  afterAll(() => fixture?.stop());

  const pool = async (): Promise<PoolBackendView[]> => {
    const res = await fetch(`${stack.edgeUrl}/v1/pool`, { headers: { "x-agent-edge-secret": stack.secret } });
    expect(res.status).toBe(200);
    return ((await res.json()) as { backends: PoolBackendView[] }).backends;
  };
  const state = async (id: string): Promise<TrajectoryView> => {
    const res = await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories/${id}`, { headers: auth });
    expect(res.status, `GET state of ${id}`).toBe(200);
    return (await res.json()) as TrajectoryView;
  };
  const poll = async <T>(what: string, read: () => Promise<T>, ok: (v: T) => boolean, timeoutMs: number): Promise<T> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const v = await read();
      if (ok(v)) return v;
      if (Date.now() > deadline) throw new Error(`${what}: not so within ${timeoutMs} ms; last: ${JSON.stringify(v)}`);
      await sleep(250);
    }
  };

  it(
    "completes every trajectory with its transcript intact; turns after the kill run on survivors; the pool reports the killed backend down",
    async () => {
      const backends = stack.parts.filter((p) => p.kind === "backend");
      expect(backends).toHaveLength(3);

      // The backends registered themselves (heartbeats), superseding the static BACKEND_URLS entries.
      const registered = await poll(
        "3 registered backends up",
        pool,
        (bs) => stack.backendUrls.every((url) => bs.some((b) => b.url === url && b.source === "registered" && b.up)),
        60_000,
      );
      expect(registered.filter((b) => b.source === "registered").map((b) => b.id).sort()).toEqual(backends.map((b) => b.name).sort());

      const tag = Math.random().toString(36).slice(2, 8);
      const trajectories: Trajectory[] = [];
      for (let index = 0; index < TRAJECTORIES; index++) {
        const id = `pool-kill-${tag}-${index}`;
        const kind: Kind = index % 2 === 0 ? "chat" : "session";
        let client: OpenAI;
        if (kind === "chat") {
          client = new OpenAI({ apiKey: "sk-local-dev", baseURL: `${stack.edgeUrl}/v1`, maxRetries: 0, defaultHeaders: { "x-trajectory-id": id } });
        } else {
          // The trajectory URL takes append-only turns at .../turns (same body and answer as chat completions).
          const created = await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories`, { method: "POST", headers: auth, body: JSON.stringify({ id }) });
          expect(created.status).toBe(201);
          client = new OpenAI({
            apiKey: "sk-local-dev",
            baseURL: `${stack.edgeUrl}/v1/tenants/local/trajectories/${id}`,
            maxRetries: 0,
            fetch: (input, init) => fetch(String(input instanceof Request ? input.url : input).replace(/\/chat\/completions$/, "/turns"), init),
          });
        }
        // Distinct system prompts: no shared prefix, so placement spreads them by load and hash.
        const system = `You are agent ${index} (${tag}) of a fleet. ${"Keep to the plan and report progress. ".repeat(12)}`;
        trajectories.push({ index, id, kind, client, expected: [{ role: "system", content: system }], attempts: [], successSentAt: [] });
      }

      // The kill: planned once every trajectory has finished turn KILL_TURN - 1.
      let arrived = 0;
      let allArrived!: () => void;
      const allAtBarrier = new Promise<void>((r) => (allArrived = r));
      let release!: () => void;
      const released = new Promise<void>((r) => (release = r));
      let victim: StackPart | undefined;
      let victimPinned = new Set<number>();
      let triggerIndex = -1;
      let killAt: number | undefined;
      let inFlightAtKill: number[] = [];
      const inFlight = new Set<number>();
      const kill = () => {
        if (killAt !== undefined || !victim) return;
        inFlightAtKill = [...inFlight].sort();
        expect(victim.process.signalGroup("SIGKILL")).toBe(true);
        killAt = Date.now();
      };

      const runTurn = async (t: Trajectory, turn: number) => {
        const onVictimKillTurn = turn === KILL_TURN && victimPinned.has(t.index);
        // Streaming alternates by trajectory and turn; on the kill turn the victim's trajectories
        // alternate by rank, the trigger streaming, so both kinds of answer are in flight when it dies.
        const rank = [...victimPinned].sort((a, b) => a - b).indexOf(t.index);
        const stream = onVictimKillTurn ? rank % 2 === 0 : (t.index + turn) % 2 === 0;
        const maxTokens = onVictimKillTurn ? KILL_TURN_MAX_TOKENS : MAX_TOKENS;
        const user: ChatCompletionMessageParam = { role: "user", content: `Trajectory ${t.index}, step ${turn}: carry on.` };
        // chat: the whole transcript each turn; session: only the new messages (the first turn has the system prompt too).
        const messages = t.kind === "chat" ? [...t.expected, user] : turn === 1 ? [...t.expected, user] : [user];
        // One key per turn, kept across its attempts (what the SDK's own retries do).
        const options = { idempotencyKey: `${t.id}-turn-${turn}` };
        for (let attempt = 1; ; attempt++) {
          const a: Attempt = { turn, attempt, stream, sentAt: Date.now(), endedAt: 0, chunks: 0 };
          t.attempts.push(a);
          inFlight.add(t.index);
          try {
            let content: string | null;
            if (stream) {
              const s = await t.client.chat.completions.create({ model: MODEL, messages, max_tokens: maxTokens, temperature: 0, stream: true }, options);
              let text = "";
              let finish: string | null = null;
              for await (const chunk of s) {
                const choice = chunk.choices[0];
                if (choice?.delta?.content) {
                  text += choice.delta.content;
                  a.chunks += 1;
                  if (t.index === triggerIndex && turn === KILL_TURN) kill();
                }
                if (choice?.finish_reason) finish = choice.finish_reason;
              }
              // A stream that ends without a finish reason and without an error event is a truncated answer.
              if (finish === null) throw new Error(`${t.id} turn ${turn}: the stream ended without a finish_reason and without an error (${a.chunks} chunks)`);
              content = text;
            } else {
              const r = await t.client.chat.completions.create({ model: MODEL, messages, max_tokens: maxTokens, temperature: 0 }, options);
              expect(r.choices[0]?.finish_reason, `${t.id} turn ${turn}`).toMatch(/^(stop|length)$/);
              content = r.choices[0]!.message.content;
            }
            a.endedAt = Date.now();
            t.expected.push(user, { role: "assistant", content });
            t.successSentAt.push(a.sentAt);
            return;
          } catch (e) {
            a.endedAt = Date.now();
            const devRestart = e instanceof APIError && e.status === 503 && e.code == null && DEV_RUNTIME_RESTARTED.test(e.message);
            const connection = isConnectionError(e);
            const code = devRestart ? "dev_runtime_restarted" : connection ? "connection_error" : e instanceof APIError ? String(e.code ?? "") : "";
            const statusOk = e instanceof APIError && (e.status === undefined || e.status === 503 || e.status === 409);
            if (!devRestart && !connection && !(statusOk && RETRYABLE.has(code))) {
              throw new Error(`${t.id} turn ${turn} attempt ${attempt}: non-retryable failure: ${causeChain(e)} (status ${e instanceof APIError ? e.status : "-"}, code ${code || "-"})`, { cause: e });
            }
            a.error = code;
            if (attempt >= MAX_ATTEMPTS) throw new Error(`${t.id} turn ${turn}: still ${code} after ${attempt} attempts`, { cause: e });
            await sleep(300 * attempt);
          } finally {
            inFlight.delete(t.index);
          }
        }
      };

      const drive = async (t: Trajectory) => {
        for (let turn = 1; turn <= TURNS; turn++) {
          if (turn === KILL_TURN) {
            if (++arrived === TRAJECTORIES) allArrived();
            await released;
          }
          await runTurn(t, turn);
        }
      };

      const t0 = Date.now();
      const driving = Promise.allSettled(trajectories.map(drive));
      // Every trajectory is at the barrier unless one failed first (then allSettled reports it).
      await Promise.race([allAtBarrier, driving]);
      expect(arrived, "every trajectory reached the kill turn").toBe(TRAJECTORIES);

      // Where each trajectory is pinned now (the Durable Object's pinned backend URL).
      const pinsBefore = await Promise.all(trajectories.map(async (t) => (await state(t.id)).backend));
      const counts = new Map<string, number>();
      for (const url of pinsBefore) {
        expect(stack.backendUrls).toContain(url);
        counts.set(url!, (counts.get(url!) ?? 0) + 1);
      }
      const [victimUrl, victimCount] = [...counts].sort((a, b) => b[1] - a[1])[0]!;
      victim = backends.find((p) => p.url === victimUrl)!;
      victimPinned = new Set(trajectories.filter((_, i) => pinsBefore[i] === victimUrl).map((t) => t.index));
      expect(victimPinned.size).toBe(victimCount);
      expect(victimPinned.size, "the victim holds at least one trajectory").toBeGreaterThanOrEqual(1);
      // The first trajectory on the victim streams its kill turn and pulls the trigger at its first token.
      triggerIndex = Math.min(...victimPinned);
      // Let the pool see the backends idle again (a heartbeat after turn KILL_TURN - 1) and the
      // trajectory objects' cached views expire (POOL_VIEW_TTL_MS, 1 s), so that a stale load
      // cannot move a trajectory off the victim by the load bound just before it dies.
      await poll("every backend idle in the pool", pool, (bs) => bs.filter((b) => b.source === "registered").every((b) => b.running + b.waiting === 0 && b.up), 15_000);
      await sleep(1200);
      release();

      const results = await driving;
      const failures = results.flatMap((r, i) => (r.status === "rejected" ? [`${trajectories[i]!.id}: ${(r.reason as Error).message}`] : []));
      expect(failures, `every trajectory completes (victim ${victim.name})\n${victimTail(victim)}`).toEqual([]);
      const driveSeconds = (Date.now() - t0) / 1000;

      // The kill happened, by SIGKILL, while the trigger's turn (at least) was in flight on the victim.
      expect(killAt, "the victim was killed").toBeDefined();
      const exit = await Promise.race([victim.process.exited, sleep(10_000).then(() => undefined)]);
      expect(exit?.signal).toBe("SIGKILL");
      expect(inFlightAtKill).toContain(triggerIndex);
      const trigger = trajectories[triggerIndex]!;
      const triggerKillAttempt = trigger.attempts.find((a) => a.turn === KILL_TURN && a.attempt === 1)!;
      expect(triggerKillAttempt.stream).toBe(true);
      // Killed after its first token, long before its 1,000 tokens: a clear retryable error mid-stream.
      if (triggerKillAttempt.error !== "backend_unavailable") {
        // Seen once under CI load (2026-12-05): the kill missed the trigger's turn. Say where that turn ran and when.
        const record = (await state(trigger.id)).turns[KILL_TURN - 1];
        const when = { sentAt: triggerKillAttempt.sentAt - t0, killAt: killAt! - t0, endedAt: triggerKillAttempt.endedAt - t0 };
        expect.fail(`${trigger.id}'s kill-turn stream ended with ${triggerKillAttempt.error ?? "success"} after ${triggerKillAttempt.chunks} chunks (ms from the drive's start: ${JSON.stringify(when)}); victim ${victim.name}; its turn record: ${JSON.stringify(record)}`);
      }
      expect(triggerKillAttempt.chunks).toBeGreaterThanOrEqual(1);

      // The pool reports the killed backend down (missed heartbeats), the survivors up.
      const poolAfter = await poll(
        `${victim.name} reported down`,
        pool,
        (bs) => bs.some((b) => b.url === victimUrl && !b.up),
        30_000,
      );
      const victimEntry = poolAfter.find((b) => b.url === victimUrl)!;
      expect(victimEntry).toMatchObject({ id: victim.name, source: "registered", up: false });
      for (const url of stack.backendUrls.filter((u) => u !== victimUrl)) {
        expect(poolAfter.find((b) => b.url === url), url).toMatchObject({ source: "registered", up: true });
      }

      const summary: string[] = [];
      for (const t of trajectories) {
        const s = await state(t.id);
        const where = `${t.id} (${t.kind}${victimPinned.has(t.index) ? ", pinned to the victim" : ""})`;
        // Exactly one turn record per completed turn, in order; exactly the client's messages.
        expect(s.turns.map((r) => r.turn), where).toEqual(Array.from({ length: TURNS }, (_, i) => i + 1));
        expect(t.successSentAt).toHaveLength(TURNS);
        expect(t.expected).toHaveLength(1 + 2 * TURNS);
        expect(s.message_count, `${where}: stored messages`).toBe(t.expected.length);
        // A full resend is only ever for a reason a kill explains, never a transcript that differs.
        for (const r of s.turns) {
          expect(r.full_reason === null || ["first-turn", "failover", "backend-changed", "state-unknown"].includes(r.full_reason), `${where} turn ${r.turn}: ${r.full_reason}`).toBe(true);
        }
        // Turns sent after the kill ran on a surviving backend.
        t.successSentAt.forEach((sentAt, i) => {
          if (sentAt > killAt!) expect(s.turns[i]!.backend, `${where} turn ${i + 1} (sent after the kill)`).not.toBe(victim!.name);
        });
        expect(s.turns[TURNS - 1]!.backend).not.toBe(victim.name);
        expect(s.backend).not.toBe(victimUrl);
        expect(stack.backendUrls).toContain(s.backend);
        if (victimPinned.has(t.index)) {
          // Affinity moved: the victim served a prefix of the turns, then a full turn on a survivor.
          const firstElsewhere = s.turns.findIndex((r) => r.backend !== victim!.name);
          expect(firstElsewhere, where).toBeGreaterThanOrEqual(KILL_TURN - 1);
          expect(s.turns.slice(0, firstElsewhere).every((r) => r.backend === victim!.name), where).toBe(true);
          expect(s.turns.slice(firstElsewhere).every((r) => r.backend !== victim!.name), where).toBe(true);
          expect(s.turns[firstElsewhere], where).toMatchObject({ mode: "full", full_reason: expect.stringMatching(/^(failover|backend-changed)$/) });
        }

        // The stored transcript is exactly what the client holds: one more turn resending all of it
        // through chat completions extends it (no "diverged"), and grows it by exactly two.
        const chat = new OpenAI({ apiKey: "sk-local-dev", baseURL: `${stack.edgeUrl}/v1`, maxRetries: 0, defaultHeaders: { "x-trajectory-id": t.id } });
        const probe = await chat.chat.completions.create({ model: MODEL, messages: [...t.expected, { role: "user", content: "Final check." }], max_tokens: 2, temperature: 0 });
        expect(probe.choices[0]?.finish_reason).toMatch(/^(stop|length)$/);
        const after = await state(t.id);
        expect(after.turns).toHaveLength(TURNS + 1);
        expect(after.message_count).toBe(t.expected.length + 2);
        expect(after.turns[TURNS]!.full_reason, `${where}: probe turn`).not.toBe("diverged");
        expect(after.turns[TURNS]!.backend).not.toBe(victim.name);

        const errors = t.attempts.filter((a) => a.error).map((a) => `t${a.turn}#${a.attempt}:${a.error}${a.stream ? "(sse)" : ""}`);
        summary.push(`${where}: ${s.turns.map((r) => `${r.backend.replace("backend-", "")}${r.mode === "full" ? `/${r.full_reason}` : ""}`).join(" ")}${errors.length ? `; retried ${errors.join(", ")}` : ""}`);
      }
      console.log(
        `[pool-kill] drove ${TRAJECTORIES} x ${TURNS} turns in ${driveSeconds.toFixed(1)} s; killed ${victim.name} holding ${victimPinned.size}/${TRAJECTORIES}, ` +
          `${inFlightAtKill.length} turn(s) in flight [${inFlightAtKill.join(",")}]\n  ${summary.join("\n  ")}`,
      );
    },
    600_000,
  );

  function victimTail(part: StackPart): string {
    return lines.filter((l) => l.startsWith(`[${part.name}]`) || l.startsWith("[wrangler]")).slice(-30).join("\n");
  }
});

/** The error's message and its causes' (a connection error's cause says what the socket did). */
function causeChain(e: unknown): string {
  const parts: string[] = [];
  for (let c: unknown = e; c !== undefined && parts.length < 5; c = c instanceof Error ? c.cause : undefined) {
    parts.push(c instanceof Error ? `${c.message}${"code" in c && c.code ? ` [${String(c.code)}]` : ""}` : String(c));
  }
  return parts.join(" <- ");
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
