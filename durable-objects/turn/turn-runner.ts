import { ProtocolError, toProtocolError } from "../../protocol/errors";
import type { ChatMessage, DoneFrame, GenerateRequest } from "../../protocol/messages";
import { generateFrames, type BackendTarget } from "../backend-client";
import { canonicalizeTranscript, canonicalJsonText, canonicalToolDefinitions, type Repairs } from "./canonicalize";
import { explainBreak, type PrefixBreak } from "./prefix-break";
import { route, routeCounter, type RouteReason, type RoutingPolicyName } from "../routing/routing-policy";
import type { TrajectoryMeta, TrajectoryStore } from "../trajectory/trajectory-store";
import { canonicalTools, diffTranscript, normalizeMessage, prefixKey } from "./transcript-diff";
import type { AssistantReply, FullReason, TurnEvent, TurnInput, TurnRecord } from "./turn-types";

/** A backend as routing sees it: where it is, whether it is up, how loaded. */
export interface RoutedBackend extends BackendTarget {
  up: boolean;
  /** Sequences running plus waiting (0 when unknown). */
  load: number;
}

export interface TurnContext {
  store: TrajectoryStore;
  /** The transcript as stored (the Durable Object keeps it in memory between turns). */
  transcript: ChatMessage[];
  backends: RoutedBackend[];
  timeoutMs: number;
  /** The routing policy (default `affinity`; the others are for comparison, `ROUTING_POLICY`). */
  policy?: RoutingPolicyName;
  /** Safe canonicalization of tool-call ids, JSON arguments and tools (default on; canonicalize.ts). */
  canonicalize?: boolean;
  /**
   * The pool's prefix indexes (`PoolDO.prefixBlocks`): per backend url, how many leading blocks
   * of `hashes` (the trajectory's last prompt blocks; empty for a new trajectory, then the list
   * noted under `key`) it holds. Asked only when the trajectory is placed: new, or leaving its pin.
   */
  prefixBlocks?: (hashes: string[], key: string) => Promise<Record<string, number>>;
  /**
   * The pool's placement (`PoolDO.place`): decides, in the one pool object, where a new or moving
   * trajectory goes and counts it there at once, so concurrent placements see each other. When
   * given, it replaces `prefixBlocks` plus local routing for placements.
   */
  place?: (p: { hashes: string[]; key: string; trajectoryId: string; pinned: string | undefined }) => Promise<{ url: string; reason: RouteReason } | null>;
  /** Records that a backend now holds this prefix key and these prompt blocks. */
  notePrefix?: (key: string, url: string, hashes: string[], trajectoryId: string) => Promise<void>;
  /** Receives events; returns false once the client is gone (then nothing is committed). */
  emit: (event: TurnEvent) => Promise<boolean>;
  signal: AbortSignal;
}

/**
 * Runs one turn of a trajectory: compares the incoming messages with the stored transcript,
 * forwards a delta turn (new messages + the backend's state id) when the transcript only grew,
 * or the full transcript when it diverged, the tools changed, there is no state yet or the
 * backend answered `state_unknown`; relays tokens as they arrive; and commits transcript, turn
 * record and idempotency result in one transaction when the backend finished, so a failed or
 * abandoned turn leaves storage exactly as it was. Returns the new transcript (or the old one).
 *
 * @example
 * ctx.transcript = await runTurn(ctx, input);
 */
