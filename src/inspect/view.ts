import type { CacheMiss } from "../../durable-objects/turn/cache-miss";
import type { ChatMessage } from "../../protocol/messages";
import type { PrefixBreak, PrefixBreakCause } from "../../durable-objects/turn/prefix-break";
import type { TrajectoryState, TurnRecord } from "../../durable-objects/turn/turn-types";

/**
 * Why a turn's prefix stopped matching the cache, as the prefix-break explainer records it on the
 * turn record (`prefixBreak`). Read defensively: the field is optional and records written before
 * it existed lack it; any unknown `cause` string is shown as it is.
 */
export type PrefixBreakView = Omit<PrefixBreak, "cause"> & { cause: PrefixBreakCause | (string & {}) };

/** A KV lease on the turn's prefix (held while a tool runs, hit or expired by the next turn). */
export interface LeaseView {
  state: "held" | "hit" | "expired" | (string & {});
  ttlMs?: number;
  tokens?: number;
  expiresAt?: string;
}

/** What the page marks on a turn: a prefix break (with its cause) or a full resend for another reason. */
export interface TurnMarker {
  kind: "break" | "full";
  /** `prefixBreak.cause` when recorded, else the turn's `fullReason`. */
  cause: string;
  /** Where the cause came from. */
  source: "prefixBreak" | "fullReason";
  label: string;
  detail?: PrefixBreakView;
}

/** One turn as the inspector shows it: its record's figures, and what the page derives. */
export interface InspectTurn
  extends Pick<TurnRecord, "turn" | "startedAt" | "mode" | "fullReason" | "promptTokens" | "cachedTokens" | "computedTokens" | "completionTokens" | "ttftMs" | "backendTtftMs" | "totalMs" | "backend" | "finishReason"> {
  /** Milliseconds from the first turn's start. */
  startOffsetMs: number;
  /** The client's pause before this turn (tools running): previous turn's end to this start. */
  pauseBeforeMs: number | null;
  /** Tokens of the previous turn's prompt and reply that this turn computed again. */
  prefixLostTokens: number | null;
  /** The record's cache miss: what it could have reused and did not, and why (cache-miss.ts). */
  miss: CacheMiss | null;
  /** Estimated prefill time the cached tokens saved (from the measured prefill rate). */
  estSavedMs: number | null;
  marker: TurnMarker | null;
  lease: LeaseView | null;
  /** Speculative decoding on the turn: draft tokens accepted of drafted (null: it did not speculate). */
  speculation: { drafted: number; accepted: number } | null;
}

export interface InspectTotals {
  turns: number;
  promptTokens: number;
  cachedTokens: number;
  computedTokens: number;
  completionTokens: number;
  /** cached / prompt tokens, 0..1; null without prompt tokens. */
  hitRate: number | null;
  tokensSaved: number;
  /** Measured: sum of computed prompt tokens / sum of backend time to first token. An estimate. */
  prefillTokensPerS: number | null;
  /** Estimate: cached tokens / prefill rate. */
  estTimeSavedMs: number | null;
  breaks: number;
  /** First turn's start to last turn's end. */
  wallMs: number;
  turnMs: number;
  toolPauseMs: number;
}

export interface InspectMessage {
  index: number;
  role: string;
  /** Content (and tool calls as JSON), cut to MESSAGE_PREVIEW_CHARS. */
  text: string;
  truncated: boolean;
  chars: number;
}

/** Everything the trajectory page shows; also the JSON endpoint's body. */
export interface InspectView {
  id: string;
  tenant: string;
  createdAt: string;
  messageCount: number;
  backend: string | null;
  /** Trajectories forked from this one's responses (Responses API), and the one it was forked from. */
  forks: { id: string; turn: number; createdAt: string }[];
  parent: { id: string; turn: number | null; relation: "fork" | "subagent" } | null;
  /** Subagents linked to this trajectory, with their first turn's reuse (null: not done yet). */
  children: { id: string; createdAt: string; firstTurn: { promptTokens: number; cachedTokens: number; backend: string; route: string | null } | null }[];
  turns: InspectTurn[];
  totals: InspectTotals;
  messages: InspectMessage[];
  /** Messages left out of `messages` (only the last MAX_MESSAGES are shown). */
  messagesOmitted: number;
}

