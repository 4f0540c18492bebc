import { parseArgs } from "node:util";
import type { BenchPrecision } from "./llamacpp-bench";
import type { SoakKind } from "./soak-clients";
import { parsePrecision } from "../gpu-backend/engine/weight-precision";
import { DEMO_FAMILIES, type DemoFamily } from "../gpu-backend/model/checkpoint/demo-families";
import { parsePolicy, ROUTING_POLICIES, type RoutingPolicyName } from "../durable-objects/routing/routing-policy";

/**
 * `npm run bench -- <name> [flags]`
 *
 *   agent    synthetic agent trajectories, prefix cache on vs off, decode batch 1 vs 8, prefill tok/s
 *            flags: --quick, --json, --trajectories N, --turns N, --model DIR|FAMILY (llama, qwen3, qwen3_moe, gemma3, phi3),
 *            --weights fp32|int8|int4 (default int4, the cpu default), --out DIR
 *   accuracy int8 and int4 against fp32 per demo family's tiny checkpoint, each with its prefill rows
 *            on MatMulNBits and on the integer GEMM: mean KL over a 2,000-token corpus, greedy
 *            agreement over 4 x 128 tokens; flags: --json, --families a,b (default all), --model DIR|smollm2
 *            (that model instead of the families)
 *   llamacpp Agent Edge vs llama.cpp on the same weights per precision (ours fp32/fp16/int8/int4,
 *            llama.cpp F32/F16/Q8_0/Q4_0 GGUF from our writer): decode at 1k context, prefill of 2k,
 *            a 20-turn trajectory, 8 x 5 concurrent turns; ratios, bandwidth limit, plots;
 *            flags: --quick, --json, --weights a,b (default all four), --model DIR|FAMILY,
 *            --executor cpu|device-pool|host-pool (ours; default cpu), --provider node-webgpu|
 *            web-webgpu|node-cuda (default the executor's first), --llama-gpu cuda|vulkan (default its CPU
 *            build), --threads N, --bandwidth GB/s (default: measured copy bandwidth), --only ours|llamacpp,
 *            --out DIR
 *   edge     per-turn latency client -> Worker -> DO -> backend vs client -> backend, and bytes
 *            sent to the backend per delta turn vs the transcript; flags: --quick, --json, --turns N
 *   routing  N backends x M concurrent agent trajectories through the real stack, once per routing
 *            policy (affinity, round-robin, least-loaded, consistent-hash): hit rate vs ideal,
 *            tokens/s, TTFT p50/p99, max/mean backend load; flags: --backends N (4),
 *            --trajectories M (32), --turns T, --observation-tokens LO,HI, --policies a,b, --quick,
 *            --json, --model DIR, --out DIR, --step-trace DIR (backends trace every engine step),
 *            --kv-pull auto|always|never (the backends'; never: no KV transfer; a list, e.g.
 *            auto,never: the policies once per setting, default affinity,round-robin),
 *            --workload shared|distinct (4 system-prompt groups, or each trajectory its own);
 *            a table against the oracle (ideal placement) per setting and policy;
 *            --subagents: instead, F families (--trajectories F, 4) of a parent and 4 subagents
 *            placed with their parent vs as independent trajectories: the children's prompt
 *            tokens computed, as a ratio (bench/routing-subagents.ts); --policies a,b (default
 *            affinity) runs each case once per policy
 *   sessionless  M clients naming no session, sharing a system prompt, over N backends: the edge's
 *            cache-aware placement of stateless turns vs round-robin: hit rate, tokens computed,
 *            spread; flags: --backends N (4), --trajectories M (32), --turns T, --quick, --json, --model DIR
 *   rolling-restart  a rolling restart of N backends under M agent trajectories (each backend drained by
 *            SIGTERM, restarted on its port, one after another): cached / ideal prompt tokens and
 *            TTFT before, during and after, with drained blocks pushed and pulled vs recomputed;
 *            flags: --quick, --json, --backends N (4), --trajectories M (32), --turns T, --model DIR
 *   crash-recovery  wrangler dev restarted (SIGTERM) and the backend SIGKILLed and restarted under M
 *            concurrent trajectories: failed turns store nothing, retries succeed, stored transcripts
 *            equal the clients', replies equal the stateless oracle's, delta/full of the first turns
 *            after each restart; flags: --json, --trajectories M (16), --turns T (6, at least 6), --out DIR
 *   fuzz     seeded mutated and random msgpack requests against every backend route (real app and
 *            engine, tiny model, in process): 5xx, uncoded errors, answers without the secret;
 *            flags: --cases N (10000), --seed S (1), --json
 *   soak     N agent clients (64) for S seconds (300) over every API (chat with a trajectory id,
 *            trajectory URLs, Responses, Messages, stateless), streaming and not, with tool pauses,
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
 *   speculative  speculative decoding (issue 37) on the trained model: agent turns that copy from
 *            their prompt (tool call, file edit, JSON restatement) and free-text turns, batch 1 and 8,
 *            greedy: decode tokens/s off vs on (same engine, alternating), acceptance, tokens per
 *            step, outputs identical; and llama.cpp on the same GGUF without and with its input
 *            lookup; flags: --quick, --json, --model (default smollm2), --speculative MODE (the
 *            engine's, default its first), --weights P (ours; default the cpu default), --only ours|llamacpp, --threads N (both engines; default every core), --out DIR;
 *            then (ours) a tenant's recurring job whose next trajectory repeats its earlier replies:
 *            lookup vs suffix vs another tenant's suffix (`suffixOverLookup`); --turns cross-trajectory: that phase alone
 *   pool-scale  the real pool object (PoolDO) in workerd against N simulated backends (8, 32, 128,
 *            512, 1000; quick 8, 64) and M trace turns: placement p50/p99, heartbeat time, the
 *            placement rate it sustains before p99 doubles, index memory, hit rate against an exact
 *            oracle, no placement on a backend that stopped beating, per design (single: one object;
 *            sharded: cells of K backends, one object each); flags: --backends a,b, --trajectories M
 *            (2000; quick 200), --designs single,sharded (both), --cell-backends K (32),
 *            --live-per-backend L (open trajectories put in a sharded pool before its ramp: 100; quick 2),
 *            --down-after-ms MS (the pool's POOL_DOWN_AFTER_MS: 6000; quick 3000), --quick, --json
 *   tool-stream  streamed tool-call arguments through wrangler dev (chat, tool_choice required,
 *            temperature 0): when a call's name, first and last argument pieces and the finish chunk
 *            arrive; flags: --quick (6 requests; else 12), --turns N, --json, --model DIR|smollm2
 *   step-costs  fit where the engine steps' CPU went from a --step-trace folder: step-costs DIR [--json]
 *   executors  prefill/decode tokens/s and bytes per decode step of every executor here (cpu
 *            baseline, device-pool, host-pool; bytes up/down per step at a short and a long context);
 *            flags: --quick, --json, --model DIR
 *
 * accuracy, sessionless and step-costs are studies (bench/studies/): their figures are in
 * docs/benchmarks.md, rerun when what they measure gains a case (a model family, a routing policy,
 * a step trace). Retired studies (leases, trace, migration, structured) are named there with the
 * commit that has them.
 *
 * Progress goes to stderr; with --json the last stdout line is one JSON object.
 */
