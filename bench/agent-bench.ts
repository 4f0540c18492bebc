import type { GenerateRequest } from "../protocol/messages";
import { commonPrefixLength } from "../protocol/common-prefix";
import type { Engine } from "../gpu-backend/engine/engine";
import { blocksForBudget } from "../gpu-backend/kv/block-pool";
import { loadModel, type LoadedModel } from "../gpu-backend/engine/load-model";
import type { WeightPrecision } from "../gpu-backend/engine/weight-precision";
import { BLOCK_SIZE, benchEngine, benchExecutor, benchWeights, greedy, submitTurn } from "./kit/engine";
import { lineChart } from "./kit/plot";
import { Progress, note } from "./kit/progress";
import { mean, round, sum, table, writeOut } from "./kit/report";
import { makeWorkload, type WorkloadTrajectory } from "./kit/workload";

export interface AgentBenchOptions {
  quick: boolean;
  json: boolean;
  trajectories?: number;
  turns?: number;
  outDir: string;
  model?: string;
  /** Weight precision (default: the cpu default, `defaultPrecision("cpu")`). */
  weights?: WeightPrecision;
}

interface TurnRecord {
  trajectory: number;
  turn: number;
  promptTokens: number;
  cachedTokens: number;
  computedTokens: number;
  newTokens: number;
  completionTokens: number;
  ttftMs: number;
}

/**
 * `npm run bench -- agent [--quick] [--json] [--trajectories N] [--turns N] [--model DIR|FAMILY] [--weights P]`
 *
 * `--model` takes a model folder or a demo family (llama, qwen3, qwen3_moe, gemma3, phi3).
 *
 * Runs one synthetic agent workload twice on the same model and executor: with the prefix cache,
 * then without it (the `--no-prefix-cache` baseline), and measures batch-1 vs batch-8 decode.
 */
