import { commonPrefixLength } from "../../protocol/common-prefix";
import { ProtocolError } from "../../protocol/errors";
import { sha256Hex } from "../../protocol/hex";
import type { ChatMessage, GenerateRequest } from "../../protocol/messages";
import { chooseBackend, type ParentPlacement, type Placed, type RoutedBackend } from "../routing/placement";
import type { RoutingPolicyName } from "../routing/routing-policy";
import { trajectoryName } from "../trajectory-name";
import { cacheMissOf } from "./cache-miss";
import { relayTurn, turnRecord } from "./relay";
import { callsIn, ClientDeltas, replyForms } from "./reply-forms";
import { turnDiagnosis } from "./turn-diagnosis";
import { planTurn } from "./turn-plan";
import { canonicalTools, normalizeMessage, prefixKey } from "./transcript-diff";
import type { AssistantReply, TurnEvent, TurnInput, TurnStore } from "./turn-types";

export interface TurnContext {
  store: TurnStore;
  /** The transcript as stored (the Durable Object keeps it in memory between turns). */
  transcript: ChatMessage[];
  /** The pool's view (smoothed loads). */
  backends: RoutedBackend[];
  timeoutMs: number;
  /** The routing policy (default `affinity`; the others are for comparison, `ROUTING_POLICY`). */
  policy?: RoutingPolicyName;
  /** Safe canonicalization of tool-call ids, JSON arguments and tools (default on; canonicalize.ts). */
  canonicalize?: boolean;
  /**
   * The pool's placement (`PoolDO.place`): decides, in the one pool object, where a new or moving
   * trajectory goes and counts it there at once, so concurrent placements see each other. Asked
   * only when affinity does not keep the pin (routing/placement.ts).
   */
  place: (p: { hashes: string[]; key: string; trajectoryId: string; pinned: string | undefined; parent?: ParentPlacement }) => Promise<(Placed & { prefixBlocks?: Record<string, number> }) | null>;
  /** A subagent's first placement: its parent's pinned backend and prompt blocks (placement.ts rule 1b). */
  parent?: ParentPlacement;
  /** The turn's prefix key (`turnPrefixKey`), computed at most once, when the caller (choosing the pool cell) may already have; default: computed here when needed. */
  prefixKey?: () => Promise<string>;
  /** Records that a backend now holds this prefix key and these prompt blocks (best effort, after the turn). */
  notePrefix: (key: string, url: string, hashes: string[], trajectoryId: string) => Promise<void>;
  /** Keeps best-effort work alive past the response (`ctx.waitUntil`). */
  waitUntil: (p: Promise<unknown>) => void;
  /**
   * A fork's parent, as the backend names trajectories (`trajectoryName`: `<tenant>/<id>`): the fork's first turn,
   * when full, asks the backend to start from the parent's exact token ids (`GenerateRequest.forkOf`).
   */
  forkOf?: string;
  /** Receives events; returns false once the client is gone (then nothing is committed). */
  emit: (event: TurnEvent) => Promise<boolean>;
  signal: AbortSignal;
}

/**
 * The prefix key of a trajectory's turn (`prefixKey`: tenant salt, model, first message, tools):
 * what the pool's text-level index and the choice of pool cell go by.
 */
export function turnPrefixKey(input: TurnInput, transcript: readonly ChatMessage[], meta: { toolsJson: string }): Promise<string> {
  return prefixKey({ cacheSalt: input.cacheSalt, model: input.model, first: transcript[0] ?? input.messages[0], tools: input.tools ?? (JSON.parse(meta.toolsJson) as TurnInput["tools"]) });
}