const [name, ...rest] = process.argv.slice(2);
const { values: v } = parseArgs({
  args: name === "llamacpp-child" || name === "step-costs" ? [] : rest, // these parse their own arguments (flags, a DIR)
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
    "observation-tokens": { type: "string" },
    "step-trace": { type: "string" },
    executor: { type: "string" },
    provider: { type: "string" },
    "llama-gpu": { type: "string" },
    threads: { type: "string" },
    bandwidth: { type: "string" },
    only: { type: "string" },
    families: { type: "string" },
    "kv-pull": { type: "string" },
    workload: { type: "string" },
    cases: { type: "string" },
    seed: { type: "string" },
    seconds: { type: "string" },
    kinds: { type: "string" },
    "worker-heap": { type: "boolean", default: false },
    subagents: { type: "boolean", default: false },
    "max-queued-tokens": { type: "string" },
    speculative: { type: "string" },
    designs: { type: "string" },
    "cell-backends": { type: "string" },
    "live-per-backend": { type: "string" },
    "down-after-ms": { type: "string" },
  },
  strict: true,
});
const quick = v.quick!;
const json = v.json!;
const outDir = v.out!;
const model = v.model;
const num = (flag: string | undefined) => (flag === undefined ? undefined : Number(flag));
const trajectories = num(v.trajectories);
const backends = num(v.backends);
const turns = num(v.turns);

