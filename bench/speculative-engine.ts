import type { EngineOptions, TokenRequest, TokenResult } from "../gpu-backend/engine/engine-options";
import { DEFAULT_MAX_DRAFT_TOKENS, speculationFor, type SpeculativeMode } from "../gpu-backend/engine/speculation";
import type { DraftContext, DraftSource } from "../gpu-backend/speculative/draft-source";
import type { MatchedDraft } from "../gpu-backend/speculative/matched-draft";
import { SuffixSource } from "../gpu-backend/speculative/suffix-source";
import { SuffixTree } from "../gpu-backend/speculative/suffix-tree";

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

/** The draft source of the bench's cross-trajectory phase (`crossSpeculation`): one engine, the mode picked per run. */
export interface CrossSpeculation {
  /** Engine options: speculation on, drafts from `source` (adaptive length, `DEFAULT_MAX_DRAFT_TOKENS`, as `speculationFor`). */
  engineOptions: Partial<EngineOptions>;
  /** "lookup": the sequence's own n-gram index only (`--speculative lookup`); "suffix": also the tenant's tree (`--speculative suffix`). */
  mode: "lookup" | "suffix";
  /** Whether finished replies go into the tree (off while measuring: no run drafts from an earlier run's identical reply). */
  learning: boolean;
  /** Drafts the tenant tree proposed so far to sequences of `tenant` (chosen or not). */
  treeDrafts(tenant: string): number;
}

/**
 * One engine for both modes, so that lookup, suffix and off runs alternate on the same engine:
 * the engine's own `SuffixSource` over a `SuffixTree` that counts its drafts per tenant; in
 * "lookup" mode the source's own `SequenceLookup` answers alone (what `speculationFor("lookup")`
 * builds). Replies are learned through the engine's normal path (a finished request's tokens,
 * under its cache salt) while `learning` is on.
 *
 * @example
 * const cross = crossSpeculation();
 * const engine = benchEngine(model, executor, { numBlocks, extra: cross.engineOptions });
 * cross.mode = "lookup";
 */
export function crossSpeculation(): CrossSpeculation {
  const drafts = new Map<string, number>();
  class CountingTree extends SuffixTree {
    override lookup(context: DraftContext, max: number): MatchedDraft {
      const draft = super.lookup(context, max);
      if (draft.tokenIds.length > 0) drafts.set(context.tenant, (drafts.get(context.tenant) ?? 0) + 1);
      return draft;
    }
  }
  const suffix = new SuffixSource(new CountingTree());
  const state: CrossSpeculation = {
    engineOptions: {},
    mode: "suffix",
    learning: true,
    treeDrafts: (tenant) => drafts.get(tenant) ?? 0,
  };
  const source: DraftSource = {
    propose: (context, max) => (state.mode === "lookup" ? suffix.sequence.propose(context, max) : suffix.propose(context, max)),
    observe: (reply) => {
      if (state.learning) suffix.observe(reply);
    },
  };
  state.engineOptions = { speculative: { source, maxDraftTokens: DEFAULT_MAX_DRAFT_TOKENS, adaptive: true } };
  return state;
}
