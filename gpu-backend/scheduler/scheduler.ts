import type { BlockHash } from "../../protocol/block-hash";
import { ProtocolError } from "../../protocol/errors";
import type { KvSequence } from "../kv/kv-sequence";
import type { PrefillRate } from "./prefill-rate";
import type { Sequence } from "./sequence";
import { PrefillGroupCost } from "./prefill-group-cost";

/**
 * What the scheduler needs from the KV cache manager (gpu-backend/kv). The scheduler never
 * touches the block pool itself.
 */
export interface KvPort {
  findCachedPrefix(params: { tokenIds: readonly number[]; root: BlockHash; memo?: BlockHash[] }): { numCachedTokens: number };
  /** Registers the sequence and sets its status to "running" (restartSequence too; preempt sets "preempted"). */
  startSequence(seq: KvSequence): { numCachedTokens: number };
  restartSequence(seqId: number): { numCachedTokens: number };
  allocateSlots(seqId: number, numNewTokens: number, numLookaheadTokens?: number): boolean;
  numComputedTokens(seqId: number): number;
  freeSequence(seqId: number): void;
  preempt(seqId: number): void;
}

export interface SchedulerConfig {
  /** Token budget of one step: decode tokens plus prefill chunk tokens. Default 512. */
  maxBatchTokens: number;
  /** Most sequences running at once. Default 64. */
  maxRunningSequences: number;
  /** Tokens per KV block (to judge which in-flight prefills a waiting sequence can reuse). */
  blockSize: number;
  /**
   * Wasted attention score entries allowed per prefill token when several sequences prefill in
   * one step (see PrefillGroupCost). A good value is half the ratio of a token's linear FLOPs to
   * one score entry's FLOPs: `prefillWastePerToken(spec)` in the engine. Default 1024.
   */
  prefillWastePerToken?: number;
  /**
   * Bound on queued work: prompt tokens admitted to the engine and not yet computed (waiting
   * sequences' uncached prompts, estimated from the prefix cache on arrival, plus the rest of
   * running prefills). A new sequence that would take the queue past it is refused as
   * `overloaded` (HTTP 429), unless nothing is queued. Default: no bound (the backend's
   * `--max-queued-tokens` sets one: `DEFAULT_MAX_QUEUED_TOKENS`).
   */
  maxQueuedTokens?: number;
}

/** The backend's default bound on queued prompt tokens (`--max-queued-tokens`): 32 steps of 512. */
export const DEFAULT_MAX_QUEUED_TOKENS = 16_384;

export const DEFAULT_PREFILL_WASTE_PER_TOKEN = 1024;

export interface ScheduledItem {
  seq: Sequence;
  /** First position computed this step (tokens before it are in the KV pool). */
  startPos: number;
  numTokens: number;
  /** True when this chunk reaches the end of the known tokens: the step samples a token. */
  samples: boolean;
  /**
   * The speculative draft this step verifies after the sequence's last token (a decode step only;
   * [] for none): run as lookahead tokens, their slots allocated, counted in the token budget.
   */
  draft: readonly number[];
}

export interface StepPlan {
  items: ScheduledItem[];
  /** Sequences preempted by this step (blocks freed; they recompute later). */
  preempted: Sequence[];
  /** Sequences that can never fit in the KV pool, even alone. */
  rejected: Sequence[];
}

/**
 * Continuous batching with chunked prefill, in the style of vLLM v1.
 *
 * Each step:
 *   1. running sequences that decode (one token left to compute) go first, oldest first;
 *   2. then running sequences still in prefill, a chunk each, within the token budget;
 *   3. then waiting sequences are admitted (prefix-cache lookup, then their first chunk) while
 *      budget, blocks and the running-sequence cap allow, first come first served; a sequence
 *      whose prompt shares uncached full blocks with a running prefill waits until those blocks
 *      are cached, so a prefix is never computed twice at once.
 * A decoding sequence with a speculative draft (`Sequence.draft`, set by the engine) runs its last
 * token and the draft together, 1 + k tokens of the budget and k lookahead slots; the draft is
 * cut to the budget left, and dropped (plain decode) when its slots or its attention do not fit:
 * a draft never preempts anyone.
 * Prefill chunks of several sequences share a step only while their flat attention stays cheap
 * (see PrefillGroupCost): long-context sequences with short new turns take turns instead.
 * When blocks run out for a running sequence, the newest running sequence is preempted (blocks
 * freed, recomputed later; its cached full blocks usually make that cheap) until it fits. Nothing
 * is admitted in a step that preempted. A sequence that cannot fit even alone is rejected.
 *
 * @example
 * const scheduler = new Scheduler(kvManager, { maxBatchTokens: 512, maxRunningSequences: 64 });
 * scheduler.add(seq);
 * const plan = scheduler.schedule();
 */
