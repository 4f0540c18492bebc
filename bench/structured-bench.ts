import type { DoneFrame, Frame, GenerateRequest, ReplyConstraint, ToolDefinition } from "../protocol/messages";
import { createEngine } from "../gpu-backend/engine/create-engine";
import { loadModel } from "../gpu-backend/engine/load-model";
import { defaultPrecision, precisionRefusal, quantBits, quantizedWeightsFor, type WeightPrecision } from "../gpu-backend/engine/weight-precision";
import { BlockPool } from "../gpu-backend/kv/block-pool";
import { CpuExecutor } from "../gpu-backend/model/executors/cpu-executor";
import { prefillWastePerToken } from "../gpu-backend/model/graph/decoder-spec";
import { ConstrainedReply } from "../gpu-backend/constraint/constrained-reply";
import { GrammarCache } from "../gpu-backend/constraint/grammar-cache";
import { replyPlan } from "../gpu-backend/constraint/reply-grammar";
import { AIRLINE_TOOLS } from "../test/support/airline-tools";
import { note, Progress } from "./progress";
import { round } from "./round";

export interface StructuredBenchOptions {
  quick: boolean;
  json: boolean;
  model?: string;
  /** Weight precision (default: the cpu default). */
  weights?: WeightPrecision;
}

/** The constraints measured against the unconstrained baseline (same prompt, same tools). */
const MODES = {
  unconstrained: undefined,
  required: { type: "tool_calls", choice: "required", parallel: false },
  auto: { type: "tool_calls", choice: "auto", parallel: true },
} satisfies Record<string, ReplyConstraint | undefined>;
type Mode = keyof typeof MODES;

const TOOLS = AIRLINE_TOOLS as ToolDefinition[];
const SYSTEM = { role: "system" as const, content: "You are an airline customer service agent. Use the tools to look up, book, change and cancel reservations. Always call a tool." };
const USER = { role: "user" as const, content: "I need to move my reservation ABC123 to the Friday flight from Paris to Lisbon and add a checked bag." };

/**
 * `npm run bench -- structured [--quick] [--json] [--model DIR|FAMILY] [--weights P]`
 *
 * Structured outputs' cost on the serving path, in one process on one executor:
 * - decode tokens/s of `tool_choice: "required"` (and `"auto"`) over the 14 airline tools against
 *   the same requests unconstrained, at batch 1 and 8, each mode generating as many tokens per
 *   seed as the constrained reply did (median of the rounds);
 * - the share of the constrained runs' wall time spent in the grammar (EngineCounters.grammarMs:
 *   masks, matcher, budget checks, the greedy masked argmax; the executor and sampling excluded),
 *   and each run's ms per engine step split into executor + grammar + the rest;
 * - grammar compile time for the 14 tools, cold (a new compiler) and cached (the LRU's hit), and
 *   what a request pays on a cached grammar (`ConstrainedReply.start`: matcher, first completion,
 *   first mask).
 * With `--json` the last stdout line has batch1Overhead, batch8Overhead (fractions: 0.07 = 7%
 * slower), compileColdMs, compileCachedMs.
 */
