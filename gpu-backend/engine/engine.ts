import { ProtocolError, toProtocolError } from "../../protocol/errors";
import type { FinishReason, Frame, GenerateRequest, KvEventBatch, KvFetchRequest, KvPullReport, TokenizeRequest, TokenLogprob } from "../../protocol/messages";
import type { ConstrainedReply } from "../constraint/constrained-reply";
import type { EvictionLog } from "../kv/eviction-log";
import type { HostTier } from "../kv/host-tier";
import type { KvCacheManager } from "../kv/kv-cache-manager";
import type { KvEventLog } from "../kv/kv-events";
import type { StepSequence } from "../model/executors/executor";
import type { PrefillRate } from "../scheduler/prefill-rate";
import type { Scheduler } from "../scheduler/scheduler";
import type { Sequence } from "../scheduler/sequence";
import type { KvPuller } from "../transfer/kv-pull";
import type { KvServer } from "../transfer/kv-serve";
import type { EngineCounters, EngineOptions, EngineParts, TokenRequest, TokenResult } from "./engine-options";
import type { Job, JobQueue } from "./job";
import { tokenLogprob } from "./logprobs";
import { argmax as argmaxOf } from "./sampler";
import { draftFor, newSpeculationCounters, noteVerify } from "./speculation";
import type { StateLeases } from "./state-leases";
import type { StateStore } from "./state-store";
import { stepRecord } from "./step-trace";
import { TurnIntake } from "./turn-intake";
import { acceptToken, closeOutput } from "./turn-output";

export type { EngineCounters, EngineOptions, EngineParts, TokenRequest, TokenResult } from "./engine-options";

/**
 * The step loop: schedules the queued sequences (continuous batching, chunked prefill,
 * prefix-cache admission), runs the executor, samples, and hands each token to the output side.
 * The engine has three parts, as vLLM splits input processing, the core loop and output
 * processing: turn intake (`TurnIntake`, turn-intake.ts: request -> sequence and job, constraint,
 * KV pull), this loop, and output (turn-output.ts: accept, stop strings, detokenize, finish,
 * done frame). It builds none of its subsystems: `createEngine` (create-engine.ts) composes them.
 *
 * @example
 * const engine = createEngine({ executor, pool, codec, modelId, scheduler: { maxBatchTokens: 512, maxRunningSequences: 64 },
 *   enablePrefixCache: true, backendId: "b0" });
 * engine.submit(request, (frame) => send(frame));
 */
export class Engine implements JobQueue {
  // The parts it was given (see `EngineParts`), read by the server: routes, metrics, heartbeats, drains.
  readonly options: EngineOptions;
  readonly kv: KvCacheManager;
  readonly scheduler: Scheduler;
  readonly prefillRate: PrefillRate;
  readonly states: StateStore;
  readonly leases: StateLeases;
  readonly kvEvents: KvEventLog;
  readonly evictions: EvictionLog;
  readonly kvServer: KvServer;
  readonly kvPuller: KvPuller | undefined;
  readonly hostTier: HostTier | undefined;
  readonly counters: EngineCounters = { promptTokens: 0, cachedTokens: 0, computedTokens: 0, generatedTokens: 0, steps: 0, preemptions: 0, requests: 0, stepTokens: 0, stepMs: 0, grammarMs: 0, speculation: newSpeculationCounters() };
  /** Requests in, sequences and jobs out (turn-intake.ts). */
  private readonly intake: TurnIntake;
  private readonly jobs = new Map<number, Job>();
  private looping = false;
  private idleWaiters: (() => void)[] = [];

  /** @example const engine = new Engine(parts); // parts: what createEngine composed */
  constructor(parts: EngineParts) {
    this.options = parts.options;
    this.kv = parts.kv;
    this.scheduler = parts.scheduler;
    this.prefillRate = parts.prefillRate;
    this.states = parts.states;
    this.leases = parts.leases;
    this.kvEvents = parts.kvEvents;
    this.evictions = parts.evictions;
    this.kvServer = parts.kvServer;
    this.kvPuller = parts.kvPuller;
    this.hostTier = parts.hostTier;
    this.intake = new TurnIntake(parts, this);
  }

