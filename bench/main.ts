import { parseArgs } from "node:util";
import { runAccuracyBench } from "./accuracy-bench";
import { runAgentBench } from "./agent-bench";
import { runEdgeBench } from "./edge-bench";
import { runExecutorBench } from "./executor-bench";
import { runFuzzBench } from "./fuzz-bench";
import { runLeaseBench } from "./lease-bench";
import { BENCH_PRECISIONS, runLlamaCppBench, type BenchPrecision } from "./llamacpp-bench";
import { runLlamaCppChild, useBenchEntry } from "./llamacpp-child";
import { runMigrationBench } from "./migration-bench";
import { runOverloadBench } from "./overload-bench";
import { runRestartBench } from "./restart-bench";
import { runRestartsBench } from "./restarts-bench";
import { runRoutingBench } from "./routing-bench";
import { runSessionlessBench } from "./sessionless-bench";
import { runSoakBench } from "./soak-bench";
import { SOAK_KINDS, type SoakKind } from "./soak-clients";
import { runStepCosts } from "./step-costs";
import { runStructuredBench } from "./structured-bench";
import { runTraceBench } from "./trace-replay";
import { parsePrecision } from "../gpu-backend/engine/weight-precision";
import { DEMO_FAMILIES, type DemoFamily } from "../gpu-backend/model/checkpoint/demo-families";
import { parsePolicy, ROUTING_POLICIES, type RoutingPolicyName } from "../durable-objects/routing/routing-policy";

/**
 * `npm run bench -- <name> [flags]`
 *
 *   agent    synthetic agent trajectories, prefix cache on vs off, decode batch 1 vs 8, prefill tok/s
 *            flags: --quick, --json, --trajectories N, --turns N, --model DIR|FAMILY (llama, qwen3, qwen3_moe, gemma3, phi3),
 *            --weights fp32|int8|int4 (default int4, the cpu default), --out DIR
 *   accuracy int8 and int4 against fp32 per demo family's tiny checkpoint: mean KL over a 2,000-token
 *            corpus, greedy agreement over 4 x 128 tokens; flags: --json, --families a,b (default all)
 *   llamacpp Agent Edge vs llama.cpp on the same weights per precision (ours fp32/fp16/int8/int4,
 *            llama.cpp F32/F16/Q8_0/Q4_0 GGUF from our writer): decode at 1k context, prefill of 2k,
 *            a 20-turn trajectory, 8 x 5 concurrent turns; ratios, bandwidth limit, plots;
 *            flags: --quick, --json, --weights a,b (default all four), --model DIR|FAMILY,
 *            --device cpu|webgpu|cuda (ours; default cpu), --cuda-ep webgpu (cuda executor on
 *            onnxruntime-node's WebGPU provider), --llama-gpu cuda|vulkan (default its CPU
 *            build), --threads N, --bandwidth GB/s (default: measured copy bandwidth), --only ours|llamacpp,
 *            --out DIR
 *   edge     per-turn latency client -> Worker -> DO -> backend vs client -> backend, and bytes
 *            sent to the backend per delta turn vs the transcript; flags: --quick, --json, --turns N
 *   routing  N backends x M concurrent agent trajectories through the real stack, once per routing
 *            policy (affinity, round-robin, least-loaded, consistent-hash): hit rate vs ideal,
 *            tokens/s, TTFT p50/p99, max/mean backend load; flags: --backends N (4),
 *            --trajectories M (32), --turns T, --observation-tokens LO,HI, --policies a,b, --quick,
 *            --json, --model DIR, --out DIR, --step-trace DIR (backends trace every engine step),
 *            --kv-pull auto|always|never (the backends'; never: no KV transfer)
 *   sessionless  M clients naming no session, sharing a system prompt, over N backends: the edge's
 *            cache-aware placement of stateless turns vs round-robin: hit rate, tokens computed,
 *            spread; flags: --backends N (4), --trajectories M (32), --turns T, --quick, --json, --model DIR
 *   migration  trajectories of ~4k tokens moved from backend A to B: TTFT of the first turn after the
 *            move with B pulling A's blocks over HTTP vs recomputing them, bytes moved, pull GB/s;
 *            flags: --quick, --json, --trajectories N (16), --model DIR, --weights P
 *   restart  a rolling restart of N backends under M agent trajectories (each backend drained by
 *            SIGTERM, restarted on its port, one after another): cached / ideal prompt tokens and
 *            TTFT before, during and after, with drained blocks pushed and pulled vs recomputed;
 *            flags: --quick, --json, --backends N (4), --trajectories M (32), --turns T, --model DIR
 *   restarts wrangler dev restarted (SIGTERM) and the backend SIGKILLed and restarted under M
 *            concurrent trajectories: failed turns store nothing, retries succeed, stored transcripts
 *            equal the clients', replies equal the stateless oracle's, delta/full of the first turns
 *            after each restart; flags: --json, --trajectories M (16), --turns T (6, at least 6), --out DIR
 *   fuzz     seeded mutated and random msgpack requests against every backend route (real app and
 *            engine, tiny model, in process): 5xx, uncoded errors, answers without the secret;
 *            flags: --cases N (10000), --seed S (1), --json
 *   soak     N agent clients (64) for S seconds (300) over every API (chat with a trajectory id,
 *            session URLs, Responses, Messages, stateless), streaming and not, with tool pauses,
 *            through wrangler dev and 2 backends: errors, stored vs client counts, resident memory
 *            of the backends and workerd every 10 s and after a minute idle, what is left at the
 *            end, lease expiry;
 *            flags: --trajectories N, --seconds S, --backends N, --kinds a,b (chat, session,
 *            responses, messages, stateless; default all), --worker-heap (also the Worker's JS
 *            heap after a forced GC, through wrangler's inspector), --quick (60 s), --json, --model DIR
 *   overload more turns than N backends (2) can take, through wrangler dev: the sustainable rate
 *            (closed loop), then Poisson arrivals at 1x, 2x, 4x it: 429 share, p50/p99 TTFT, turns
 *            moved to another backend, most queued tokens; flags: --backends N, --seconds S (30),
 *            --max-queued-tokens N (the backends' bound), --quick, --json, --model DIR
 *   step-costs  fit where the engine steps' CPU went from a --step-trace folder: step-costs DIR
 *   executors  prefill/decode tokens/s and bytes per decode step of every executor here (cpu
 *            baseline, webgpu, cuda); flags: --quick, --json, --model DIR
 *   leases   M agent trajectories with heavy-tailed tool pauses on a pool holding ~1/3 of them:
 *            plain LRU vs tool-pause leases vs leases with pauses 3x longer than predicted;
 *            flags: --quick, --json, --trajectories M (24), --turns T, --model DIR|tiny, --lease-cap F
 *   structured  structured outputs' cost: decode tok/s with tool_choice required/auto over 14 airline
 *            tools vs unconstrained at batch 1 and 8, the grammar's share of wall time, grammar
 *            compile cold and cached; flags: --quick, --json, --model DIR|FAMILY, --weights P
 *   trace    replay a Mooncake trace through the block pool: trace FILE --capacity N --policy P
 *            [--json], or --sweep (every policy and capacity, plot)
 *
 * Progress goes to stderr; with --json the last stdout line is one JSON object.
 */