export class Scheduler {
  readonly waiting: Sequence[] = [];
  readonly running: Sequence[] = [];
  /** Sequences refused by the queue bound (`overloaded`), since start. */
  refused = 0;

  constructor(
    private readonly kv: KvPort,
    readonly config: SchedulerConfig,
    /** The engine's measured prefill rate: a refusal's `retryAfterS` is the queue's drain time at it. */
    private readonly prefillRate?: PrefillRate,
  ) {}

  /**
   * Queues a new sequence, or refuses it (`overloaded`) when its uncached prompt would take the
   * queued tokens past `maxQueuedTokens`: the caller answers 429 and the edge tries elsewhere.
   * The refusal carries `retryAfterS`, the seconds the queue takes to drain at the measured
   * prefill rate (`PrefillRate.retryAfterS`; absent before a measurement).
   */
  add(seq: Sequence): void {
    // Hashes into the sequence's memo: admission reuses them.
    seq.queuedTokens = seq.numPromptTokens - this.kv.findCachedPrefix({ tokenIds: seq.tokenIds, root: seq.hashRoot, memo: seq.blockHashes }).numCachedTokens;
    const max = this.config.maxQueuedTokens ?? Infinity;
    const queued = max === Infinity ? 0 : this.queuedTokens();
    if (queued > 0 && queued + seq.queuedTokens > max) {
      this.refused++;
      throw new ProtocolError("overloaded", `this backend has ${queued} prompt tokens queued; ${seq.queuedTokens} more would pass its bound of ${max} (--max-queued-tokens): retry later or on another backend`, { retryAfterS: this.prefillRate?.retryAfterS(queued) });
    }
    seq.status = "waiting";
    this.waiting.push(seq);
  }

  /** Prompt tokens admitted and not yet computed: waiting sequences' estimates, running prefills' rest. */
  queuedTokens(): number {
    let n = 0;
    for (const s of this.waiting) n += s.queuedTokens;
    for (const s of this.running) n += Math.max(0, s.numPromptTokens - this.kv.numComputedTokens(s.seqId));
    return n;
  }

  get hasWork(): boolean {
    return this.waiting.length > 0 || this.running.length > 0;
  }

  /** Removes a sequence (finished, cancelled or failed) and frees its blocks. */
  finish(seq: Sequence): void {
    if (seq.status === "finished") return;
    const r = this.running.indexOf(seq);
    if (r >= 0) this.running.splice(r, 1);
    const w = this.waiting.indexOf(seq);
    if (w >= 0) this.waiting.splice(w, 1);
    if (seq.status === "running" || seq.status === "preempted") this.kv.freeSequence(seq.seqId);
    seq.status = "finished";
  }