/**
 * Runs one turn of a trajectory: plans it against the stored transcript (`planTurn`: delta when
 * it only grew, else full), picks the backend (`chooseBackend`: the pin, else the pool's
 * placement), relays it (`relayTurn`: tokens as they arrive, state-unknown resend, failover), and
 * commits transcript, turn record and idempotency result in one transaction when the backend
 * finished, so a failed or abandoned turn leaves storage exactly as it was. Returns the new
 * transcript (or the old one).
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
      // A replay's start names the response it stored (a Responses API turn), so its id is the same.
      const token = stored.result.responseToken;
      const diagnosis = stored.result.diagnosis;
      if (token !== undefined || diagnosis) await ctx.emit({ type: "start", prefixBreak: stored.result.turn.prefixBreak ?? { cause: "none" }, trajectoryId: input.trajectoryId, ...(token !== undefined ? { responseToken: token } : {}), ...(diagnosis ? { diagnosis } : {}) });
      if (stored.result.text) await ctx.emit({ type: "token", text: stored.result.text });
      await ctx.emit({ ...withoutText(stored.result), replayed: true });
      return ctx.transcript;
    }
  }

  // A trajectory staying on its pinned backend needs neither the prefix key nor the pool.
  let key: Promise<string> | undefined;
  const keyOf = ctx.prefixKey ?? (() => (key ??= turnPrefixKey(input, ctx.transcript, meta)));
  const turnsDone = store.numTurns();
  const { backend, reason, placed } = await chooseBackend({
    policy: ctx.policy ?? "affinity",
    pinned: meta.backendUrl,
    trajectoryId: input.trajectoryId,
    turnsDone,
    backends: ctx.backends,
    parent: ctx.parent?.url ?? undefined,
    place: async () => ctx.place({ hashes: store.promptBlockHashes(), key: await keyOf(), trajectoryId: input.trajectoryId, pinned: meta.backendUrl ?? undefined, ...(ctx.parent ? { parent: ctx.parent } : {}) }),
  });
  const plan = planTurn({ meta, stored: ctx.transcript, input, backendUrl: backend.url, canonical: ctx.canonicalize ?? true });
  const { diagnosis, answer } = await turnDiagnosis({ store, input, plan, stored: ctx.transcript });
  if (!(await ctx.emit({ type: "start", prefixBreak: plan.prefixBreak, trajectoryId: input.trajectoryId, ...(input.response ? { responseToken: input.response.token } : {}), ...(diagnosis ? { diagnosis } : {}) }))) throw new ProtocolError("backend_unavailable", "the client went away");

  // Streamed call pieces agree with the reply the client gets (`replyForms`' client form).
  const deltas = plan.canonical ? new ClientDeltas(callsIn(plan.fullTranscript)) : undefined;
  const result = await relayTurn({
    backend,
    backends: ctx.backends,
    trajectoryId: input.trajectoryId,
    mode: plan.mode,
    fullReason: plan.fullReason,
    route: reason,
    timeoutMs: ctx.timeoutMs,
    emit: (e) => ctx.emit(deltas && e.type === "token" && e.reply ? { ...e, reply: deltas.map(e.reply) } : e),
    signal: ctx.signal,
    request: (mode, target): GenerateRequest => ({
      requestId: crypto.randomUUID(),
      trajectoryId: trajectoryName(input.tenant, input.trajectoryId),
      cacheSalt: input.cacheSalt,
      mode,
      messages: mode === "delta" ? plan.newMessages : plan.fullTranscript,
      sampling: input.sampling,
      ...(input.constraint ? { constraint: input.constraint } : {}),
      ...(input.cachePoints && input.cachePoints.length > 0 ? { cachePoints: input.cachePoints } : {}),
      // A delta turn's tools are the state's (unchanged, or the turn would be full).
      ...(mode === "full" && plan.tools.length > 0 ? { tools: plan.tools } : {}),
      ...(input.model ? { model: input.model } : {}),
      ...(input.thinking !== undefined ? { thinking: input.thinking } : {}),
      ...(input.speculative === false ? { speculative: false } : {}),
      ...(mode === "delta" && meta.stateId ? { stateId: meta.stateId } : {}),
      ...(mode === "full" && turnsDone === 0 && ctx.forkOf !== undefined ? { forkOf: ctx.forkOf } : {}),
      // The backend pulls the blocks it lacks instead of prefilling them: from the holder the pool
      // named when placing, else from the live backend this trajectory is moving off.
      ...(mode === "full" ? kvSourceFor(target.url, placed?.kvSource, meta.backendUrl, ctx.backends) : {}),
    }),
  });
  const { done } = result;

  // The client's form goes out and is kept for replays; the transcript keeps the canonical one.
  const reply = replyForms(done, plan.canonical ? plan.fullTranscript : undefined);
  const base = turnRecord(result, {
    turn: turnsDone + 1,
    prefixBreak: plan.prefixBreak.cause === "none" ? plan.prefixBreak : { ...plan.prefixBreak, uncachedFromToken: done.usage.cachedTokens },
    ...(plan.repaired ? { repaired: plan.repaired } : {}),
  });
  const miss = cacheMissOf({ previous: turnsDone > 0 ? (store.lastTurnRecord() ?? undefined) : undefined, turn: base, blockSize: done.blockSize, placement: placementCounts(placed, result.backend.url, ctx.parent ? commonPrefixLength(done.promptBlockHashes ?? [], ctx.parent.hashes) : undefined) });
  const record = miss ? { ...base, miss } : base;
  const event = { type: "done" as const, message: reply.client, finishReason: done.finishReason, usage: done.usage, turn: record, replayed: false, ...(done.stopSequence !== undefined ? { stopSequence: done.stopSequence } : {}), ...(input.response ? { responseToken: input.response.token } : {}), ...(done.cacheWrites ? { cacheWrites: done.cacheWrites } : {}), ...(diagnosis ? { diagnosis } : {}) };
  const transcript = [...plan.fullTranscript, reply.stored as ChatMessage];
  store.commitTurn({
    keep: plan.keep,
    messages: transcript.slice(plan.keep),
    record,
    backendUrl: result.backend.url,
    stateId: done.stateId,
    toolsJson: canonicalTools(plan.tools),
    idempotencyKey: input.idempotencyKey,
    fingerprint,
    result: { ...event, text: done.text },
    promptBlockHashes: done.promptBlockHashes ?? [],
    ...(input.response ? { response: input.response } : {}),
    ...(answer ? { answer } : {}),
  });
  // Best effort, after the reply: the pool learns where this prefix now lives.
  if (result.mode === "full" || result.backend.url !== meta.backendUrl) {
    const url = result.backend.url;
    ctx.waitUntil(
      keyOf()
        .then((k) => ctx.notePrefix(k, url, done.promptBlockHashes ?? [], input.trajectoryId))
        .catch((e: unknown) => console.error(`notePrefix for ${trajectoryName(input.tenant, input.trajectoryId)} on ${url} failed:`, e)),
    );
  }
  await ctx.emit(event);
  return transcript;
}

/**
 * The most leading blocks any backend held when the pool placed the turn, and the placed one's.
 * `shared`: a subagent's first turn was ranked by its parent's blocks; only the leading ones its
 * own prompt shares with the parent's count.
 */