export async function runStructuredBench(o: StructuredBenchOptions): Promise<Record<string, unknown>> {
  const model = await loadModel({ dir: o.model, log: (line) => note("structured", line) });
  const { spec, codec } = model;
  const precision = o.weights ?? defaultPrecision("cpu");
  const refusal = precisionRefusal("cpu", precision);
  if (refusal) throw new Error(refusal);
  const bits = quantBits(precision);
  const cache = bits ? quantizedWeightsFor(model.checkpoint, bits, (line) => note("structured", line)) : null;
  const blockSize = 16;
  const numBlocks = 1024;
  note("structured", `building the executor (${precision} weights, vocabulary ${spec.vocabSize})`);
  const executor = await CpuExecutor.create({ spec, weights: model.weights, quantized: cache?.weights ?? null, numBlocks, blockSize });
  cache?.save();
  const engine = createEngine({
    executor,
    pool: new BlockPool({ numBlocks, blockSize }),
    codec,
    modelId: spec.modelId,
    scheduler: { maxBatchTokens: 512, maxRunningSequences: 64, blockSize, prefillWastePerToken: prefillWastePerToken(spec) },
    enablePrefixCache: true,
    backendId: "bench",
  });

  // Compile: the grammar for 14 tools, cold (a fresh compiler each time) and cached.
  const plan = replyPlan(MODES.required, TOOLS, codec.toolCallConvention);
  if (!plan.grammar) throw new Error(`this model's template (${codec.toolCallConvention}) has no constrained tool calls`);
  const ms = async (f: () => Promise<unknown>) => {
    const t0 = performance.now();
    await f();
    return performance.now() - t0;
  };
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  let tokenizerInfoMs = Infinity;
  const colds: number[] = [];
  let grammars: GrammarCache | undefined;
  for (let i = 0; i < (o.quick ? 2 : 3); i++) {
    let fresh: GrammarCache | undefined;
    tokenizerInfoMs = Math.min(tokenizerInfoMs, await ms(async () => (fresh = await GrammarCache.create(codec, spec.vocabSize))));
    colds.push(await ms(() => fresh!.compile(plan.grammar!)));
    grammars = fresh;
    note("structured", `compile 14 tools cold: ${colds.at(-1)!.toFixed(0)} ms (TokenizerInfo ${tokenizerInfoMs.toFixed(0)} ms)`);
  }
  const cached: number[] = [];
  const starts: number[] = [];
  for (let i = 0; i < 20; i++) {
    cached.push(await ms(() => grammars!.compile(plan.grammar!)));
    starts.push(await ms(async () => (await ConstrainedReply.start(grammars!, codec, plan, 256))?.dispose()));
  }

  // Decode: the same requests per mode, rounds interleaved so drift hits every mode alike.
  const maxTokens = o.quick ? 48 : 96;
  const rounds = o.quick ? 2 : 3;
  const modes = Object.keys(MODES) as Mode[];
  /** (batch, temperature): greedy is the headline (its unconstrained rows never leave the executor: only the argmax does); sampled rows cost a softmax over the vocabulary either way. */
  const runs = [[1, 0], [8, 0], [1, 1], [8, 1]] as const;
  const progress = new Progress("structured", rounds * runs.length * modes.length);
  const run = (mode: Mode, temperature: number, seed: number, tokens = maxTokens): Promise<DoneFrame> => {
    const constraint = MODES[mode];
    const req: GenerateRequest = {
      requestId: crypto.randomUUID(),
      mode: "full",
      // A request of its own per seed (greedy replies would otherwise be one reply eight times).
      messages: [SYSTEM, { ...USER, content: `${USER.content} (request ${seed})` }],
      tools: TOOLS,
      sampling: { maxTokens: tokens, temperature, topP: 1, topK: 0, seed, stop: [], stopTokenIds: [], ignoreEos: true },
      ...(constraint ? { constraint } : {}),
    };
    return new Promise((resolve, reject) =>
      engine.submit(req, (f: Frame) => (f.type === "done" ? resolve(f) : f.type === "error" ? reject(new Error(`${f.code}: ${f.message}`)) : undefined)),
    );
  };
  // The prompt's blocks are cached from here on, and each mode's grammar is compiled (the engine's
  // cache is its own): decode is what differs.
  for (const mode of modes) await run(mode, 0, 0);
  /** Per engine step of a run: its wall time, the executor's part (logits fetch included) and the grammar's. */
  type Sample = { tokPerS: number; tokens: number; grammarShare: number; stepMs: number; executorMs: number; grammarMs: number };
  const samples = new Map<string, Sample[]>();
  const measure = async (mode: Mode, temperature: number, batch: number, seed0: number, lengths: number[]) => {
    const { grammarMs: grammar0, stepMs: executor0, steps: steps0 } = engine.counters;
    const t0 = performance.now();
    const done = await Promise.all(lengths.map((n, b) => run(mode, temperature, seed0 + b, n)));
    const wallMs = performance.now() - t0;
    // Aggregate decode throughput: each reply's tokens after its first over its own decode time, summed.
    const tokPerS = done.reduce((a, d) => a + ((d.usage.completionTokens - 1) / d.timings.decodeMs) * 1000, 0);
    const key = `${mode}@${batch}@${temperature}`;
    const steps = engine.counters.steps - steps0;
    const grammarMs = engine.counters.grammarMs - grammar0;
    const tokens = done.reduce((a, d) => a + d.usage.completionTokens, 0) / batch;
    samples.set(key, [...(samples.get(key) ?? []), { tokPerS, tokens, grammarShare: grammarMs / wallMs, stepMs: wallMs / steps, executorMs: (engine.counters.stepMs - executor0) / steps, grammarMs: grammarMs / steps }]);
    progress.tick(`${mode} batch ${batch} temperature ${temperature}: ${tokPerS.toFixed(1)} tok/s`);
    return done.map((d) => d.usage.completionTokens);
  };
  for (let r = 0; r < rounds; r++)
    for (const [batch, temperature] of runs) {
      // A constrained reply ends when its structure does: the other modes then generate exactly as
      // many tokens per seed, so every mode decodes the same batch for the same number of steps.
      const seed0 = 1 + r * 100;
      const lengths = await measure("required", temperature, batch, seed0, Array.from({ length: batch }, () => maxTokens));
      for (const mode of modes.filter((m) => m !== "required")) await measure(mode, temperature, batch, seed0, lengths);
    }
  await executor.dispose();

  const at = (mode: Mode, batch: number, temperature: number) => {
    const s = samples.get(`${mode}@${batch}@${temperature}`)!;
    const med = (k: keyof Sample) => median(s.map((x) => x[k]));
    return { tokPerS: med("tokPerS"), tokensPerReply: med("tokens"), grammarShare: med("grammarShare"), stepMs: med("stepMs"), executorMs: med("executorMs"), grammarMs: med("grammarMs") };
  };
  const overhead = (mode: Mode, batch: number, temperature = 0) => 1 - at(mode, batch, temperature).tokPerS / at("unconstrained", batch, temperature).tokPerS;
  const decode = Object.fromEntries(
    runs.map(([b, t]) => [
      `batch${b}${t === 0 ? "Greedy" : "Sampled"}`,
      Object.fromEntries(
        modes.map((m) => {
          const x = at(m, b, t);
          return [m, { tokPerS: round(x.tokPerS, 1), tokensPerReply: round(x.tokensPerReply, 1), grammarShare: round(x.grammarShare, 4), stepMs: round(x.stepMs, 2), executorMs: round(x.executorMs, 2), grammarMs: round(x.grammarMs, 2) }];
        }),
      ),
    ]),
  );
  const summary = {
    model: spec.modelId,
    weights: precision,
    vocabSize: spec.vocabSize,
    convention: codec.toolCallConvention,
    tools: TOOLS.length,
    maxTokens,
    rounds,
    decode,
    batch1Overhead: round(overhead("required", 1), 4),
    batch8Overhead: round(overhead("required", 8), 4),
    autoBatch1Overhead: round(overhead("auto", 1), 4),
    autoBatch8Overhead: round(overhead("auto", 8), 4),
    sampledBatch1Overhead: round(overhead("required", 1, 1), 4),
    sampledBatch8Overhead: round(overhead("required", 8, 1), 4),
    grammarShareBatch8: round(at("required", 8, 0).grammarShare, 4),
    tokenizerInfoMs: round(tokenizerInfoMs, 0),
    compileColdMs: round(median(colds), 0),
    compileCachedMs: round(median(cached), 3),
    requestStartCachedMs: round(median(starts), 2),
  };
  if (!o.json) {
    console.log(`structured outputs: ${spec.modelId} (${precision}, vocabulary ${spec.vocabSize}, ${codec.toolCallConvention}), ${TOOLS.length} airline tools, up to ${maxTokens} tokens per reply, median of ${rounds} rounds`);
    console.log("batch | temperature | mode | decode tok/s | vs unconstrained | tokens/reply | grammar share of wall time | ms/step: executor + grammar + rest");
    for (const [b, t] of runs)
      for (const m of modes) {
        const x = at(m, b, t);
        const vs = m === "unconstrained" ? "-" : `${(overhead(m, b, t) * 100).toFixed(1)}% ${overhead(m, b, t) >= 0 ? "slower" : "faster"}`;
        const rest = x.stepMs - x.executorMs - x.grammarMs;
        console.log(`${b} | ${t} | ${m} | ${x.tokPerS.toFixed(1)} | ${vs} | ${x.tokensPerReply.toFixed(1)} | ${(x.grammarShare * 100).toFixed(2)}% | ${x.stepMs.toFixed(2)}: ${x.executorMs.toFixed(2)} + ${x.grammarMs.toFixed(2)} + ${rest.toFixed(2)}`);
      }
    console.log(`compile 14 tools: cold ${summary.compileColdMs} ms (TokenizerInfo once per model: ${summary.tokenizerInfoMs} ms), cached ${summary.compileCachedMs} ms; a request's start on a cached grammar ${summary.requestStartCachedMs} ms`);
  }
  return summary;
}
