/**
 * Where a cpu executor step's time goes (issue 39): onnxruntime's own profile of the decoder graph
 * the executor runs for each step an agent workload runs (a step with prefill rows: the graph
 * whose int8/int4 prefill rows take the integer GEMM; a decode step: the MatMulNBits graph), kernel
 * time summed by op type over the last of 4 runs.
 *
 *   AGENT_EDGE_CACHE_DIR=... npx tsx bench/probes/step-profile.ts [int8|int4|fp32] [model dir]
 *
 * Steps: a 512-token chunk of a fresh prompt; a turn's 300 new tokens after 1,000 and after 5,000
 * context tokens (the 20-turn trajectory's first and last turns); one sequence decoding at 1,000;
 * 8 sequences decoding at 2,000. Profiling adds its own cost per node: compare shares, not totals.
 * Attention is FusedMatMul (q k^T), MatMul (probabilities x v), Softmax and most of Add (the mask);
 * the linears are MatMulIntegerToFloat / QuantizeLinear (prefill rows) and MatMulNBits.
 */
import { readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { loadModel } from "../../gpu-backend/engine/load-model";
import { weightsAt } from "../../gpu-backend/engine/weight-precision";
import { buildLlamaGraph, GRAPH_IO } from "../../gpu-backend/model/graph/llama-graph";
import type { IntegerKernel } from "../../gpu-backend/model/graph/linear";
import { stepFeeds } from "../../gpu-backend/model/executors/cpu-step-feeds";
import { integerPrefillKernel } from "../../gpu-backend/model/executors/cpu-executor";
import type { StepSequence } from "../../gpu-backend/model/executors/executor";

const model = await loadModel({ dir: process.argv[3] || undefined });
const at = weightsAt(model.checkpoint, "cpu", (process.argv[2] ?? "int4") as never, () => {});
const spec = model.spec;
const BLOCK = 16;
const perSeq = 400;
const numBlocks = 8 * perSeq;
const graphs = new Map<IntegerKernel | undefined, Uint8Array>();
const graphFor = (integerPrefill: IntegerKernel | undefined) => graphs.get(integerPrefill) ?? graphs.set(integerPrefill, buildLlamaGraph(spec, model.weights, at.quantized, { integerPrefill })).get(integerPrefill)!;
const pool: Record<string, ort.Tensor> = {};
for (let l = 0; l < spec.numLayers; l++)
  for (const name of [GRAPH_IO.kvK(l), GRAPH_IO.kvV(l)]) pool[name] = new ort.Tensor("float32", new Float32Array(spec.numKvHeads * numBlocks * BLOCK * spec.headDim), [spec.numKvHeads, numBlocks * BLOCK, spec.headDim]);
const table = (s: number) => Array.from({ length: perSeq }, (_, i) => s * perSeq + i);
const chunk = (n: number, at: number): StepSequence[] => [{ tokenIds: Array.from({ length: n }, (_, j) => 100 + j), startPos: at, blockTable: table(0), logits: "last" }];
const cases: [string, StepSequence[]][] = [
  ["prefill 512 at 0", chunk(512, 0)],
  ["prefill 300 at 1000", chunk(300, 1000)],
  ["prefill 300 at 5000", chunk(300, 5000)],
  ["decode 1 at 1000", [{ tokenIds: [100], startPos: 1000, blockTable: table(0), logits: "argmax" }]],
  ["decode 8 x 1 at 2000", Array.from({ length: 8 }, (_, s) => ({ tokenIds: [100], startPos: 2000, blockTable: table(s), logits: "argmax" as const }))],
];

console.log(`${spec.modelId}, ${at.precision}: kernel ms by op type, last of 4 runs`);
for (const [name, sequences] of cases) {
  const prefix = join(tmpdir(), `step-profile-${process.pid}`);
  const feeds = stepFeeds(sequences, { blockSize: BLOCK, numKvHeads: spec.numKvHeads, window: null });
  const graph = graphFor(feeds.prefillRows > 0 ? integerPrefillKernel(at.quantized) : undefined); // the executor's choice

  const session = await ort.InferenceSession.create(graph, { executionProviders: ["cpu"], graphOptimizationLevel: "all", interOpNumThreads: 1, executionMode: "sequential", logSeverityLevel: 3, enableProfiling: true, profileFilePrefix: prefix });
  for (let i = 0; i < 4; i++) await session.run({ ...feeds.inputs, ...pool });
  session.endProfiling();
  await session.release();
  // onnxruntime-node returns no file name: the profile is <prefix>_<date>.json.
  const file = readdirSync(tmpdir()).map((f) => join(tmpdir(), f)).find((f) => f.startsWith(`${prefix}_`) && f.endsWith(".json"));
  if (!file) throw new Error(`no profile written under ${prefix}_*.json`);
  console.log(`${name}: ${summary(file)}`);
  rmSync(file, { force: true });
}

/** "total ms; op ms (share), ..." for the last model_run in an onnxruntime profile file. */
function summary(file: string): string {
  type Event = { cat?: string; name: string; ts: number; dur: number; args?: { op_name?: string } };
  const events = JSON.parse(readFileSync(file, "utf8")) as Event[];
  const run = events.filter((e) => e.cat === "Session" && e.name === "model_run").at(-1)!;
  const byOp = new Map<string, number>();
  for (const e of events) {
    if (e.cat !== "Node" || !e.name.endsWith("_kernel_time") || e.ts < run.ts || e.ts > run.ts + run.dur) continue;
    const op = e.args?.op_name ?? "?";
    byOp.set(op, (byOp.get(op) ?? 0) + e.dur);
  }
  const top = [...byOp].sort((a, b) => b[1] - a[1]).slice(0, 7);
  return `${(run.dur / 1000).toFixed(1)} ms; ` + top.map(([op, us]) => `${op} ${(us / 1000).toFixed(1)} (${((100 * us) / run.dur).toFixed(0)}%)`).join(", ");
}