export async function runTurn(ctx: TurnContext, input: TurnInput): Promise<ChatMessage[]> {
  const { store } = ctx;
  const meta = store.meta();
  if (!meta) throw new ProtocolError("not_found", `trajectory ${input.trajectoryId} does not exist`);

  // Only a turn with an Idempotency-Key needs its request fingerprint.
  const fingerprint = input.idempotencyKey === undefined ? "" : await requestFingerprint(input);
  if (input.idempotencyKey !== undefined) {
    const stored = store.idempotentResult(input.idempotencyKey);
    if (stored) {
      if (stored.fingerprint !== fingerprint) {
        throw new ProtocolError("invalid_request", "this Idempotency-Key was already used for a different request");
      }
      if (stored.result.text) await ctx.emit({ type: "token", text: stored.result.text });
      await ctx.emit({ ...withoutText(stored.result), replayed: true });
      return ctx.transcript;
    }
  }

  // New or moving trajectories are placed where most of their leading blocks are cached (one
  // pool call: the block index, asked with this trajectory's last prompt hashes or, when new,
  // with those noted under its prefix key). A trajectory staying on its pinned backend needs
  // neither the key nor the pool.
  const policy = ctx.policy ?? "affinity";
  let key: string | undefined;
  const keyOf = async () =>
    (key ??= await prefixKey({ cacheSalt: input.cacheSalt, model: input.model, first: ctx.transcript[0] ?? input.messages[0], tools: input.tools ?? (JSON.parse(meta.toolsJson) as TurnInput["tools"]) }));
  let prefixBlocks = new Map<string, number>();
  let placed: { url: string; reason: RouteReason } | undefined;
  if (policy === "affinity" && (ctx.place || ctx.prefixBlocks) && !staysPinned(meta, input.trajectoryId, ctx.backends)) {
    if (ctx.place) {
      placed = (await ctx.place({ hashes: store.promptBlockHashes(), key: await keyOf(), trajectoryId: input.trajectoryId, pinned: meta.backendUrl ?? undefined })) ?? undefined;
    } else {
      prefixBlocks = new Map(Object.entries(await ctx.prefixBlocks!(store.promptBlockHashes(), await keyOf())));
    }
  }
  const plan = planTurn(meta, ctx.transcript, input, ctx.backends, prefixBlocks, policy, ctx.canonicalize ?? true, store.numTurns(), placed);
  if (!(await ctx.emit({ type: "start", prefixBreak: plan.prefixBreak }))) throw new ProtocolError("backend_unavailable", "the client went away");
  const started = Date.now();
  const t0 = performance.now();
  const stats = { requestBytes: 0 };
  let done: DoneFrame | undefined;
  let firstTokenMs: number | undefined;
  let mode = plan.mode;
  let fullReason = plan.fullReason;
  let backend = plan.backend;
  let routeReason: RouteReason | "failover" = plan.route;
  const tried = new Set<string>();
  let clientGone = false;

  // At most: the planned attempt, one resend in full after state_unknown, one failover.
  for (let attempt = 0; attempt < 3 && !done; attempt++) {
    tried.add(backend.url);
    const request: GenerateRequest = {
      requestId: crypto.randomUUID(),
      trajectoryId: `${input.tenant}/${input.trajectoryId}`,
      cacheSalt: input.cacheSalt,
      mode,
      messages: mode === "delta" ? plan.newMessages : plan.fullTranscript,
      sampling: input.sampling,
      // A delta turn's tools are the state's (unchanged, or the turn would be full).
      ...(mode === "full" && plan.tools.length > 0 ? { tools: plan.tools } : {}),
      ...(input.model ? { model: input.model } : {}),
      ...(mode === "delta" && meta.stateId ? { stateId: meta.stateId } : {}),
    };
    try {
      for await (const frame of generateFrames(backend, request, { timeoutMs: ctx.timeoutMs, signal: ctx.signal, stats })) {
        if (frame.type === "token") {
          firstTokenMs ??= performance.now() - t0;
          if (frame.text && !(await ctx.emit({ type: "token", text: frame.text }))) {
            clientGone = true;
            throw new ProtocolError("backend_unavailable", "the client went away");
          }
        } else if (frame.type === "done") {
          done = frame;
        } else {
          throw new ProtocolError(frame.code, frame.message, { retryable: frame.retryable });
        }
      }
    } catch (e) {
      const err = toProtocolError(e);
      const nothingSent = firstTokenMs === undefined;
      // The backend lost (or never had) our state: resend the whole transcript.
      if (err.code === "state_unknown" && mode === "delta" && nothingSent) {
        mode = "full";
        fullReason = "state-unknown";
        continue;
      }
      // The backend is gone before it answered: the transcript lives here, so another backend
      // can take the turn in full. After tokens went out, retrying here would duplicate text:
      // the client gets a retryable error instead, and its retry fails over from the start.
      const next = err.code === "backend_unavailable" && nothingSent && !clientGone && !ctx.signal.aborted ? failoverTarget(ctx.backends, tried, input.trajectoryId) : undefined;
      if (next) {
        backend = next;
        mode = "full";
        fullReason = "failover";
        routeReason = "failover";
        continue;
      }
      if (err.code === "backend_unavailable" && !nothingSent && !clientGone) {
        throw new ProtocolError("backend_unavailable", `the backend failed during the turn (${err.message}); nothing was stored: retry the turn`, { retryable: true });
      }
      throw err;
    }
  }
  if (!done) throw new ProtocolError("backend_unavailable", "the backend ended the turn without a result");
  if (ctx.signal.aborted) throw new ProtocolError("backend_unavailable", "the client went away");

  const reply = replyOf(done, plan.canonical ? plan.fullTranscript : undefined);
  const record: TurnRecord = {
    turn: store.numTurns() + 1,
    startedAt: new Date(started).toISOString(),
    mode,
    fullReason,
    promptTokens: done.usage.promptTokens,
    cachedTokens: done.usage.cachedTokens,
    computedTokens: done.usage.computedTokens,
    completionTokens: done.usage.completionTokens,
    ttftMs: round(firstTokenMs ?? performance.now() - t0),
    backendTtftMs: round(done.timings.ttftMs),
    totalMs: round(performance.now() - t0),
    backend: done.backendId,
    backendUrl: backend.url,
    finishReason: done.finishReason,
    requestBytes: stats.requestBytes,
    prefixBreak: plan.prefixBreak.cause === "none" ? plan.prefixBreak : { ...plan.prefixBreak, uncachedFromToken: done.usage.cachedTokens },
    ...(plan.repaired ? { repaired: plan.repaired } : {}),
    route: routeReason,
  };
  const event = { type: "done" as const, message: reply, finishReason: done.finishReason, usage: done.usage, turn: record, replayed: false };
  const transcript = [...plan.fullTranscript, reply as ChatMessage];
  store.commitTurn({
    keep: plan.keep,
    messages: transcript.slice(plan.keep),
    record,
    backendUrl: backend.url,
    stateId: done.stateId,
    toolsJson: canonicalTools(plan.tools),
    idempotencyKey: input.idempotencyKey,
    fingerprint,
    result: { ...event, text: done.text },
    promptBlockHashes: done.promptBlockHashes ?? [],
  });
  if (ctx.notePrefix && (mode === "full" || backend.url !== meta.backendUrl)) {
    await ctx.notePrefix(await keyOf(), backend.url, done.promptBlockHashes ?? [], input.trajectoryId).catch(() => {});
  }
  await ctx.emit(event);
  return transcript;
}

