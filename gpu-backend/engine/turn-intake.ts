import { randomUUID } from "node:crypto";
import { ProtocolError } from "../../protocol/errors";
import type { Frame, GenerateRequest, KvFetchRequest, KvPullReport, TokenizeRequest, TokenLogprob } from "../../protocol/messages";
import { ConstrainedReply } from "../constraint/constrained-reply";
import { constrainsCalls, replyPlan, type ReplyPlan } from "../constraint/reply-grammar";
import { Sequence } from "../scheduler/sequence";
import { ToolCallStream } from "../tokenizer/tool-call-stream";
import { demoConstraint, demoSampling, endOfTurnTokenId } from "./demo-agent";
import type { EngineParts, TokenRequest, TokenResult } from "./engine-options";
import type { JobParams, JobQueue, SequenceCache } from "./job";
import { buildPrompt, countPromptTokens } from "./prompt-builder";
import { replyBudget } from "./reply-budget";
import { Sampler } from "./sampler";
import { jobSpeculation } from "./speculation";
import { StopChecker } from "./stop-checker";
import { errorFrame, guarded } from "./turn-errors";
import { timingsOf, usageOf } from "./turn-figures";
import { endChatTurn } from "./turn-output";

/**
 * Turn intake, the engine's input side: a request becomes a sequence and its job (prompt, reply
 * budget, sampler, stop checks, constraint) and goes to the step loop, after the prompt's missing
 * blocks are pulled from another backend when the request names one (`kvSource`).
 *
 * @example
 * const intake = new TurnIntake(parts, engine); // engine: the step loop (a JobQueue)
 * intake.submit(request, (frame) => send(frame));
 */
export class TurnIntake {
  private nextSeqId = 1;
  /** The token demo agent mode ends a capped reply with (demo-agent.ts). */
  private readonly endTurnId: number | undefined;

  constructor(
    private readonly parts: EngineParts,
    private readonly queue: JobQueue,
  ) {
    this.endTurnId = parts.options.demoAgent ? endOfTurnTokenId(parts.options.codec) : undefined;
  }

  /** The model's context in tokens: prompt and reply together. */
  get contextTokens(): number {
    return this.parts.options.executor.spec.maxPositions;
  }

  /** A chat turn (`Engine.submit`): frames go to `sink`; never throws, bad input becomes an error frame. */
  submit(req: GenerateRequest, sink: (frame: Frame) => void, signal?: AbortSignal): void {
    try {
      const { parts } = this;
      this.checkModel(req.model);
      parts.leases.onTurn(req);
      const { demoAgent: demo, codec } = parts.options;
      const prompt = buildPrompt(req, codec, parts.states);
      const root = parts.rootFor(req.cacheSalt ?? "");
      const constraint = demo ? demoConstraint(req.constraint, prompt.tools, prompt.messages, constrainsCalls(codec.toolCallConvention)) : req.constraint;
      const plan = replyPlan(constraint, prompt.tools ?? [], codec.toolCallConvention);
      const budget = replyBudget(demo ? demoSampling(req.sampling) : req.sampling, prompt.tokenIds.length, this.contextTokens, demo?.replyTokens);
      const cache: SequenceCache = { root, resumeTail: prompt.base, stateId: randomUUID() };
      const turn = { req, prompt, root, cache, parseToolCalls: plan.parseToolCalls, sink };
      const reasoningOpen = prompt.promptText.trimEnd().endsWith("<think>");
      const reply = plan.parseToolCalls ? new ToolCallStream(codec.toolCallConvention, undefined, { reasoningOpen }) : undefined;
      const speculate = req.speculative === false ? undefined : { tenant: req.cacheSalt ?? "" };
      const job: JobParams = { tokenIds: prompt.tokenIds, budget, cache, sink, signal, ...(reply ? { reply } : {}), speculate, onFinish: (reason, j) => endChatTurn(parts, turn, reason, j) };
      const start = () => {
        if (!plan.grammar && plan.bannedTexts.length === 0) return this.start(job);
        void this.startConstrained(job, plan);
      };
      if (!req.kvSource || !parts.kvPuller) return start();
      // Blocks another backend holds are pulled first (or not: the report says why), then the turn runs.
      void parts.kvPuller.pull(req.kvSource, { tokenIds: prompt.tokenIds, root, cacheSalt: req.cacheSalt ?? "" }, { signal }).then((report) => {
        cache.kvPull = report;
        if (!signal?.aborted) guarded(sink, start);
      });
    } catch (e) {
      errorFrame(sink, e);
    }
  }