export const MESSAGE_PREVIEW_CHARS = 2000;
export const MAX_MESSAGES = 200;

const FULL_REASON_LABELS: Record<string, string> = {
  "first-turn": "first turn: nothing to reuse yet",
  diverged: "transcript diverged: an earlier message was edited or removed",
  "tools-changed": "the tool definitions changed",
  "state-unknown": "the backend no longer had the turn state",
  "backend-changed": "moved to another backend",
  failover: "failover: the backend failed, retried on another",
};

const BREAK_CAUSE_LABELS: Record<string, string> = {
  "system-prompt-changed": "the system prompt was edited",
  "tools-changed": "the tool definitions changed",
  timestamp: "a timestamp in the prompt changed",
  "random-id": "only ids differ (tool-call ids, UUIDs, nonces)",
  "json-serialization": "the same JSON serialized differently (key order or whitespace)",
  "inserted-before": "content was inserted before older messages",
  regenerate: "the last reply was regenerated (the same transcript resent without it)",
  "removed-or-truncated": "older messages were removed, or a message was cut",
  "assistant-edited": "an earlier assistant reply was edited",
  other: "an earlier message changed",
};

/** Full reasons that mean the cached prefix no longer matches (the others are resends). */
const BREAKING_REASONS = new Set<string>(["diverged", "tools-changed"]);

/**
 * The inspector's view of a trajectory from its state and transcript: per-turn figures, tool
 * pauses, break markers and totals (hit rate, tokens saved, estimated time saved).
 *
 * @example const view = inspectView(await stub.state(), await stub.messages());
 */
export function inspectView(state: TrajectoryState, transcript: ChatMessage[] | null): InspectView {
  const records = [...state.turns].sort((a, b) => a.turn - b.turn);
  const rate = prefillRate(records);
  const t0 = records.length > 0 ? Date.parse(records[0]!.startedAt) : 0;
  const turns: InspectTurn[] = records.map((r, i) => {
    const prev = i > 0 ? records[i - 1]! : undefined;
    const start = Date.parse(r.startedAt);
    const pause = prev ? Math.max(0, start - (Date.parse(prev.startedAt) + prev.totalMs)) : null;
    return {
      turn: r.turn,
      startedAt: r.startedAt,
      startOffsetMs: start - t0,
      mode: r.mode,
      fullReason: r.fullReason,
      promptTokens: r.promptTokens,
      cachedTokens: r.cachedTokens,
      computedTokens: r.computedTokens,
      completionTokens: r.completionTokens,
      ttftMs: r.ttftMs,
      backendTtftMs: r.backendTtftMs,
      totalMs: r.totalMs,
      backend: r.backend,
      finishReason: r.finishReason,
      pauseBeforeMs: pause,
      prefixLostTokens: prev ? Math.max(0, Math.min(prev.promptTokens + prev.completionTokens, r.promptTokens) - r.cachedTokens) : null,
      miss: r.miss ?? null,
      estSavedMs: rate ? (r.cachedTokens / rate) * 1000 : null,
      marker: markerOf(r),
      lease: readLease(r),
      speculation: r.speculation ?? null,
    };
  });
  const sum = (f: (t: InspectTurn) => number) => turns.reduce((s, t) => s + f(t), 0);
  const promptTokens = sum((t) => t.promptTokens);
  const cachedTokens = sum((t) => t.cachedTokens);
  const last = turns.at(-1);
  const messages = transcript ?? [];
  const shown = messages.slice(-MAX_MESSAGES);
  return {
    id: state.id,
    tenant: state.tenant,
    createdAt: state.createdAt,
    messageCount: state.messageCount,
    backend: state.backendUrl,
    forks: state.forks.map((f) => ({ id: f.trajectoryId, turn: f.turn, createdAt: f.createdAt })),
    parent: state.parent ? { id: state.parent.trajectoryId, turn: state.parent.turn, relation: state.parent.relation } : null,
    // Read defensively: a state from before subagent links has none.
    children: (state.children ?? []).map((ch) => ({ id: ch.trajectoryId, createdAt: ch.createdAt, firstTurn: ch.firstTurn })),
    turns,
    totals: {
      turns: turns.length,
      promptTokens,
      cachedTokens,
      computedTokens: sum((t) => t.computedTokens),
      completionTokens: sum((t) => t.completionTokens),
      hitRate: promptTokens > 0 ? cachedTokens / promptTokens : null,
      tokensSaved: cachedTokens,
      prefillTokensPerS: rate,
      estTimeSavedMs: rate ? (cachedTokens / rate) * 1000 : null,
      breaks: turns.filter((t) => t.marker?.kind === "break").length,
      wallMs: last ? last.startOffsetMs + last.totalMs : 0,
      turnMs: sum((t) => t.totalMs),
      toolPauseMs: sum((t) => t.pauseBeforeMs ?? 0),
    },
    messages: shown.map((m, i) => previewMessage(m, messages.length - shown.length + i)),
    messagesOmitted: messages.length - shown.length,
  };
}