function placementCounts(placed: { prefixBlocks?: Record<string, number> } | undefined, url: string, shared = Infinity): { bestBlocks: number; placedBlocks: number } | undefined {
  const counts = placed?.prefixBlocks;
  if (!counts) return undefined;
  return { bestBlocks: Math.min(shared, Math.max(0, ...Object.values(counts))), placedBlocks: Math.min(shared, counts[url] ?? 0) };
}

/** `kvSource` of a full turn on `target`: the placement's holder, else the pinned backend left behind, when up. */
function kvSourceFor(target: string, placed: string | undefined, pinned: string | null, backends: readonly RoutedBackend[]): { kvSource?: { url: string } } {
  for (const url of [placed, pinned]) {
    if (url && url !== target && backends.some((b) => b.url === url && b.up)) return { kvSource: { url } };
  }
  return {};
}

function withoutText(r: Extract<TurnEvent, { type: "done" }> & { text: string }): Extract<TurnEvent, { type: "done" }> {
  const { text: _text, ...event } = r;
  return event;
}

/** SHA-256 hex of what defines a turn's request (not its idempotency key or tenant salt). */
async function requestFingerprint(input: TurnInput): Promise<string> {
  return sha256Hex(JSON.stringify([input.kind, input.messages.map(normalizeMessage), input.tools ?? null, input.sampling, input.model ?? null]));
}
