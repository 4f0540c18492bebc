import { z } from "zod";
import type { CachePoint } from "../../protocol/messages";

/**
 * Anthropic's `cache_control` marks: the schema of one mark, the breakpoints a request's marks
 * become (`ParsedMessagesRequest.cacheBreakpoints`) and the cache points a backend leases for them.
 * docs/messages-api.md#cache_control.
 */

/** One `cache_control` mark: which part of the converted request it ends, and for how long. */
export interface CacheBreakpoint {
  /** `"tools"`: the tool definitions; a number: the index in `messages` of the chat message that holds the marked block. */
  at: "tools" | number;
  ttl: "5m" | "1h";
}

/** Anthropic's cache TTLs, in milliseconds. */
export const CACHE_TTL_MS = { "5m": 300_000, "1h": 3_600_000 } as const;

/**
 * The cache points a backend leases (`GenerateRequest.cachePoints`) for the breakpoints: each
 * covers the chat messages up to and including the one holding the marked block (`tools`: the
 * tool definitions alone), for the breakpoint's TTL.
 *
 * @example cachePointsOf([{ at: 0, ttl: "5m" }]) // [{ messages: 1, ttlMs: 300000 }]
 */
export function cachePointsOf(breakpoints: readonly CacheBreakpoint[]): CachePoint[] {
  return breakpoints.map((b) => ({ messages: b.at === "tools" ? 0 : b.at + 1, ttlMs: CACHE_TTL_MS[b.ttl] }));
}

/** Anthropic's limit on blocks carrying `cache_control` in one request. */
export const MAX_CACHE_BREAKPOINTS = 4;

/** One `cache_control` mark as a request carries it (absent or null: none). */
export const cacheControl = z
  .object({
    type: z.literal("ephemeral", { error: (iss) => `cache_control type ${JSON.stringify(iss.input)} is not supported: only "ephemeral"` }),
    ttl: z.enum(["5m", "1h"], { error: (iss) => `cache_control ttl ${JSON.stringify(iss.input)} is not supported: "5m" or "1h"` }).optional(),
  })
  .loose()
  .nullable()
  .optional();

export type CacheControl = z.infer<typeof cacheControl>;