export async function runAgentBench(o: AgentBenchOptions): Promise<Record<string, unknown>> {
  const log = (line: string) => note("agent", line);
  const model = await loadModel({ dir: o.model, log });
  const { spec, codec } = model;
  const trajectories = o.trajectories ?? (o.quick ? 2 : 4);
  const asked = o.turns ?? (o.quick ? 20 : 24);
  const numBlocks = blocksForBudget({ budgetBytes: 1.5 * 2 ** 30, blockSize: BLOCK_SIZE, numLayers: spec.numLayers, numKvHeads: spec.numKvHeads, headDim: spec.headDim, bytesPerElement: 4 });
  const weights = benchWeights(model, o.weights, log);
  note("agent", `building the executor (${numBlocks} KV blocks, ${weights.precision} weights)`);
  const executor = await benchExecutor(model, weights, numBlocks);
  weights.save();
  const workload = fitToContext(
    makeWorkload({ trajectories, turns: asked, systemTokens: 2100, observationTokens: [100, 400], replyTokens: o.quick ? [16, 32] : [16, 64], seed: 7, countTokens: (t) => codec.encode(t).length }),
    model,
  );
  const turns = workload[0]!.turns.length;
  const makeEngine = (enablePrefixCache: boolean) => benchEngine(model, executor, { numBlocks, enablePrefixCache });

  const runs: Record<"cache" | "noCache", { records: TurnRecord[]; wallMs: number }> = {
    cache: await runWorkload(makeEngine(true), workload, "prefix cache on"),
    noCache: await runWorkload(makeEngine(false), workload, "prefix cache off"),
  };

  note("agent", "decode speed: batch 1 and batch 8");
  const decodeEngine = makeEngine(true);
  const base = codec.encode(codec.render({ messages: workload[0]!.turns[0]!.newMessages, tools: workload[0]!.tools, addGenerationPrompt: true }));
  const decodeRate = async (batch: number) => {
    const results = await Promise.all(Array.from({ length: batch }, (_, b) => decodeEngine.generateTokens({ tokenIds: [...base, ...codec.encode(` variant ${b} ${"x ".repeat(b)}`)], sampling: greedy(48) })));
    // Aggregate decode throughput: each sequence's tokens after its first over its own decode
    // time, summed over the sequences decoding together (prefill time is not decode time).
    return sum(results.map((r) => ((r.tokenIds.length - 1) / r.timings.decodeMs) * 1000));
  };
  await decodeRate(1); // warm the shared prefix
  const decode1 = await decodeRate(1);
  const decode8 = await decodeRate(8);
  // Prefill speed: the first turn's prompt (system prompt and tools) alone, no cache, best of 2.
  note("agent", `prefill speed: ${base.length} prompt tokens, no cache`);
  const prefillEngine = makeEngine(false);
  let prefillMs = Infinity;
  for (let i = 0; i < 2; i++) prefillMs = Math.min(prefillMs, (await prefillEngine.generateTokens({ tokenIds: base, sampling: greedy(1) })).timings.prefillMs);
  await executor.dispose();

  // Report: per turn, the means over trajectories.
  const at = (run: "cache" | "noCache", k: number, f: (r: TurnRecord) => number) => mean(runs[run].records.filter((r) => r.turn === k).map(f));
  const rows = Array.from({ length: turns }, (_, k) =>
    [k + 1, at("cache", k, (r) => r.promptTokens), at("cache", k, (r) => r.cachedTokens), at("cache", k, (r) => r.computedTokens), at("cache", k, (r) => r.ttftMs), at("noCache", k, (r) => r.cachedTokens), at("noCache", k, (r) => r.computedTokens), at("noCache", k, (r) => r.ttftMs)].map(Math.round),
  );
  const total = (f: (r: TurnRecord) => number) => sum(runs.cache.records.map(f));
  const lastOn = at("cache", turns - 1, (r) => r.ttftMs);
  const lastOff = at("noCache", turns - 1, (r) => r.ttftMs);
  const summary = {
    model: spec.modelId,
    weights: weights.precision,
    trajectories,
    turns,
    computedOverNew: round(total((r) => r.computedTokens) / total((r) => r.newTokens), 3),
    hitRate: round(total((r) => r.cachedTokens) / total((r) => r.promptTokens), 3),
    totalTimeSpeedup: round(runs.noCache.wallMs / runs.cache.wallMs, 2),
    ttftSpeedupLastTurn: round(lastOff / lastOn, 2),
    ttftLastTurnMs: { cache: Math.round(lastOn), noCache: Math.round(lastOff) },
    wallMs: { cache: Math.round(runs.cache.wallMs), noCache: Math.round(runs.noCache.wallMs) },
    decodeTokPerS: { batch1: round(decode1, 1), batch8: round(decode8, 1) },
    batchDecodeSpeedup: round(decode8 / decode1, 2),
    prefillTokPerS: round((base.length / prefillMs) * 1000, 1),
  };
  const series = (run: "cache" | "noCache", name: string, color: string) => ({ name, color, points: Array.from({ length: turns }, (_, k) => ({ x: k + 1, y: at(run, k, (r) => r.ttftMs) })) });
  const plot = writeOut(
    o.outDir,
    "agent-ttft.svg",
    lineChart({
      title: `Time to first token per turn (${spec.modelId}, ${trajectories} concurrent trajectories, CPU)`,
      xLabel: "turn",
      yLabel: "TTFT (ms, mean over trajectories)",
      logY: true,
      series: [series("cache", "prefix cache on", "#1f77b4"), series("noCache", "prefix cache off (--no-prefix-cache)", "#d62728")],
    }),
  );
  const head = ["turn", "prompt", "cached (on)", "computed (on)", "TTFT ms (on)", "cached (off)", "computed (off)", "TTFT ms (off)"];
  process.stderr.write(`\n${table(head, rows)}\n\n${JSON.stringify(summary, null, 2)}\nplot: ${plot}\n`);
  return summary;
}

