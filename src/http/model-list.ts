/**
 * The model list's entries: each served model with the limits its backends report in their
 * `/v1/models` (`context_length`, `max_output_tokens`), merged across backends. Pure; models.ts
 * gathers the entries.
 */

/** A served model with the limits its backend reports (absent: not reported). */
export interface ServedModel {
  id: string;
  /** The model's context window in tokens (prompt and reply together). */
  contextLength?: number;
  /** The longest reply the backend generates in one turn. */
  maxOutputTokens?: number;
}

/**
 * One OpenAI model-list entry, with `context_length` and `max_output_tokens` where known.
 *
 * @example modelListEntry({ id: "m", contextLength: 4096 }) // { id: "m", object: "model", created: 0, owned_by: "agent-edge", context_length: 4096 }
 */
export function modelListEntry(m: ServedModel): Record<string, unknown> {
  return {
    id: m.id,
    object: "model",
    created: 0,
    owned_by: "agent-edge",
    ...(m.contextLength !== undefined ? { context_length: m.contextLength } : {}),
    ...(m.maxOutputTokens !== undefined ? { max_output_tokens: m.maxOutputTokens } : {}),
  };
}

/** Backends' entries as one list: first-seen order, one entry per id, the smallest limit of each kind. */
export function mergeModels(entries: readonly ServedModel[]): ServedModel[] {
  const byId = new Map<string, ServedModel>();
  const min = (a: number | undefined, b: number | undefined) => (a === undefined ? b : b === undefined ? a : Math.min(a, b));
  for (const e of entries) {
    if (e.id.length === 0) continue;
    const known = byId.get(e.id);
    const contextLength = min(known?.contextLength, e.contextLength);
    const maxOutputTokens = min(known?.maxOutputTokens, e.maxOutputTokens);
    byId.set(e.id, { id: e.id, ...(contextLength !== undefined ? { contextLength } : {}), ...(maxOutputTokens !== undefined ? { maxOutputTokens } : {}) });
  }
  return [...byId.values()];
}

/** A positive integer limit from a backend's answer, else undefined. */
export function limit(v: unknown): number | undefined {
  return typeof v === "number" && Number.isInteger(v) && v > 0 ? v : undefined;
}