interface TurnPlan {
  mode: "delta" | "full";
  fullReason: FullReason | null;
  /** Stored messages kept as they are; the rest of `fullTranscript` is written by the commit. */
  keep: number;
  newMessages: ChatMessage[];
  fullTranscript: ChatMessage[];
  tools: NonNullable<TurnInput["tools"]>;
  backend: BackendTarget;
  /** Why the turn goes to `backend` (the routing policy's reason, or the pool's placement's). */
  route: RouteReason;
  /** Why the transcript is not an extension of the stored one (cause "none" when it is). */
  prefixBreak: PrefixBreak;
  /** Whether messages and tools were canonicalized (then the reply's tool calls are too). */
  canonical: boolean;
  /** What canonicalization changed, when it changed anything. */
  repaired?: Repairs;
}

function planTurn(
  meta: TrajectoryMeta,
  stored: ChatMessage[],
  input: TurnInput,
  backends: RoutedBackend[],
  prefixBlocks: Map<string, number>,
  policy: RoutingPolicyName,
  canonical: boolean,
  turnsDone: number,
  placed: { url: string; reason: RouteReason } | undefined,
): TurnPlan {
  // Safe canonicalization: tool-call ids by position, JSON arguments and tools with sorted keys.
  // On an append turn the stored messages (already canonical) give the new ones their positions.
  const normalized = input.messages.map(normalizeMessage);
  let incoming = normalized;
  let repaired: Repairs | undefined;
  if (canonical) {
    const c = canonicalizeTranscript(input.kind === "append" ? [...stored, ...normalized] : normalized);
    incoming = input.kind === "append" ? c.messages.slice(stored.length) : c.messages;
    if (c.repaired.toolCallIds + c.repaired.jsonArguments > 0) repaired = c.repaired;
  }
  let keep = stored.length;
  let newMessages: ChatMessage[];
  let fullTranscript: ChatMessage[];
  let diverged = false;
  if (input.kind === "append") {
    if (incoming.length === 0) throw new ProtocolError("invalid_request", "messages must hold at least one new message");
    newMessages = incoming;
    fullTranscript = [...stored, ...incoming];
  } else {
    const diff = diffTranscript(stored, incoming);
    if (diff.kind === "append") {
      newMessages = diff.newMessages;
    } else {
      diverged = true;
      keep = diff.index;
      newMessages = incoming.slice(diff.index);
    }
    fullTranscript = incoming;
  }
  if (fullTranscript.length === 0) throw new ProtocolError("invalid_request", "messages must not be empty");

  const storedTools = JSON.parse(meta.toolsJson) as NonNullable<TurnInput["tools"]>;
  const tools = input.tools ? (canonical ? canonicalToolDefinitions(input.tools) : input.tools) : storedTools;
  const prefixBreak = stored.length > 0 ? explainBreak(stored, fullTranscript, storedTools, tools) : { cause: "none" as const };
  // The pool's placement, when it named a backend this object knows as up; else route here.
  const placedBackend = placed ? backends.find((b) => b.url === placed.url && b.up) : undefined;
  const { backend, reason: routeReason } = placedBackend ? { backend: placedBackend, reason: placed!.reason } : pickBackend(policy, meta, input.trajectoryId, turnsDone, backends, prefixBlocks);
  let fullReason: FullReason | null = null;
  if (stored.length === 0 || !meta.stateId) fullReason = "first-turn";
  else if (diverged) fullReason = "diverged";
  else if (canonicalTools(tools) !== meta.toolsJson) fullReason = "tools-changed";
  else if (backend.url !== meta.backendUrl) fullReason = "backend-changed";
  return { mode: fullReason ? "full" : "delta", fullReason, keep, newMessages, fullTranscript, tools, backend, route: routeReason, prefixBreak, canonical, ...(repaired ? { repaired } : {}) };
}