async function runWorkload(engine: Engine, workload: WorkloadTrajectory[], label: string): Promise<{ records: TurnRecord[]; wallMs: number }> {
  const progress = new Progress("agent", sum(workload.map((t) => t.turns.length)));
  const records: TurnRecord[] = [];
  // Per record, in submission order: prompt ids and prompt + reply ids, for "strictly new tokens".
  const submitted: { record: TurnRecord; prompt: number[]; all: number[] }[] = [];
  const t0 = performance.now();
  await Promise.all(
    workload.map(async (traj, t) => {
      let stateId: string | undefined;
      for (let k = 0; k < traj.turns.length; k++) {
        const turn = traj.turns[k]!;
        const req: GenerateRequest = {
          requestId: `${traj.id}-${k}`,
          trajectoryId: traj.id,
          mode: k === 0 ? "full" : "delta",
          messages: turn.newMessages,
          tools: traj.tools,
          sampling: greedy(turn.maxTokens),
          ...(stateId ? { stateId } : {}),
        };
        const slot = submitted.length;
        submitted.push(undefined as never);
        const { done } = await submitTurn(engine, req);
        const state = engine.states.get(done.stateId)!;
        const { promptTokens, cachedTokens, computedTokens, completionTokens } = done.usage;
        const record: TurnRecord = { trajectory: t, turn: k, promptTokens, cachedTokens, computedTokens, newTokens: 0, completionTokens, ttftMs: done.timings.ttftMs };
        records.push(record);
        // What the turn computed: its prompt and every generated token but the last (sampled, never fed to the model).
        submitted[slot] = { record, prompt: state.promptTokenIds, all: [...state.promptTokenIds, ...state.generatedTokenIds.slice(0, -1)] };
        stateId = done.stateId;
        progress.tick(label);
      }
    }),
  );
  const wallMs = performance.now() - t0;
  // Strictly new tokens of a turn: its prompt minus the longest prefix it shares with what any
  // turn before it computed (its own previous turn and reply, or another trajectory's system
  // prompt). The previous reply's last token counts as new: no step ever computed its KV.
  submitted.forEach((cur, i) => {
    const lcp = submitted.slice(0, i).reduce((best, prev) => Math.max(best, commonPrefixLength(prev.all, cur.prompt)), 0);
    cur.record.newTokens = cur.prompt.length - lcp;
  });
  return { records, wallMs };
}

/**
 * The workload with each trajectory's turns cut where its prompt could outgrow the model's context
 * (SmolLM2's 8,192 tokens): a turn's prompt is bounded by the first turn's rendered prompt plus,
 * per later turn, its new messages, the previous reply's budget and 16 tokens of framing a message.
 */
function fitToContext(workload: WorkloadTrajectory[], model: LoadedModel): WorkloadTrajectory[] {
  const { codec, spec } = model;
  const fits = workload.map((t) => {
    let bound = codec.encode(codec.render({ messages: t.turns[0]!.newMessages, tools: t.tools, addGenerationPrompt: true })).length + t.turns[0]!.maxTokens;
    let fit = 1;
    for (let k = 1; k < t.turns.length; k++) {
      const turn = t.turns[k]!;
      bound += turn.maxTokens + turn.newMessages.reduce((n, m) => n + 16 + codec.encode(m.content ?? "").length, 0);
      if (bound > spec.maxPositions) break;
      fit = k + 1;
    }
    return fit;
  });
  // Every trajectory gets the same number of turns: the per-turn series compare like with like.
  const fit = Math.min(...fits);
  if (fit < workload[0]!.turns.length) note("agent", `${spec.modelId}: ${fit} of ${workload[0]!.turns.length} turns fit its context of ${spec.maxPositions} tokens`);
  return workload.map((t) => ({ ...t, turns: t.turns.slice(0, fit) }));
}
