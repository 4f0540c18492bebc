import { DraftLength } from "../speculative/draft-length";
import type { DraftSource } from "../speculative/draft-source";
import { SequenceLookup } from "../speculative/sequence-lookup";
import { SuffixSource } from "../speculative/suffix-source";
import { SuffixTree } from "../speculative/suffix-tree";
import type { Job } from "./job";
import { RECENT } from "../model/graph/decode-attention";

import type { JobSpeculation } from "./job";

export type { JobSpeculation } from "./job";

/** Speculative decoding's engine option (`--speculative`, `--speculative-max`). Absent: off. */
export interface SpeculationOptions {
  /** Where drafts come from (speculative/: prompt lookup, the tenant's suffix tree). */
  source: DraftSource;
  /** Most tokens drafted per sequence per step. */
  maxDraftTokens: number;
  /**
   * Adapt each sequence's draft length to its acceptance, up to `maxDraftTokens`, off where no
   * length pays (speculative/draft-length.ts). Absent or false: every draft asks for `maxDraftTokens`.
   */
  adaptive?: boolean;
}

/** `--speculative`: off, prompt lookup over the sequence's own tokens, or the tenant's suffix tree too. */
export type SpeculativeMode = "off" | "lookup" | "suffix";

/** The backend's default `--speculative-max`: most tokens drafted per sequence per step. */
export const DEFAULT_MAX_DRAFT_TOKENS = 8;

/**
 * The largest `--speculative-max`: a verify run of 1 + k rows is attended like decode rows (so
 * its outputs are the plain decode's, bit for bit) up to RECENT rows (model/graph/decode-attention.ts).
 */
export const MAX_DRAFT_TOKENS = RECENT - 1;

/**
 * The engine option for a `--speculative` mode (undefined for "off"): `lookup` drafts from the
 * sequence's own prompt and output (`SequenceLookup`), `suffix` also from the tenant's recent
 * replies (`SuffixSource` over one `SuffixTree` for the backend); either with the adaptive length.
 *
 * @example createEngine({ ...options, speculative: speculationFor("lookup", 8) });
 */
export function speculationFor(mode: SpeculativeMode, maxDraftTokens = DEFAULT_MAX_DRAFT_TOKENS): SpeculationOptions | undefined {
  if (mode === "off") return undefined;
  if (maxDraftTokens > MAX_DRAFT_TOKENS) throw new RangeError(`at most ${MAX_DRAFT_TOKENS} draft tokens per step, got ${maxDraftTokens}`);
  return { source: mode === "lookup" ? new SequenceLookup() : new SuffixSource(new SuffixTree()), maxDraftTokens, adaptive: true };
}

/**
 * A new job's speculation: its tenant, its figures at 0, and its draft length when adaptive.
 *
 * @example job.speculation = jobSpeculation(options, req.cacheSalt ?? "");
 */
export function jobSpeculation(options: SpeculationOptions, tenant: string): JobSpeculation {
  return { tenant, drafted: 0, accepted: 0, length: options.adaptive ? new DraftLength({ maxLength: options.maxDraftTokens }) : undefined };
}

/** Engine-wide speculation figures, read by /metrics. */
export interface SpeculationCounters {
  /** Draft tokens verified. */
  drafted: number;
  /** Draft tokens accepted. */
  accepted: number;
  /** Sequence-steps that verified a draft (each yields accepted + 1 tokens). */
  verifies: number;
  /** By draft length k (index k): verify steps with a k-token draft, and their accepted tokens. */
  byLength: { verifies: number[]; accepted: number[] };
}

/** @example counters.speculation = newSpeculationCounters(); */
export function newSpeculationCounters(): SpeculationCounters {
  return { drafted: 0, accepted: 0, verifies: 0, byLength: { verifies: [], accepted: [] } };
}

/**
 * The draft a decoding job's next step verifies: its source's guess, at most `maxDraftTokens`
 * and never past the reply's budget (the step yields up to k + 1 tokens), cut at the first id
 * outside the vocabulary and where the grammar of a constrained job refuses it. [] when the job
 * does not speculate or is not decoding (its last token is the only one not computed).
 *
 * `decoding`: the sequences decoding this step, which share its fixed cost (the adaptive length
 * drafts less as it grows: `batchedDraftCost`).
 *
 * @example seq.draft = draftFor(job, options, kv.numComputedTokens(seq.seqId), spec.vocabSize, 1);
 */
export function draftFor(job: Job, options: SpeculationOptions, numComputed: number, vocabSize: number, decoding: number): number[] {
  const seq = job.seq;
  if (!job.speculation || job.finished || seq.status !== "running" || seq.numGenerated === 0 || numComputed !== seq.tokenIds.length - 1) return [];
  const max = Math.min(job.speculation.length ? job.speculation.length.next(decoding) : options.maxDraftTokens, seq.maxTokens - seq.numGenerated - 1);
  if (max <= 0) return [];
  const draft = options.source.propose({ tenant: job.speculation.tenant, tokenIds: seq.tokenIds, numPromptTokens: seq.numPromptTokens }, max).slice(0, max);
  const bad = draft.findIndex((id) => !Number.isInteger(id) || id < 0 || id >= vocabSize);
  if (bad >= 0) draft.length = bad;
  return job.constraint ? job.constraint.draftPrefix(draft) : draft;
}

/**
 * Counts one verify step: `k` drafted tokens, `accepted` of them kept.
 *
 * @example noteVerify(engine.counters.speculation, job, 4, 3);
 */
export function noteVerify(counters: SpeculationCounters, job: Job, k: number, accepted: number): void {
  if (k === 0) return;
  counters.drafted += k;
  counters.accepted += accepted;
  counters.verifies++;
  counters.byLength.verifies[k] = (counters.byLength.verifies[k] ?? 0) + 1;
  counters.byLength.accepted[k] = (counters.byLength.accepted[k] ?? 0) + accepted;
  if (job.speculation) {
    job.speculation.drafted += k;
    job.speculation.accepted += accepted;
    job.speculation.length?.record(k, accepted);
  }
}
