import type { Usage } from "../../protocol/messages";
import type { CacheDiagnosis, CompareWith, DivergedPart } from "../../durable-objects/turn/cache-diagnosis";
import type { TurnEvent } from "../../durable-objects/turn/turn-types";
import { parseResponseId } from "./response-id";

/**
 * Cache diagnostics in each hosted API's own shape (docs/cache-diagnostics.md): what a request
 * asks (Anthropic's `diagnostics`, OpenAI's `prompt_cache_options.comparison_response_id`) and the
 * answer built from the turn's `CacheDiagnosis` (durable-objects/turn/cache-diagnosis.ts). A
 * request that asks nothing gets no new field.
 */

/** A done event, whose usage and record finish a diagnosis. */
type Done = Extract<TurnEvent, { type: "done" }>;

/**
 * What a Messages request asks: `diagnostics: {previous_message_id}` (a string, or null on the
 * first turn to opt in); undefined when it has no `diagnostics` object. Any other shape is read as
 * not asking (never an error: the field is optional and its shape the client's business).
 *
 * @example messagesAsked({ diagnostics: { previous_message_id: "msg_1" } }) // { previous: "msg_1" }
 */
export function messagesAsked(body: unknown): { previous: string | null } | undefined {
  const d = field(body, "diagnostics");
  if (typeof d !== "object" || d === null || Array.isArray(d)) return undefined;
  const previous = (d as Record<string, unknown>).previous_message_id;
  return { previous: typeof previous === "string" && previous.length > 0 ? previous : null };
}

/**
 * The response a Responses request compares with (`prompt_cache_options.comparison_response_id`);
 * undefined when none is named.
 *
 * @example responsesAsked({ prompt_cache_options: { comparison_response_id: "resp_1" } }) // "resp_1"
 */
export function responsesAsked(body: unknown): string | undefined {
  const id = field(field(body, "prompt_cache_options"), "comparison_response_id");
  return typeof id === "string" && id.length > 0 ? id : undefined;
}

/**
 * The comparison a Responses turn asks its trajectory for; undefined when the id is not one of
 * ours (then it is `comparison_response_not_found` whatever runs).
 *
 * @example responsesCompare(responseId(token, "traj_1")) // { api: "responses", token, trajectoryId: "traj_1" }
 */
export function responsesCompare(id: string): CompareWith | undefined {
  try {
    return { api: "responses", ...parseResponseId(id) };
  } catch {
    return undefined;
  }
}

/**
 * Prompt tokens the named turn could have given this one and it computed instead: the turn's
 * uncached prompt tokens, bounded by what the named turn left reusable. Before the turn's usage
 * is known (a stream's start), the estimate the comparison made (`keptTokens`, by characters).
 *
 * @example missedTokens({ ...compared, reusableTokens: 911 }, { promptTokens: 1200, cachedTokens: 0, ... }) // 911
 */
export function missedTokens(d: Extract<CacheDiagnosis, { status: "compared" }>, usage: Usage | undefined): number {
  if (!usage) return Math.max(0, d.reusableTokens - d.keptTokens);
  return Math.max(0, Math.min(usage.promptTokens - 1, d.reusableTokens) - usage.cachedTokens);
}

const ANTHROPIC_TYPE: Record<Exclude<DivergedPart, "none">, string> = { model: "model_changed", system: "system_changed", tools: "tools_changed", messages: "messages_changed" };
const OPENAI_REASON: Record<Exclude<DivergedPart, "none">, string> = { model: "model_changed", system: "input_changed", tools: "tools_changed", messages: "input_changed" };

/**
 * Anthropic's `diagnostics`: null when nothing diverged (or the first turn named nothing),
 * `{cache_miss_reason: {type, cache_missed_input_tokens}}` when something did,
 * `previous_message_not_found` when the id names no answer this trajectory stored (and for a
 * turn without a trajectory, which stores none), `unavailable` when it cannot be compared.
 * `done` absent: a stream's `message_start`, before usage is known (the estimate).
 *
 * @example anthropicDiagnostics({ previous: "msg_1" }, { status: "not-found" }, undefined) // { cache_miss_reason: { type: "previous_message_not_found" } }
 */
export function anthropicDiagnostics(asked: { previous: string | null }, d: CacheDiagnosis | undefined, done: Done | undefined): object | null {
  if (asked.previous === null) return null;
  if (!d || d.status === "not-found") return { cache_miss_reason: { type: "previous_message_not_found" } };
  if (d.status === "unavailable") return { cache_miss_reason: { type: "unavailable" } };
  if (d.part === "none") return null;
  return { cache_miss_reason: { type: ANTHROPIC_TYPE[d.part], cache_missed_input_tokens: missedTokens(d, done?.usage) } };
}

/**
 * OpenAI's `prompt_cache_diagnostics`: `cache_miss` with `reason`, `cache_missed_tokens` and
 * `comparison_reusable_tokens` when something diverged; `cache_hit` when nothing did and the turn
 * reused what it could (or fell short by less than a block); `unavailable` when nothing diverged
 * yet the turn missed for a reason outside the request (evicted, placed away: OpenAI's reasons
 * only name request changes), or it could not compare (a turn without a trajectory, a fork's
 * first turn); `comparison_response_not_found` for an id that names no stored response (`compare`
 * undefined: not one of our ids). Null while the response is in progress (`done` absent).
 *
 * @example openaiDiagnostics({ compare }, done) // { type: "cache_miss", reason: "input_changed", cache_missed_tokens: 911, comparison_reusable_tokens: 911 }
 */
export function openaiDiagnostics(asked: { compare: CompareWith | undefined }, done: Done | undefined): object | null {
  if (!done) return null;
  const d = done.diagnosis;
  if (!asked.compare || d?.status === "not-found") return { type: "comparison_response_not_found" };
  if (!d || d.status === "unavailable") return { type: "unavailable" };
  if (d.part !== "none") return { type: "cache_miss", reason: OPENAI_REASON[d.part], cache_missed_tokens: missedTokens(d, done.usage), comparison_reusable_tokens: d.reusableTokens };
  const miss = done.turn.miss;
  return !miss || miss.reason === "shorter-than-a-block" ? { type: "cache_hit" } : { type: "unavailable" };
}

function field(o: unknown, key: string): unknown {
  return typeof o === "object" && o !== null ? (o as Record<string, unknown>)[key] : undefined;
}
