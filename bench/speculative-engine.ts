import type { EngineOptions, TokenRequest, TokenResult } from "../gpu-backend/engine/engine-options";
import { DEFAULT_MAX_DRAFT_TOKENS, speculationFor, type SpeculativeMode } from "../gpu-backend/engine/speculation";

/**
 * How `npm run bench -- speculative` turns the engine's speculative decoding on and off: the one
 * place that knows the engine's option (issue 37, `--speculative off|lookup|suffix`,
 * engine/speculation.ts). The bench builds one engine with speculation on in a mode and runs the
 * "off" requests on that same engine with the per-request opt-out (`speculative: false`),
 * interleaved with the "on" ones.
 *
 * `speculationHook()` answers null where the engine has no speculative decoding: the bench then
 * measures the "off" side (and llama.cpp's both sides) and reports the "on" side as pending.
 *
 * @example
 * const hook = speculationHook();
 * if (hook) engine = benchEngine(model, executor, { numBlocks, extra: hook.engineOptions("lookup") });
 */
export interface SpeculationHook {
  /** The modes the engine offers besides off, the first the bench's default. */
  modes: readonly string[];
  /** Most tokens drafted per sequence per step (the backend's default `--speculative-max`). */
  maxDraftTokens: number;
  /** Engine options with speculation on in `mode`. */
  engineOptions(mode: string): Partial<EngineOptions>;
  /** What an "off" request adds to opt out on an engine that speculates. */
  optOut: Partial<TokenRequest>;
  /** Draft tokens a finished request verified and accepted. */
  figures(result: TokenResult): { drafted: number; accepted: number };
}

/** Why the "on" side is not measured, while `speculationHook()` is null. */
export const PENDING = "pending: this build's engine has no speculative decoding option (issue 37): speculation off measured, on not run";

/** The engine's speculation (engine/speculation.ts), or null where it has none. */
export function speculationHook(): SpeculationHook | null {
  return {
    modes: ["lookup", "suffix"],
    maxDraftTokens: DEFAULT_MAX_DRAFT_TOKENS,
    engineOptions: (mode) => ({ speculative: speculationFor(mode as SpeculativeMode, DEFAULT_MAX_DRAFT_TOKENS) }),
    optOut: { speculative: false },
    figures: (r) => r.speculation ?? { drafted: 0, accepted: 0 },
  };
}