/** Label of a prefix-break cause or full reason. */
export function causeLabel(cause: string): string {
  return BREAK_CAUSE_LABELS[cause] ?? FULL_REASON_LABELS[cause] ?? cause;
}

/** Tokens per second of prefill measured over the turns that computed tokens; null without any. */
function prefillRate(records: TurnRecord[]): number | null {
  let tokens = 0;
  let ms = 0;
  for (const r of records) {
    if (r.computedTokens > 0 && r.backendTtftMs > 0) {
      tokens += r.computedTokens;
      ms += r.backendTtftMs;
    }
  }
  return tokens > 0 && ms > 0 ? (tokens / ms) * 1000 : null;
}

function markerOf(r: TurnRecord): TurnMarker | null {
  const pb = readPrefixBreak(r);
  if (pb && pb.cause !== "none") {
    return { kind: "break", cause: pb.cause, source: "prefixBreak", label: causeLabel(pb.cause), detail: pb };
  }
  if (r.fullReason && r.fullReason !== "first-turn") {
    return { kind: BREAKING_REASONS.has(r.fullReason) ? "break" : "full", cause: r.fullReason, source: "fullReason", label: causeLabel(r.fullReason) };
  }
  return null;
}

/** The record's optional `prefixBreak`, keeping only well-typed fields; null when absent or malformed. */
export function readPrefixBreak(record: object): PrefixBreakView | null {
  const v = (record as { prefixBreak?: unknown }).prefixBreak;
  if (!isObject(v) || typeof v.cause !== "string") return null;
  const out: PrefixBreakView = { cause: v.cause };
  if (typeof v.message === "number") out.message = v.message;
  if (typeof v.field === "string") out.field = v.field;
  if (typeof v.offset === "number") out.offset = v.offset;
  if (typeof v.before === "string") out.before = v.before;
  if (typeof v.after === "string") out.after = v.after;
  if (typeof v.uncachedFromToken === "number") out.uncachedFromToken = v.uncachedFromToken;
  return out;
}

/** The record's optional lease (`lease: { state | status, ttlMs?, tokens?, expiresAt? }` or `lease: "held"`). */
export function readLease(record: object): LeaseView | null {
  const v = (record as { lease?: unknown }).lease;
  if (typeof v === "string") return { state: v };
  if (!isObject(v)) return null;
  const state = typeof v.state === "string" ? v.state : typeof v.status === "string" ? v.status : null;
  if (state === null) return null;
  const out: LeaseView = { state };
  if (typeof v.ttlMs === "number") out.ttlMs = v.ttlMs;
  if (typeof v.tokens === "number") out.tokens = v.tokens;
  if (typeof v.expiresAt === "string") out.expiresAt = v.expiresAt;
  return out;
}

function previewMessage(m: ChatMessage, index: number): InspectMessage {
  let text = m.content ?? "";
  if (m.tool_calls && m.tool_calls.length > 0) text += `${text ? "\n" : ""}tool_calls: ${JSON.stringify(m.tool_calls)}`;
  if (m.tool_call_id) text = `[${m.tool_call_id}] ${text}`;
  return { index, role: m.role, text: text.slice(0, MESSAGE_PREVIEW_CHARS), truncated: text.length > MESSAGE_PREVIEW_CHARS, chars: text.length };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