  /** Raw token ids (`Engine.generateTokens`): no template, no state. */
  generateTokens(req: TokenRequest, signal?: AbortSignal): Promise<TokenResult> {
    return new Promise((resolve, reject) => {
      const logprobs: TokenLogprob[] = [];
      const sink = (frame: Frame) => {
        if (frame.type === "error") reject(new ProtocolError(frame.code, frame.message));
        else if (frame.type === "token" && frame.logprobs) logprobs.push(...frame.logprobs);
      };
      try {
        const budget = replyBudget(req.sampling, req.tokenIds.length, this.contextTokens);
        const speculate = req.speculative === false ? undefined : { tenant: req.cacheSalt ?? "" };
        this.start({ tokenIds: req.tokenIds, budget, cache: { root: this.parts.rootFor(req.cacheSalt ?? "") }, sink, signal, speculate, onFinish: (reason, job) => {
          resolve({
            tokenIds: job.seq.tokenIds.slice(job.seq.numPromptTokens),
            ...(req.sampling.logprobs === undefined ? {} : { logprobs }),
            finishReason: reason,
            usage: usageOf(job.seq),
            timings: timingsOf(job.seq, job.firstTokenMs, job.lastTokenMs),
            ...(job.speculation ? { speculation: { drafted: job.speculation.drafted, accepted: job.speculation.accepted } } : {}),
          });
        } });
      } catch (e) {
        reject(e);
      }
    });
  }

  /** `POST /v1/kv/fetch` (`Engine.fetchBlocks`): pulls now, whatever the cost model says; throws when this backend pulls nothing. */
  fetchBlocks(req: KvFetchRequest): Promise<KvPullReport> {
    this.checkModel(req.model);
    const { kvPuller, rootFor } = this.parts;
    if (!kvPuller) throw new ProtocolError("invalid_request", "this backend takes no KV from others (--kv-pull never, no shared secret, or its executor has no block I/O)");
    return kvPuller.pull(req.source, { tokenIds: req.tokenIds, root: rootFor(req.cacheSalt ?? ""), cacheSalt: req.cacheSalt ?? "" }, { policy: "always", timeoutMs: 60_000 });
  }

  /** Prompt tokens of a full turn over the request's messages and tools, counted as `submit` builds them. */
  countPromptTokens(req: TokenizeRequest): number {
    this.checkModel(req.model);
    return countPromptTokens(req.messages, req.tools, this.parts.options.codec, req.thinking);
  }

  private checkModel(model: string | undefined): void {
    const { modelId } = this.parts.options;
    if (model && model !== modelId) throw new ProtocolError("unknown_model", `model ${JSON.stringify(model)} is not served here (this backend serves ${modelId})`);
  }

  /** Compiles the reply's grammar and checks its budget before the sequence is queued; errors become the error frame. */
  private async startConstrained(job: JobParams, plan: ReplyPlan): Promise<void> {
    let constraint: ConstrainedReply | null = null;
    try {
      const { sampling } = job.budget;
      constraint = await ConstrainedReply.start(await this.parts.grammars(), this.parts.options.codec, plan, sampling.maxTokens);
      this.start({ ...job, budget: plan.stopStrings ? job.budget : { ...job.budget, sampling: { ...sampling, stop: [] } }, constraint });
    } catch (e) {
      constraint?.dispose();
      errorFrame(job.sink, e);
    }
  }

  /** Makes the sequence and its job and queues them; throws on an empty prompt or past the queue bound. */
  private start({ tokenIds, budget: { sampling, capped }, cache, sink, signal, constraint = null, reply, speculate, onFinish }: JobParams): void {
    if (tokenIds.length === 0) throw new ProtocolError("invalid_request", "the prompt is empty");
    const { codec } = this.parts.options;
    this.queue.add({
      seq: new Sequence({ seqId: this.nextSeqId++, tokenIds: [...tokenIds], maxTokens: sampling.maxTokens, hashRoot: cache.root, resumeTail: cache.resumeTail }),
      sampler: new Sampler(sampling),
      logprobs: sampling.logprobs,
      stops: new StopChecker(sampling.stop),
      decoder: codec.createDecoder(),
      stopTokenIds: new Set([...sampling.stopTokenIds, ...(sampling.ignoreEos ? [] : codec.eosTokenIds)]),
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
      reply,
      speculation: speculate && this.parts.options.speculative ? jobSpeculation(this.parts.options.speculative, speculate.tenant) : undefined,
    });
  }
}