  schedule(): StepPlan {
    let budget = this.config.maxBatchTokens;
    const items: ScheduledItem[] = [];
    const preempted: Sequence[] = [];
    const rejected: Sequence[] = [];
    const scheduled = new Set<Sequence>();
    const prefill = new PrefillGroupCost(this.config.prefillWastePerToken ?? DEFAULT_PREFILL_WASTE_PER_TOKEN);

    const byRemaining = [...this.running].sort((a, b) => {
      const da = this.remaining(a) === 1 ? 0 : 1;
      const db = this.remaining(b) === 1 ? 0 : 1;
      return da - db || a.arrivalMs - b.arrivalMs;
    });
    for (const seq of byRemaining) {
      if (budget === 0) break;
      if (seq.status !== "running") continue; // preempted earlier in this loop
      const n = Math.min(this.remaining(seq), budget);
      const startPos = this.kv.numComputedTokens(seq.seqId);
      const k = this.remaining(seq) === 1 ? this.draftFits(seq, budget) : 0;
      if (k > 0) {
        items.push({ ...this.item(seq, 1), draft: seq.draft.slice(0, k) });
        scheduled.add(seq);
        budget -= 1 + k;
        continue;
      }
      if (!prefill.admits(startPos, n)) continue; // next step: batching it now would waste attention
      let fits = this.kv.allocateSlots(seq.seqId, n);
      while (!fits) {
        const victim = this.newestRunning(scheduled);
        if (!victim) break;
        this.preempt(victim);
        preempted.push(victim);
        if (victim === seq) break;
        fits = this.kv.allocateSlots(seq.seqId, n);
      }
      if (!fits) {
        if (seq.status === "running") {
          // Nothing left to preempt and it still does not fit: it can never run here.
          this.finish(seq);
          rejected.push(seq);
        }
        continue;
      }
      items.push(this.item(seq, n));
      prefill.add(startPos, n);
      scheduled.add(seq);
      budget -= n;
    }

    if (preempted.length === 0) {
      for (let w = 0; w < this.waiting.length && budget > 0 && this.running.length < this.config.maxRunningSequences; ) {
        const seq = this.waiting[w]!;
        const wasPreempted = seq.status === "preempted"; // else "waiting": never admitted
        // One prefix lookup serves both checks below (it hashes the whole prompt).
        const cachedNow = this.kv.findCachedPrefix({ tokenIds: seq.tokenIds, root: seq.hashRoot }).numCachedTokens;
        if (!wasPreempted && this.prefixInFlight(seq, cachedNow)) {
          w++; // another sequence is computing blocks this one can reuse: admit it once they are cached
          continue;
        }
        if (!prefill.admits(cachedNow, Math.min(seq.tokenIds.length - cachedNow, budget))) {
          w++;
          continue;
        }
        if (wasPreempted) this.kv.restartSequence(seq.seqId);
        else seq.numCachedTokens = this.kv.startSequence(seq).numCachedTokens;
        const n = Math.min(this.remaining(seq), budget);
        if (!this.kv.allocateSlots(seq.seqId, n)) {
          if (this.running.length === 0 && items.length === 0) {
            this.waiting.splice(w, 1);
            this.finish(seq);
            rejected.push(seq);
            continue;
          }
          // Give its cached blocks back (back to "preempted" or "waiting"); it is looked up again when it is admitted.
          if (wasPreempted) this.kv.preempt(seq.seqId);
          else {
            this.kv.freeSequence(seq.seqId);
            seq.status = "waiting";
          }
          break;
        }
        this.waiting.splice(w, 1);
        seq.firstScheduledMs ??= performance.now();
        this.running.push(seq);
        prefill.add(this.kv.numComputedTokens(seq.seqId), n);
        items.push(this.item(seq, n));
        scheduled.add(seq);
        budget -= n;
      }
    }
    return { items, preempted, rejected };
  }

  /**
   * True when a running sequence is still prefilling at least one more full block of this
   * sequence's prompt than the cache holds now (same hash root, same tokens). Admitting now would
   * compute those blocks twice: common when many trajectories start at once with one system prompt.
   */
  private prefixInFlight(seq: Sequence, cached: number): boolean {
    const bs = this.config.blockSize;
    for (const r of this.running) {
      if (r.hashRoot !== seq.hashRoot) continue;
      const computed = this.kv.numComputedTokens(r.seqId);
      if (computed >= r.numPromptTokens) continue;
      const limit = Math.min(r.numPromptTokens, seq.tokenIds.length - 1);
      let common = 0;
      while (common < limit && r.tokenIds[common] === seq.tokenIds[common]) common++;
      if (Math.floor(common / bs) * bs >= cached + bs) return true;
    }
    return false;
  }

  /**
   * How much of the sequence's draft this step verifies (its slots allocated): 0 when none fits.
   * A verify run is attended per sequence (the cpu executor's decode group, row by row; the paged
   * executors' PagedAttention), so it adds nothing to the prefill group's cost.
   */
  private draftFits(seq: Sequence, budget: number): number {
    const k = Math.min(seq.draft.length, budget - 1);
    if (k <= 0) return 0;
    return this.kv.allocateSlots(seq.seqId, 1, k) ? k : 0;
  }

  private remaining(seq: Sequence): number {
    return seq.tokenIds.length - this.kv.numComputedTokens(seq.seqId);
  }

  private item(seq: Sequence, numTokens: number): ScheduledItem {
    const startPos = this.kv.numComputedTokens(seq.seqId);
    if (numTokens > 1 || startPos < seq.numPromptTokens) seq.numPrefilledTokens += numTokens;
    return { seq, startPos, numTokens, samples: startPos + numTokens === seq.tokenIds.length, draft: [] };
  }

  private newestRunning(exclude: Set<Sequence>): Sequence | undefined {
    let newest: Sequence | undefined;
    for (const s of this.running) if (!exclude.has(s) && (!newest || s.arrivalMs > newest.arrivalMs)) newest = s;
    return newest;
  }

  private preempt(seq: Sequence): void {
    this.kv.preempt(seq.seqId); // status "preempted"
    seq.numPreemptions++;
    this.running.splice(this.running.indexOf(seq), 1);
    this.waiting.unshift(seq);
  }
}