/**
 * Each benchmark by name; what it answers is printed (indented, or one line with --json; `details`
 * only without). Each imports its module when it runs: a child process (`llamacpp-child`) or a
 * short benchmark does not load the others (wrangler, the stack kit): 4.6-5.1 -> 0.9-1.2 s to start here.
 */
const BENCHES: Record<string, () => Promise<unknown>> = {
  agent: async () => (await import("./agent-bench")).runAgentBench({ quick, json, trajectories, turns, model, weights: v.weights === undefined ? undefined : parsePrecision(v.weights), outDir }),
  accuracy: async () => (await import("./studies/accuracy-bench")).runAccuracyBench({ families: v.families?.split(",").map((f) => oneOf("--families", DEMO_FAMILIES, f) as DemoFamily), model: v.model }),
  llamacpp: async () => {
    const { runLlamaCppBench, BENCH_PRECISIONS } = await import("./llamacpp-bench");
    // The children it spawns run this entry point (a bundled bench spawns itself).
    (await import("./llamacpp-child")).useBenchEntry(process.argv[1]!);
    return runLlamaCppBench({
      quick,
      model,
      outDir,
      precisions: v.weights?.split(",").map((w) => oneOf("--weights", BENCH_PRECISIONS, w) as BenchPrecision),
      executor: v.executor === undefined ? undefined : oneOf("--executor", ["cpu", "device-pool", "host-pool"] as const, v.executor),
      provider: v.provider === undefined ? undefined : oneOf("--provider", ["node-cpu", "node-webgpu", "web-webgpu", "node-cuda"] as const, v.provider),
      llamaGpu: v["llama-gpu"] === undefined ? false : oneOf("--llama-gpu", ["cuda", "vulkan"] as const, v["llama-gpu"]),
      threads: num(v.threads),
      bandwidth: v.bandwidth ? { bytesPerS: Number(v.bandwidth) * 1e9, source: "given (--bandwidth)" } : undefined,
      only: v.only === undefined ? undefined : oneOf("--only", ["ours", "llamacpp"] as const, v.only),
    });
  },
  "llamacpp-child": async () => (await import("./llamacpp-child")).runLlamaCppChild(rest),
  edge: async () => (await import("./edge-bench")).runEdgeBench({ quick, turns, model }),
  routing: async () => {
    if (v.subagents) return (await import("./routing-subagents")).runSubagentBench({ quick, backends, families: trajectories, turns, model, outDir, policies: v.policies ? parsePolicies(v.policies) : undefined });
    const { runRoutingBench, ROUTING_WORKLOADS } = await import("./routing-bench");
    return runRoutingBench({
      quick,
      backends,
      trajectories,
      turns,
      observationTokens: v["observation-tokens"] ? parseRange(v["observation-tokens"]) : undefined,
      policies: v.policies ? parsePolicies(v.policies) : undefined,
      model,
      outDir,
      stepTraceDir: v["step-trace"],
      kvPull: v["kv-pull"]?.split(",").map((k) => oneOf("--kv-pull", ["auto", "always", "never"] as const, k.trim())),
      workload: v.workload === undefined ? undefined : oneOf("--workload", ROUTING_WORKLOADS, v.workload),
    });
  },
  sessionless: async () => (await import("./studies/sessionless-bench")).runSessionlessBench({ quick, backends, trajectories, turns, model }),
  "rolling-restart": async () => (await import("./rolling-restart-bench")).runRollingRestartBench({ quick, backends, trajectories, turns, model, outDir }),
  "crash-recovery": async () => (await import("./crash-recovery-bench")).runCrashRecoveryBench({ trajectories, turns, outDir }),
  fuzz: async () => (await import("./fuzz-bench")).runFuzzBench({ cases: num(v.cases), seed: num(v.seed) }),
  soak: async () => {
    const { SOAK_KINDS } = await import("./soak-clients");
    return (await import("./soak-bench")).runSoakBench({
      trajectories: trajectories ?? 64,
      seconds: num(v.seconds) ?? (quick ? 60 : 300),
      backends,
      workerHeap: v["worker-heap"]!,
      kinds: v.kinds?.split(",").map((k) => oneOf("--kinds", SOAK_KINDS, k) as SoakKind),
      model,
      outDir,
    });
  },
  "pool-scale": async () =>
    (await import("./pool-scale-bench")).runPoolScaleBench({
      quick,
      backends: v.backends?.split(",").map((b) => Number(b.trim())),
      trajectories,
      designs: v.designs?.split(",").map((d) => oneOf("--designs", ["single", "sharded"] as const, d.trim())),
      cellBackends: num(v["cell-backends"]),
      livePerBackend: num(v["live-per-backend"]),
      downAfterMs: num(v["down-after-ms"]),
    }),
  overload: async () => (await import("./overload-bench")).runOverloadBench({ quick, backends, seconds: num(v.seconds), maxQueuedTokens: num(v["max-queued-tokens"]), model, outDir }),
  executors: async () => (await import("./executor-bench")).runExecutorBench({ quick, model }),
  speculative: async () =>
    (await import("./speculative-bench")).runSpeculativeBench({
      quick,
      model,
      outDir,
      mode: v.speculative,
      weights: v.weights === undefined ? undefined : parsePrecision(v.weights),
      only: v.only === undefined ? undefined : oneOf("--only", ["ours", "llamacpp"] as const, v.only),
      threads: num(v.threads),
      turns: v.turns === undefined ? undefined : oneOf("--turns", ["all", "cross-trajectory"] as const, v.turns),
    }),
  "tool-stream": async () => (await import("./tool-stream-bench")).runToolStreamBench({ quick, turns, model }),
  "step-costs": async () => {
    try {
      return (await import("./studies/step-costs")).runStepCosts(rest);
    } catch (e) {
      // A missing or unreadable folder, or too few steps: say so, no stack trace.
      console.error(`step-costs: ${(e as Error).message}`);
      process.exit(2);
    }
  },
};

const bench = BENCHES[name ?? ""];
if (!bench) {
  console.error(`unknown benchmark ${JSON.stringify(name ?? "")}; available: ${Object.keys(BENCHES).filter((b) => b !== "llamacpp-child").sort().join(", ")}`);
  process.exit(2);
}
const result = await bench();
if (result !== undefined) {
  // A `{ summary, details }` answer prints its summary alone with --json.
  const r = result as { summary?: object; details?: object };
  const shown = r.summary && r.details ? (json ? r.summary : { ...r.summary, details: r.details }) : result;
  console.log(json || rest.includes("--json") ? JSON.stringify(shown) : JSON.stringify(shown, null, 2));
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

/** `value` if it is one of `allowed`, else an error naming the flag. */
function oneOf<T extends string>(flag: string, allowed: readonly T[], value: string): T {
  if ((allowed as readonly string[]).includes(value)) return value as T;
  throw new Error(`${flag} must be one of ${allowed.join(", ")}, got ${JSON.stringify(value)}`);
}