const [name, ...rest] = process.argv.slice(2);
useBenchEntry(process.argv[1]!);
const { values } = parseArgs({
  args: name === "trace" || name === "step-costs" || name === "llamacpp-child" ? [] : rest, // these parse their own arguments (a FILE or DIR, flags)
  options: {
    quick: { type: "boolean", default: false },
    json: { type: "boolean", default: false },
    trajectories: { type: "string" },
    backends: { type: "string" },
    policies: { type: "string" },
    turns: { type: "string" },
    model: { type: "string" },
    weights: { type: "string" },
    out: { type: "string", default: "bench/out" },
    "lease-cap": { type: "string" },
    "observation-tokens": { type: "string" },
    "step-trace": { type: "string" },
    device: { type: "string" },
    "llama-gpu": { type: "string" },
    threads: { type: "string" },
    bandwidth: { type: "string" },
    only: { type: "string" },
    families: { type: "string" },
    "cuda-ep": { type: "string" },
    "kv-pull": { type: "string" },
    cases: { type: "string" },
    seed: { type: "string" },
    seconds: { type: "string" },
    kinds: { type: "string" },
    "worker-heap": { type: "boolean", default: false },
    "max-queued-tokens": { type: "string" },
  },
  strict: true,
});

switch (name) {
  case "agent": {
    const summary = await runAgentBench({
      quick: values.quick!,
      json: values.json!,
      trajectories: values.trajectories ? Number(values.trajectories) : undefined,
      turns: values.turns ? Number(values.turns) : undefined,
      model: values.model,
      weights: values.weights ? parsePrecision(values.weights) : undefined,
      outDir: values.out!,
    });
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify(summary, null, 2));
    break;
  }
  case "llamacpp": {
    const precisions = values.weights ? values.weights.split(",").map(benchPrecision) : undefined;
    const llamaGpu = values["llama-gpu"];
    if (llamaGpu !== undefined && llamaGpu !== "cuda" && llamaGpu !== "vulkan") throw new Error(`--llama-gpu must be cuda or vulkan, got ${JSON.stringify(llamaGpu)}`);
    const device = values.device;
    if (device !== undefined && device !== "cpu" && device !== "webgpu" && device !== "cuda") throw new Error(`--device must be cpu, webgpu or cuda, got ${JSON.stringify(device)}`);
    const summary = await runLlamaCppBench({
      quick: values.quick!,
      model: values.model,
      outDir: values.out!,
      precisions,
      device,
      llamaGpu: llamaGpu ?? false,
      threads: values.threads ? Number(values.threads) : undefined,
      bandwidth: values.bandwidth ? { bytesPerS: Number(values.bandwidth) * 1e9, source: "given (--bandwidth)" } : undefined,
      cudaExecutionProvider: values["cuda-ep"] === undefined ? undefined : values["cuda-ep"] === "cuda" || values["cuda-ep"] === "webgpu" ? values["cuda-ep"] : badFlag("--cuda-ep", "cuda or webgpu", values["cuda-ep"]),
      only: values.only === undefined ? undefined : values.only === "ours" || values.only === "llamacpp" ? values.only : badFlag("--only", "ours or llamacpp", values.only),
    });
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify(summary, null, 2));
    break;
  }
  case "accuracy": {
    const families = values.families?.split(",").map((f) => (DEMO_FAMILIES as readonly string[]).includes(f) ? (f as DemoFamily) : badFlag("--families", DEMO_FAMILIES.join(", "), f));
    const figures = await runAccuracyBench({ families });
    console.log(values.json ? JSON.stringify(figures) : JSON.stringify(figures, null, 2));
    break;
  }
  case "llamacpp-child":
    await runLlamaCppChild(rest);
    break;
  case "edge": {
    const summary = await runEdgeBench({ quick: values.quick!, turns: values.turns ? Number(values.turns) : undefined, model: values.model });
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify(summary, null, 2));
    break;
  }
  case "routing": {
    const { summary, details } = await runRoutingBench({
      quick: values.quick!,
      backends: values.backends ? Number(values.backends) : undefined,
      trajectories: values.trajectories ? Number(values.trajectories) : undefined,
      turns: values.turns ? Number(values.turns) : undefined,
      observationTokens: values["observation-tokens"] ? parseRange(values["observation-tokens"]) : undefined,
      policies: values.policies ? parsePolicies(values.policies) : undefined,
      model: values.model,
      outDir: values.out!,
      stepTraceDir: values["step-trace"],
      kvPull: values["kv-pull"] === undefined ? undefined : values["kv-pull"] === "auto" || values["kv-pull"] === "always" || values["kv-pull"] === "never" ? values["kv-pull"] : badFlag("--kv-pull", "auto, always or never", values["kv-pull"]),
    });
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify({ ...summary, details }, null, 2));
    break;
  }
  case "sessionless": {
    const summary = await runSessionlessBench({
      quick: values.quick!,
      backends: values.backends ? Number(values.backends) : undefined,
      trajectories: values.trajectories ? Number(values.trajectories) : undefined,
      turns: values.turns ? Number(values.turns) : undefined,
      model: values.model,
    });
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify(summary, null, 2));
    break;
  }
  case "migration": {
    const summary = await runMigrationBench({
      quick: values.quick!,
      json: values.json!,
      trajectories: values.trajectories ? Number(values.trajectories) : undefined,
      model: values.model,
      weights: values.weights ? parsePrecision(values.weights) : undefined,
    });
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify(summary, null, 2));
    break;
  }
  case "restart": {
    const summary = await runRestartBench({
      quick: values.quick!,
      backends: values.backends ? Number(values.backends) : undefined,
      trajectories: values.trajectories ? Number(values.trajectories) : undefined,
      turns: values.turns ? Number(values.turns) : undefined,
      model: values.model,
      outDir: values.out!,
    });
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify(summary, null, 2));
    break;
  }
  case "restarts": {
    const summary = await runRestartsBench({ trajectories: values.trajectories ? Number(values.trajectories) : undefined, turns: values.turns ? Number(values.turns) : undefined, outDir: values.out! });
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify(summary, null, 2));
    break;
  }
  case "fuzz": {
    const summary = await runFuzzBench({ cases: values.cases ? Number(values.cases) : undefined, seed: values.seed ? Number(values.seed) : undefined });
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify(summary, null, 2));
    break;
  }
  case "soak": {
    const summary = await runSoakBench({
      trajectories: values.trajectories ? Number(values.trajectories) : 64,
      seconds: values.seconds ? Number(values.seconds) : values.quick ? 60 : 300,
      backends: values.backends ? Number(values.backends) : undefined,
      workerHeap: values["worker-heap"]!,
      kinds: values.kinds?.split(",").map((k) => ((SOAK_KINDS as readonly string[]).includes(k) ? (k as SoakKind) : badFlag("--kinds", SOAK_KINDS.join(", "), k))),
      model: values.model,
      outDir: values.out!,
    });
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify(summary, null, 2));
    break;
  }
  case "overload": {
    const summary = await runOverloadBench({
      quick: values.quick!,
      backends: values.backends ? Number(values.backends) : undefined,
      seconds: values.seconds ? Number(values.seconds) : undefined,
      maxQueuedTokens: values["max-queued-tokens"] ? Number(values["max-queued-tokens"]) : undefined,
      model: values.model,
      outDir: values.out!,
    });
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify(summary, null, 2));
    break;
  }
  case "step-costs": {
    let result: Record<string, unknown>;
    try {
      result = runStepCosts(rest);
    } catch (e) {
      // A missing or unreadable folder, or too few steps: say so, no stack trace.
      console.error(`step-costs: ${(e as Error).message}`);
      process.exit(2);
    }
    console.log(rest.includes("--json") ? JSON.stringify(result) : JSON.stringify(result, null, 2));
    break;
  }
  case "executors": {
    const summary = await runExecutorBench({ quick: values.quick!, model: values.model });
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify(summary, null, 2));
    break;
  }
  case "leases": {
    const { summary, details } = await runLeaseBench({
      quick: values.quick!,
      trajectories: values.trajectories ? Number(values.trajectories) : undefined,
      turns: values.turns ? Number(values.turns) : undefined,
      model: values.model,
      leaseCap: values["lease-cap"] ? Number(values["lease-cap"]) : undefined,
      outDir: values.out!,
    });
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify({ ...summary, details }, null, 2));
    break;
  }
  case "structured": {
    const summary = await runStructuredBench({ quick: values.quick!, json: values.json!, model: values.model, weights: values.weights ? parsePrecision(values.weights) : undefined });
    console.log(JSON.stringify(summary));
    break;
  }
  case "trace":
    await runTraceBench(rest);
    break;
  default:
    console.error(`unknown benchmark ${JSON.stringify(name ?? "")}; available: accuracy, agent, edge, executors, fuzz, leases, llamacpp, migration, overload, restart, restarts, routing, sessionless, soak, step-costs, structured, trace`);
    process.exit(2);
}

function parsePolicies(list: string): RoutingPolicyName[] {
  return list.split(",").map((name) => {
    const p = parsePolicy(name.trim());
    if (!p) throw new Error(`unknown policy ${JSON.stringify(name)}; available: ${ROUTING_POLICIES.join(", ")}`);
    return p;
  });
}

/** "LO,HI" as two non-negative integers, LO <= HI. */
function parseRange(text: string): [number, number] {
  const [lo, hi] = text.split(",").map((x) => Number(x.trim()));
  if (!Number.isInteger(lo) || !Number.isInteger(hi) || lo! < 0 || hi! < lo!) throw new Error(`expected LO,HI (integers, LO <= HI), got ${JSON.stringify(text)}`);
  return [lo!, hi!];
}

function benchPrecision(v: string): BenchPrecision {
  if ((BENCH_PRECISIONS as readonly string[]).includes(v)) return v as BenchPrecision;
  throw new Error(`--weights takes a comma list of ${BENCH_PRECISIONS.join(", ")}, got ${JSON.stringify(v)}`);
}

function badFlag(flag: string, want: string, got: string): never {
  throw new Error(`${flag} must be ${want}, got ${JSON.stringify(got)}`);
}