/** Whether affinity keeps the trajectory on its pinned backend (up, not overloaded): no placement needed. */
function staysPinned(meta: TrajectoryMeta, trajectoryId: string, backends: RoutedBackend[]): boolean {
  if (meta.backendUrl === null) return false;
  return route("affinity", { trajectoryId, pinned: meta.backendUrl }, backends.map(snapshotOf))?.reason === "pinned";
}

/** Another up backend not tried yet for this turn: the least loaded (ties by trajectory id). */
function failoverTarget(backends: RoutedBackend[], tried: Set<string>, trajectoryId: string): BackendTarget | undefined {
  const rest = backends.filter((b) => !tried.has(b.url));
  const d = route("least-loaded", { trajectoryId }, rest.map(snapshotOf));
  return rest.find((b) => b.url === d?.backendId);
}

/**
 * The backend for this turn by the routing policy (routing-policy.ts; default affinity: the
 * pinned one unless it is down or overloaded past the bounds, else where the prefix is cached,
 * else the least loaded). Round-robin counts per trajectory (each turn moves one backend on).
 */
function pickBackend(
  policy: RoutingPolicyName,
  meta: TrajectoryMeta,
  trajectoryId: string,
  turnsDone: number,
  backends: RoutedBackend[],
  prefixBlocks: Map<string, number>,
): { backend: BackendTarget; reason: RouteReason } {
  if (backends.length === 0) throw new ProtocolError("backend_unavailable", "no backend is configured or registered");
  const req = { trajectoryId, pinned: meta.backendUrl ?? undefined, prefixBlocks, counter: routeCounter(trajectoryId, turnsDone) };
  const d = route(policy, req, backends.map(snapshotOf));
  if (!d) throw new ProtocolError("backend_unavailable", "no backend is up (none answered its heartbeats)");
  return { backend: backends.find((b) => b.url === d.backendId)!, reason: d.reason };
}

function snapshotOf(b: RoutedBackend) {
  return { id: b.url, up: b.up, load: b.load };
}

/**
 * The reply as stored and returned. Canonical trajectories get canonical tool calls: ids
 * `call_k` continuing the transcript's numbering and arguments as canonical JSON, so a client that
 * sends them back unchanged sends exactly what is stored.
 */
function replyOf(done: DoneFrame, canonicalBefore: ChatMessage[] | undefined): AssistantReply {
  const reply = normalizeMessage(done.message) as AssistantReply;
  if (!canonicalBefore || !reply.tool_calls) return reply;
  let k = canonicalBefore.reduce((n, m) => n + (m.tool_calls?.length ?? 0), 0);
  return {
    ...reply,
    tool_calls: reply.tool_calls.map((c) => ({ ...c, id: `call_${k++}`, function: { ...c.function, arguments: canonicalJsonText(c.function.arguments) } })),
  };
}

function withoutText(r: Extract<TurnEvent, { type: "done" }> & { text: string }): Extract<TurnEvent, { type: "done" }> {
  const { text: _text, ...event } = r;
  return event;
}

/** SHA-256 hex of what defines a turn's request (not its idempotency key or tenant salt). */
async function requestFingerprint(input: TurnInput): Promise<string> {
  const canonical = JSON.stringify([input.kind, input.messages.map(normalizeMessage), input.tools ?? null, input.sampling, input.model ?? null]);
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(canonical));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}
