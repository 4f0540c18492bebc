import { randomUUID } from "node:crypto";
import { hashRoot, shortBlockHash, type BlockHash } from "../../protocol/block-hash";
import { ProtocolError, toProtocolError } from "../../protocol/errors";
import { MAX_PROMPT_BLOCK_HASHES, type FinishReason, type Frame, type GenerateRequest, type KvPullReport } from "../../protocol/messages";
import type { KvEventBatch, KvFetchRequest, TokenizeRequest, TokenLogprob } from "../../protocol/messages";
import { KVCacheManager } from "../kv/kv-cache-manager";
import { KvEventLog } from "../kv/kv-events";
import type { StepSequence } from "../model/executors/executor";
import { Scheduler } from "../scheduler/scheduler";
import { Sequence } from "../scheduler/sequence";
import { tokenLogprob } from "./logprobs";
import { buildPrompt, countPromptTokens } from "./prompt-builder";
import { argmax as argmaxOf, Sampler } from "./sampler";
import { ConstrainedReply } from "../constraint/constrained-reply";
import { GrammarCache } from "../constraint/grammar-cache";
import { constrainsCalls, replyPlan, type ReplyPlan } from "../constraint/reply-grammar";
import { StateStore } from "./state-store";
import { LeaseTable } from "../kv/lease-table";
import { StateLeases } from "./state-leases";
import { stepRecord } from "./step-trace";
import { timingsOf, usageOf } from "./turn-figures";
import { doneFrameOf, keptState } from "./turn-output";
import type { Job, SequenceCache } from "./job";
import { EvictionLog } from "../kv/eviction-log";
import { KvPuller } from "../transfer/kv-pull";
import { KvServer } from "../transfer/kv-serve";
import { HostTier } from "../kv/host-tier";
import { StopChecker } from "./stop-checker";
import { replyBudget, type ReplyBudget } from "./reply-budget";
import { demoConstraint, demoSampling, endOfTurnTokenId } from "./demo-agent";
import { errorFrame, guarded } from "./turn-errors";
import type { EngineCounters, EngineOptions, TokenRequest, TokenResult } from "./engine-options";

export type { EngineCounters, EngineOptions, TokenRequest, TokenResult } from "./engine-options";

/**
 * The step loop: turns requests into sequences, schedules them (continuous batching, chunked
 * prefill, prefix-cache admission), runs the executor, samples, streams frames, and keeps each
 * trajectory's token state for delta turns.
 *
 * @example
 * const engine = new Engine({ executor, pool, codec, modelId, scheduler: { maxBatchTokens: 512, maxRunningSequences: 64 },
 *   enablePrefixCache: true, backendId: "b0" });
 * engine.submit(request, (frame) => send(frame));
 */
export class Engine {
  readonly kv: KVCacheManager;
  readonly scheduler: Scheduler;
  readonly states: StateStore;
  /** Tool-pause leases on turn states (`POST /v1/leases`). */
  readonly leases: StateLeases;
  /** Prefix-cache events since the last heartbeat (stored / removed block hashes). */
  readonly kvEvents: KvEventLog;
  /** Recent evictions by hash: why a turn's first missing block is gone (the done frame's `evicted`). */
  readonly evictions = new EvictionLog();
  /** Serves this pool's blocks to other backends (`POST /v1/kv/pull`). */
  readonly kvServer: KvServer;
  /** Pulls a prompt's missing blocks from another backend; undefined without block I/O, a secret or the prefix cache. */
  readonly kvPuller: KvPuller | undefined;
  /** The second KV tier (`hostTierBytes`); undefined without it, block I/O or the prefix cache. */
  readonly hostTier: HostTier | undefined;
  readonly counters: EngineCounters = {
    promptTokens: 0,
    cachedTokens: 0,
    computedTokens: 0,
    generatedTokens: 0,
    steps: 0,
    preemptions: 0,
    requests: 0,
    stepTokens: 0,
    stepMs: 0,
    grammarMs: 0,
  };
  private readonly jobs = new Map<number, Job>();
  private readonly roots = new Map<string, BlockHash>();
  private nextSeqId = 1;
  private looping = false;
  private grammarCache: Promise<GrammarCache> | undefined;
  private idleWaiters: (() => void)[] = [];
  /** The token demo agent mode ends a capped reply with (demo-agent.ts). */
  private readonly endTurnId: number | undefined;