  get modelId(): string {
    return this.options.modelId;
  }

  get numRunning(): number {
    return this.scheduler.running.length;
  }

  get numWaiting(): number {
    return this.scheduler.waiting.length;
  }

  /** The model's context in tokens: prompt and reply together. */
  get contextTokens(): number {
    return this.intake.contextTokens;
  }

  // Requests come in through the intake (turn-intake.ts), which hands the loop its jobs (`add`).

  /**
   * Starts one chat turn. Frames go to `sink` as they are produced: token frames, then exactly
   * one done or error frame. Never throws: bad input becomes an error frame.
   */
  submit(req: GenerateRequest, sink: (frame: Frame) => void, signal?: AbortSignal): void {
    this.intake.submit(req, sink, signal);
  }

  /** Generates from raw token ids (no template, no state). */
  generateTokens(req: TokenRequest, signal?: AbortSignal): Promise<TokenResult> {
    return this.intake.generateTokens(req, signal);
  }

  /**
   * `POST /v1/kv/fetch`: pulls the full blocks of `req.tokenIds` this backend lacks from
   * `req.source` now, whatever the cost model says (the alternative is losing them: the source
   * is draining). Throws when this backend pulls nothing (`--kv-pull never`, no block I/O).
   */
  fetchBlocks(req: KvFetchRequest): Promise<KvPullReport> {
    return this.intake.fetchBlocks(req);
  }

  /** Prompt tokens of a full turn over the request's messages and tools (`POST /v1/tokenize`), counted as `submit` builds them. */
  countPromptTokens(req: TokenizeRequest): number {
    return this.intake.countPromptTokens(req);
  }

  releaseState(stateId: string): boolean {
    return this.states.release(stateId);
  }

  /**
   * The KV events to publish with the next heartbeat: the delta since the last batch, or a
   * snapshot of every cached hash after a resync (see `KvEventLog`).
   *
   * @example body.kvEvents = engine.kvEventBatch();
   */
  kvEventBatch(): KvEventBatch {
    return this.kvEvents.take(() => this.kv.cachedBlockHashes(), () => this.hostTier?.hashes() ?? []);
  }

  /** Resolves when no sequence is waiting or running. */
  idle(): Promise<void> {
    if (!this.scheduler.hasWork) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Queues a job made by the intake: throws `overloaded` past the queue bound, before anything is kept. */
  add(job: Job): void {
    this.scheduler.add(job.seq);
    this.jobs.set(job.seq.seqId, job);
    this.counters.requests++;
    job.signal?.addEventListener("abort", () => this.finish(job, "cancelled"), { once: true });
    void this.loop();
  }

  private async loop(): Promise<void> {
    if (this.looping) return;
    this.looping = true;
    try {
      while (this.scheduler.hasWork) {
        const drafted = this.proposeDrafts();
        const plan = this.scheduler.schedule();
        for (const seq of drafted) seq.draft = []; // the plan's items keep what each step verifies
        this.counters.preemptions += plan.preempted.length;
        for (const seq of plan.rejected) {
          const job = this.jobs.get(seq.seqId);
          if (job) this.fail(job, new ProtocolError("context_length_exceeded", `the sequence needs more KV blocks than this backend's pool holds (${this.options.pool.numBlocks} blocks of ${this.options.pool.blockSize} tokens)`));
        }
        if (plan.items.length === 0) {
          if (plan.rejected.length === 0 && plan.preempted.length === 0) await new Promise((r) => setImmediate(r));
          continue;
        }
        // Greedy decoding without logprobs needs only the argmax: its logits row is never fetched.
        // A draft is verified after the sequence's last token: every position's row (or, greedy
        // without logprobs, every position's argmax) comes back.
        const steps: StepSequence[] = plan.items.map((item) => {
          const job = this.jobs.get(item.seq.seqId);
          const argmaxOnly = job?.sampler.greedy && job.logprobs === undefined && !job.constraint;
          return {
            tokenIds: [...item.seq.tokenIds.slice(item.startPos, item.startPos + item.numTokens), ...item.draft],
            startPos: item.startPos,
            blockTable: this.kv.blockTable(item.seq.seqId),
            logits: !item.samples ? "none" : item.draft.length > 0 ? (argmaxOnly ? "argmax-all" : "all") : argmaxOnly ? "argmax" : "last",
            verify: item.draft.length > 0,
          };
        });
        const t0 = performance.now();
        const cpu0 = this.options.onStep ? process.cpuUsage() : undefined;
        const { logits, argmax, argmaxRows } = await this.options.executor.run(steps);
        const wallMs = performance.now() - t0;
        const stepTokens = steps.reduce((a, s) => a + s.tokenIds.length, 0);
        this.counters.steps++;
        this.counters.stepTokens += stepTokens;
        this.counters.stepMs += wallMs;
        this.prefillRate.noteStep(plan.items.reduce((a, it) => a + Math.max(0, Math.min(it.numTokens, it.seq.numPromptTokens - it.startPos)), 0), wallMs);
        if (cpu0) {
          const cpu = process.cpuUsage(cpu0);
          this.options.onStep!(stepRecord(steps, { at: Date.now(), wallMs, cpuMs: (cpu.user + cpu.system) / 1000 }));
        }

        for (const [i, item] of plan.items.entries()) {
          const job = this.jobs.get(item.seq.seqId);
          if (!job || job.finished) continue;
          this.kv.markComputed(item.seq.seqId, item.numTokens);
          if (!item.samples) continue;
          if (item.draft.length === 0) {
            await this.next(job, logits[i], argmax[i]!, undefined);
            continue;
          }
          await this.verify(job, item.draft, logits[i]!, argmaxRows[i]!);
        }
      }
    } catch (e) {
      const err = toProtocolError(e);
      for (const job of [...this.jobs.values()]) this.fail(job, err);
    } finally {
      this.looping = false;
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }

  /**
   * Speculative decoding's sequences this step: each decoding job that speculates gets its
   * source's draft (`Sequence.draft`), which the scheduler runs after its last token.
   */
  private proposeDrafts(): Sequence[] {
    const spec = this.options.speculative;
    if (!spec) return [];
    const drafted: Sequence[] = [];
    // The sequences decoding this step (their last token the only one not computed) share its cost.
    const decoding = [...this.jobs.values()].filter((job) => job.seq.status === "running" && this.kv.numComputedTokens(job.seq.seqId) === job.seq.tokenIds.length - 1);
    for (const job of decoding) {
      if (!job.speculation) continue;
      const draft = draftFor(job, spec, job.seq.tokenIds.length - 1, this.options.executor.spec.vocabSize, decoding.length);
      if (draft.length === 0) continue;
      job.seq.draft = draft;
      drafted.push(job.seq);
    }
    return drafted;
  }

  /**
   * Verifies a draft from the step's rows (row j: the logits after the last token and j draft
   * tokens): each position's token is picked exactly as a plain step would pick it (`next`; the
   * sampler's rejection rule against the draft token when sampling), in order, through the output
   * side; while it equals the draft token there, that token's KV (computed this step) is kept and
   * the next row is read. The first token that differs (or the one after a fully accepted draft)
   * ends the step; a token that ends the reply discards the rest. The rejected tokens' slots go
   * back to the pool; their KV was never marked computed, so no prefix hash covers it. `rows` is
   * empty when only the rows' argmaxes were fetched (`argmaxRows`: greedy, no logprobs).
   */
  private async verify(job: Job, draft: readonly number[], rows: Float32Array, argmaxRows: Int32Array): Promise<void> {
    const V = this.options.executor.spec.vocabSize;
    let accepted = 0;
    for (let j = 0; j <= draft.length; j++) {
      const row = rows.length > 0 ? rows.subarray(j * V, (j + 1) * V) : undefined;
      const tokenId = await this.next(job, row, argmaxRows[j]!, draft[j]);
      if (job.finished || j === draft.length || tokenId !== draft[j]) break;
      this.kv.markComputed(job.seq.seqId, 1);
      accepted++;
    }
    noteVerify(this.counters.speculation, job, draft.length, accepted);
    if (!job.finished) this.kv.releaseSlots(job.seq.seqId, job.seq.tokenIds.length);
  }

  /**
   * Picks and accepts the job's next token from one logits row (`row` may be empty when only
   * `rowArgmax` was fetched): demo agent mode's end of turn, the grammar's token for a
   * constrained job, else the sampler's (its rejection rule against `draftToken` when one was
   * drafted at this position). Returns the token accepted, or null when none was.
   */
  private async next(job: Job, row: Float32Array | undefined, rowArgmax: number, draftToken: number | undefined): Promise<number | null> {
    // Demo agent mode: the reply's last token ends the turn, where the grammar (if any) allows it.
    if (job.endTurn !== undefined && job.seq.maxTokens - job.seq.numGenerated === 1 && (job.constraint?.takeEnd(job.endTurn) ?? true)) {
      this.accept(job, job.endTurn, this.logprobOf(job, row, job.endTurn));
      return job.endTurn;
    }
    if (job.constraint) return this.acceptConstrained(job, job.constraint, row!, rowArgmax, draftToken);
    const tokenId = job.sampler.greedy ? rowArgmax : draftToken === undefined ? job.sampler.sample(row!) : job.sampler.verify(row!, draftToken);
    this.accept(job, tokenId, this.logprobOf(job, row, tokenId));
    return tokenId;
  }

  private logprobOf(job: Job, row: Float32Array | undefined, tokenId: number): TokenLogprob | undefined {
    return job.logprobs === undefined ? undefined : tokenLogprob(row!, tokenId, job.logprobs, (id) => this.options.codec.tokenPiece(id));
  }

  /** A constrained job's token: the grammar masks (a copy of) the row, logprobs stay those of the model's raw row. */
  private async acceptConstrained(job: Job, constraint: ConstrainedReply, row: Float32Array, rowArgmax: number, draftToken: number | undefined): Promise<number | null> {
    const masked = job.logprobs === undefined ? row : row.slice();
    let pickMs = 0;
    const pick = (r: Float32Array) => {
      const t0 = performance.now();
      const id = job.sampler.greedy ? argmaxOf(r) : draftToken === undefined ? job.sampler.sample(r) : job.sampler.verify(r, draftToken);
      pickMs += performance.now() - t0;
      return id;
    };
    const t0 = performance.now();
    const { tokenId, end } = await constraint.next(masked, pick, job.seq.maxTokens - job.seq.numGenerated, job.sampler.greedy ? rowArgmax : undefined);
    this.counters.grammarMs += performance.now() - t0 - pickMs;
    if (job.finished) return null; // cancelled while the mask was computed
    if (tokenId !== null) this.accept(job, tokenId, this.logprobOf(job, row, tokenId), end);
    if (end) this.finish(job, "stop");
    return tokenId;
  }

  /** `complete`: the constraint's structure ends with this token (the caller finishes the job with "stop"). */
  private accept(job: Job, tokenId: number, logprob: TokenLogprob | undefined, complete = false): void {
    this.counters.generatedTokens++;
    const reason = acceptToken(job, tokenId, logprob, complete);
    if (reason) this.finish(job, reason);
  }

  private finish(job: Job, reason: FinishReason): void {
    if (job.finished) return;
    job.finished = true;
    job.constraint?.dispose();
    closeOutput(job, reason, this.kv);
    this.scheduler.finish(job.seq);
    this.jobs.delete(job.seq.seqId);
    this.counters.promptTokens += job.seq.numPromptTokens;
    this.counters.cachedTokens += job.seq.numCachedTokens;
    this.counters.computedTokens += job.seq.numPrefilledTokens;
    job.onFinish(reason, job);
    // After the done frame went out: learning a reply costs ~5 µs a token (a tenant's suffix tree).
    if (job.speculation && reason !== "cancelled") this.options.speculative?.source.observe?.({ tenant: job.speculation.tenant, tokenIds: job.seq.tokenIds.slice(job.seq.numPromptTokens) });
  }

  private fail(job: Job, err: ProtocolError): void {
    if (job.finished) return;
    job.finished = true;
    job.constraint?.dispose();
    this.scheduler.finish(job.seq);
    this.jobs.delete(job.seq.seqId);
    job.sink(err.toFrame());
  }
}