  constructor(readonly options: EngineOptions) {
    this.endTurnId = options.demoAgent ? endOfTurnTokenId(options.codec) : undefined;
    this.kv = new KVCacheManager({ pool: options.pool, enablePrefixCache: options.enablePrefixCache });
    this.scheduler = new Scheduler(this.kv, options.scheduler);
    this.states = new StateStore(options.stateCapacity ?? 4096, (stateId) => this.kv.dropTail(stateId));
    this.kvEvents = new KvEventLog();
    const io = options.executor.blockIO;
    this.kvServer = new KvServer({ kv: this.kv, io, modelId: options.modelId, rootFor: (salt) => this.rootFor(salt) });
    options.pool.setEvictionLog(this.evictions);
    this.hostTier = io && options.enablePrefixCache && (options.hostTierBytes ?? 0) > 0 ? new HostTier(options.hostTierBytes!, this.kvEvents, this.evictions) : undefined;
    if (this.hostTier && io) this.kv.setHostTier({ tier: this.hostTier, bytesPerBlock: io.bytesPerBlock, read: io.read, write: io.write });
    this.kvPuller = io && options.transfer && options.enablePrefixCache ? new KvPuller({ kv: this.kv, io, modelId: options.modelId, ...options.transfer }) : undefined;
    // With the prefix cache off nothing is ever hashed: the batches stay empty.
    options.pool.setEventSink(this.kvEvents);
    this.leases = new StateLeases({ kv: this.kv, states: this.states, table: new LeaseTable({ pool: options.pool, ...options.leases }), codec: options.codec });
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

  get modelId(): string {
    return this.options.modelId;
  }

  get numRunning(): number {
    return this.scheduler.running.length;
  }

  get numWaiting(): number {
    return this.scheduler.waiting.length;
  }

  /**
   * Starts one chat turn. Frames go to `sink` as they are produced: token frames, then exactly
   * one done or error frame. Never throws: bad input becomes an error frame.
   */
  submit(req: GenerateRequest, sink: (frame: Frame) => void, signal?: AbortSignal): void {
    try {
      this.checkModel(req.model);
      this.leases.onTurn(req);
      const prompt = buildPrompt(req, this.options.codec, this.states);
      const root = this.rootFor(req.cacheSalt ?? "");
      const { demoAgent: demo, codec } = this.options;
      const constraint = demo ? demoConstraint(req.constraint, prompt.tools, prompt.messages, constrainsCalls(codec.toolCallConvention)) : req.constraint;
      const plan = replyPlan(constraint, prompt.tools ?? [], codec.toolCallConvention);
      const budget = replyBudget(demo ? demoSampling(req.sampling) : req.sampling, prompt.tokenIds.length, this.contextTokens, demo?.replyTokens);
      const cache: SequenceCache = { root, resumeTail: prompt.base, stateId: randomUUID() };
      const onFinish = (reason: FinishReason, job: Job) => {
        if (reason === "cancelled") return;
        const stateId = cache.stateId!;
        const text = job.stops.fullText;
        // The reply as the template will render it next turn: a well-formed tool call re-renders
        // to the very text generated, so the next turn's prompt keeps the generated ids.
        const message = plan.parseToolCalls ? this.options.codec.parseAssistant(text) : { role: "assistant" as const, content: text };
        this.states.put(keptState(job, { reason, stateId, message, prompt, root, trajectoryId: req.trajectoryId, cacheSalt: req.cacheSalt ?? "" }, codec));
        const cacheWrites = req.cachePoints?.length ? this.leases.prefix.afterTurn(req.cachePoints, { ...prompt, tokenIds: job.seq.tokenIds.slice(0, job.seq.numPromptTokens), root, cachedTokens: job.seq.numCachedTokens }) : undefined;
        sink({ ...doneFrameOf(job, { reason, stateId, text, message }, { backendId: this.options.backendId, blockSize: this.kv.blockSize, evictions: this.evictions, hostTier: this.hostTier !== undefined }), ...(cacheWrites ? { cacheWrites } : {}), ...(cache.kvPull ? { kvPull: cache.kvPull } : {}) });
      };
      const start = () => {
        if (!plan.grammar && plan.bannedTexts.length === 0) return this.enqueue(prompt.tokenIds, budget, cache, sink, signal, null, onFinish);
        void this.enqueueConstrained(prompt.tokenIds, budget, plan, cache, sink, signal, onFinish);
      };
      if (!req.kvSource || !this.kvPuller) return start();
      // Blocks another backend holds are pulled first (or not: the report says why), then the turn runs.
      void this.kvPuller.pull(req.kvSource, { tokenIds: prompt.tokenIds, root, cacheSalt: req.cacheSalt ?? "" }, { signal }).then((report) => {
        cache.kvPull = report;
        if (!signal?.aborted) guarded(sink, start);
      });
    } catch (e) {
      errorFrame(sink, e);
    }
  }

  /**
   * `POST /v1/kv/fetch`: pulls the full blocks of `req.tokenIds` this backend lacks from
   * `req.source` now, whatever the cost model says (the alternative is losing them: the source
   * is draining). Throws when this backend pulls nothing (`--kv-pull never`, no block I/O).
   */
  fetchBlocks(req: KvFetchRequest): Promise<KvPullReport> {
    this.checkModel(req.model);
    if (!this.kvPuller) throw new ProtocolError("invalid_request", "this backend takes no KV from others (--kv-pull never, no shared secret, or its executor has no block I/O)");
    return this.kvPuller.pull(req.source, { tokenIds: req.tokenIds, root: this.rootFor(req.cacheSalt ?? ""), cacheSalt: req.cacheSalt ?? "" }, { policy: "always", timeoutMs: 60_000 });
  }

  /** Each kept trajectory's tokens (prompt and reply) and salt, most recently used first, but those in `skip`: what a drain pushes. */
  keptTrajectories(skip?: ReadonlySet<string>): { stateId: string; trajectoryId: string | undefined; cacheSalt: string; tokenIds: number[] }[] {
    const kept = skip ? this.states.list().filter((s) => !skip.has(s.stateId)) : this.states.list();
    return kept.map((s) => ({ stateId: s.stateId, trajectoryId: s.trajectoryId, cacheSalt: s.cacheSalt, tokenIds: [...s.promptTokenIds, ...s.generatedTokenIds] }));
  }

  /** Prompt tokens of a full turn over the request's messages and tools (`POST /v1/tokenize`), counted as `submit` builds them. */
  countPromptTokens(req: TokenizeRequest): number {
    this.checkModel(req.model);
    return countPromptTokens(req.messages, req.tools, this.options.codec, req.thinking);
  }

  /** The model's context in tokens: prompt and reply together. */
  get contextTokens(): number {
    return this.options.executor.spec.maxPositions;
  }

  private checkModel(model: string | undefined): void {
    if (model && model !== this.options.modelId) throw new ProtocolError("unknown_model", `model ${JSON.stringify(model)} is not served here (this backend serves ${this.options.modelId})`);
  }

  /** Generates from raw token ids (no template, no state). */
  generateTokens(req: TokenRequest, signal?: AbortSignal): Promise<TokenResult> {
    return new Promise((resolve, reject) => {
      const logprobs: TokenLogprob[] = [];
      const sink = (frame: Frame) => {
        if (frame.type === "error") reject(new ProtocolError(frame.code, frame.message));
        else if (frame.type === "token" && frame.logprobs) logprobs.push(...frame.logprobs);
      };
      try {
        this.enqueue(req.tokenIds, replyBudget(req.sampling, req.tokenIds.length, this.contextTokens), { root: this.rootFor(req.cacheSalt ?? "") }, sink, signal, null, (reason, job) => {
          resolve({
            tokenIds: job.seq.tokenIds.slice(job.seq.numPromptTokens),
            ...(req.sampling.logprobs === undefined ? {} : { logprobs }),
            finishReason: reason,
            usage: usageOf(job.seq),
            timings: timingsOf(job.seq, job.firstTokenMs, job.lastTokenMs),
          });
        });
      } catch (e) {
        reject(e);
      }
    });
  }

  /** The model's grammar engine, built on first use (its tokenizer info takes ~0.35 s). */
  grammars(): Promise<GrammarCache> {
    this.grammarCache ??= GrammarCache.create(this.options.codec, this.options.executor.spec.vocabSize);
    return this.grammarCache;
  }

  /** Compiles the reply's grammar and checks its budget before the sequence is queued; errors become the error frame. */
  private async enqueueConstrained(
    tokenIds: number[],
    budget: ReplyBudget,
    plan: ReplyPlan,
    cache: SequenceCache,
    sink: (frame: Frame) => void,
    signal: AbortSignal | undefined,
    onFinish: (reason: FinishReason, job: Job) => void,
  ): Promise<void> {
    let constraint: ConstrainedReply | null = null;
    try {
      constraint = await ConstrainedReply.start(await this.grammars(), this.options.codec, plan, budget.sampling.maxTokens);
      this.enqueue(tokenIds, plan.stopStrings ? budget : { ...budget, sampling: { ...budget.sampling, stop: [] } }, cache, sink, signal, constraint, onFinish);
    } catch (e) {
      constraint?.dispose();
      errorFrame(sink, e);
    }
  }

  releaseState(stateId: string): boolean {
    return this.states.release(stateId);
  }

  /** Resolves when no sequence is waiting or running. */
  idle(): Promise<void> {
    if (!this.scheduler.hasWork) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private rootFor(salt: string): BlockHash {
    let root = this.roots.get(salt);
    if (!root) {
      root = hashRoot({ modelId: this.options.modelId, salt });
      this.roots.set(salt, root);
    }
    return root;
  }

  private enqueue(
    tokenIds: number[],
    { sampling, capped }: ReplyBudget,
    cache: SequenceCache,
    sink: (frame: Frame) => void,
    signal: AbortSignal | undefined,
    constraint: ConstrainedReply | null,
    onFinish: (reason: FinishReason, job: Job) => void,
  ): void {
    if (tokenIds.length === 0) throw new ProtocolError("invalid_request", "the prompt is empty");
    const seq = new Sequence(this.nextSeqId++, [...tokenIds], tokenIds.length, sampling.maxTokens, cache.root, cache.resumeTail);
    this.scheduler.add(seq); // throws `overloaded` past the queue bound, before anything is kept
    const job: Job = {
      seq,
      sampler: new Sampler(sampling),
      logprobs: sampling.logprobs,
      stops: new StopChecker(sampling.stop),
      decoder: this.options.codec.createDecoder(),
      stopTokenIds: new Set([...sampling.stopTokenIds, ...(sampling.ignoreEos ? [] : this.options.codec.eosTokenIds)]),
      sink,
      signal,
      firstTokenMs: undefined,
      lastTokenMs: undefined,
      onFinish,
      finished: false,
      promptBlockHashes: [],
      constraint,
      stateId: cache.stateId,
      endTurn: capped && !sampling.ignoreEos ? this.endTurnId : undefined,
    };
    this.jobs.set(seq.seqId, job);
    this.counters.requests++;
    signal?.addEventListener("abort", () => this.finish(job, "cancelled"), { once: true });
    void this.loop();
  }

  private async loop(): Promise<void> {
    if (this.looping) return;
    this.looping = true;
    try {
      while (this.scheduler.hasWork) {
        const plan = this.scheduler.schedule();
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
        const steps: StepSequence[] = plan.items.map((item) => {
          const job = this.jobs.get(item.seq.seqId);
          return {
            tokenIds: item.seq.tokenIds.slice(item.startPos, item.startPos + item.numTokens),
            startPos: item.startPos,
            blockTable: this.kv.blockTable(item.seq.seqId),
            logits: !item.samples ? "none" : job?.sampler.greedy && job.logprobs === undefined && !job.constraint ? "argmax" : "last",
          };
        });
        const t0 = performance.now();
        const cpu0 = this.options.onStep ? process.cpuUsage() : undefined;
        const { logits, argmax } = await this.options.executor.run(steps);
        const wallMs = performance.now() - t0;
        const stepTokens = steps.reduce((a, s) => a + s.tokenIds.length, 0);
        this.counters.steps++;
        this.counters.stepTokens += stepTokens;
        this.counters.stepMs += wallMs;
        this.kvPuller?.cost.notePrefill(stepTokens, wallMs);
        if (cpu0) {
          const cpu = process.cpuUsage(cpu0);
          this.options.onStep!(stepRecord(steps, { at: Date.now(), wallMs, cpuMs: (cpu.user + cpu.system) / 1000 }));
        }

        for (const [i, item] of plan.items.entries()) {
          const job = this.jobs.get(item.seq.seqId);
          if (!job || job.finished) continue;
          this.kv.markComputed(item.seq.seqId, item.numTokens);
          if (!item.samples) continue;
          // Demo agent mode: the reply's last token ends the turn, where the grammar (if any) allows it.
          if (job.endTurn !== undefined && item.seq.maxTokens - item.seq.numGenerated === 1 && (job.constraint?.takeEnd(job.endTurn) ?? true)) {
            this.accept(job, job.endTurn, this.logprobOf(job, logits[i], job.endTurn));
            continue;
          }
          if (job.constraint) {
            await this.acceptConstrained(job, job.constraint, logits[i]!, argmax[i]!);
            continue;
          }
          const tokenId = job.sampler.greedy ? argmax[i]! : job.sampler.sample(logits[i]!);
          this.accept(job, tokenId, this.logprobOf(job, logits[i], tokenId));
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

  private logprobOf(job: Job, row: Float32Array | undefined, tokenId: number): TokenLogprob | undefined {
    return job.logprobs === undefined ? undefined : tokenLogprob(row!, tokenId, job.logprobs, (id) => this.options.codec.tokenPiece(id));
  }

  /** A constrained job's token: the grammar masks (a copy of) the row, logprobs stay those of the model's raw row. */
  private async acceptConstrained(job: Job, constraint: ConstrainedReply, row: Float32Array, rowArgmax: number): Promise<void> {
    const masked = job.logprobs === undefined ? row : row.slice();
    let pickMs = 0;
    const pick = (r: Float32Array) => {
      const t0 = performance.now();
      const id = job.sampler.greedy ? argmaxOf(r) : job.sampler.sample(r);
      pickMs += performance.now() - t0;
      return id;
    };
    const t0 = performance.now();
    const { tokenId, end } = await constraint.next(masked, pick, job.seq.maxTokens - job.seq.numGenerated, job.sampler.greedy ? rowArgmax : undefined);
    this.counters.grammarMs += performance.now() - t0 - pickMs;
    if (job.finished) return; // cancelled while the mask was computed
    if (tokenId !== null) this.accept(job, tokenId, this.logprobOf(job, row, tokenId), end);
    if (end) this.finish(job, "stop");
  }

  /** `complete`: the constraint's structure ends with this token (the caller finishes the job with "stop"). */
  private accept(job: Job, tokenId: number, logprob: TokenLogprob | undefined, complete = false): void {
    const seq = job.seq;
    const now = performance.now();
    job.firstTokenMs ??= now;
    job.lastTokenMs = now;
    seq.tokenIds.push(tokenId); // the KV manager reads the sequence's own tokens
    this.counters.generatedTokens++;

    if (job.stopTokenIds.has(tokenId)) return this.finish(job, "stop");
    const { emit, stopped } = job.stops.push(job.decoder.push(tokenId));
    job.sink(logprob ? { type: "token", tokenIds: [tokenId], text: emit, logprobs: [logprob] } : { type: "token", tokenIds: [tokenId], text: emit });
    if (stopped) return this.finish(job, "stop_sequence");
    if (seq.numGenerated >= seq.maxTokens && !complete) return this.finish(job, "length");
  }

  private finish(job: Job, reason: FinishReason): void {
    if (job.finished) return;
    job.finished = true;
    job.constraint?.dispose();
    if (reason !== "cancelled" && this.kv.has(job.seq.seqId)) {
      // Hashes of the prompt's computed full blocks, before the sequence and its memo are freed.
      const full = Math.min(Math.floor(job.seq.numPromptTokens / this.kv.blockSize), MAX_PROMPT_BLOCK_HASHES);
      job.promptBlockHashes = this.kv.blockHashes(job.seq.seqId).slice(0, full).map(shortBlockHash);
    }
    if (reason !== "stop_sequence" && reason !== "cancelled") {
      // Bytes that never formed a whole character come out here, then any held-back text.
      const rest = job.stops.push(job.decoder.flush()).emit + job.stops.flush();
      if (rest) job.sink({ type: "token", tokenIds: [], text: rest });
    }
    // The turn state keeps the partial last block (a stop sequence's state drops the generated tokens: nothing to keep).
    if (reason !== "cancelled" && reason !== "stop_sequence") job.seq.keepTailAs = job.stateId;
    this.scheduler.finish(job.seq);
    this.jobs.delete(job.seq.seqId);
    this.counters.promptTokens += job.seq.numPromptTokens;
    this.counters.cachedTokens += job.seq.numCachedTokens;
    this.counters.computedTokens += job.seq.numPrefilledTokens;
    job.onFinish(reason, job);
  }

  private fail(job: Job, err: ProtocolError): void {
    if (job.finished) return;
    job.finished = true;
    job.constraint?.dispose();
    this.scheduler.finish(job.seq);
    this.jobs.delete(job.seq.seqId);
    job.sink({ type: "error", code: err.code, message: err.message, retryable: err.retryable });
  }

}
