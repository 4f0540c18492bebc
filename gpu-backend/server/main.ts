import { serve } from "@hono/node-server";
import { parseArgs } from "node:util";
import { createBackend } from "./backend";
import { createBackendApp } from "./app";
import { parseSize, positiveInt, withOptionalValue } from "./cli-args";
import { DEFAULT_DEMO_AGENT_TOKENS } from "../engine/demo-agent";
import { DEFAULT_MAX_DRAFT_TOKENS, MAX_DRAFT_TOKENS } from "../engine/speculation";
import { Drain } from "./drain";
import { DrainPush } from "./drain-push";
import { startHeartbeat } from "./heartbeat";
import { parsePrecision, type WeightPrecision } from "../engine/weight-precision";
import { DEFAULT_MAX_QUEUED_TOKENS } from "../scheduler/scheduler";
import { DEV_SECRET } from "../../protocol/messages";
import { DEMO_FAMILIES } from "../model/families/registry";

/** `npm run backend -- --help` prints this. */
const USAGE = `npm run backend -- [flags]: one backend process serving one model (npm start runs it together with the edge).

  --model DIR|FILE.gguf|DEMO  Hugging Face-style folder, a GGUF file (docs/models.md), or a demo family (${DEMO_FAMILIES.join(", ")})
                         materialized with seeded random weights (default: the embedded demo-llama-random),
                         or smollm2: the trained test model (SmolLM2-135M-Instruct Q4_1 GGUF, fetched by
                         bash scripts/fetch-test-models.sh), or hf:ORG/NAME[@REVISION][:FILE]: downloaded
                         from the Hugging Face hub into the model cache, then loaded (a whole model: config,
                         tokenizer, safetensors; with FILE that one file, e.g. a .gguf); env HF_TOKEN for
                         gated repos, HF_ENDPOINT for a mirror (docs/model-sources.md)
  --kv-memory SIZE       KV pool budget, e.g. 512MiB, 2GiB (default 1GiB)
  --block-size N         tokens per KV block (default 16)
  --max-batch-tokens N   token budget of one engine step (default 512)
  --max-queued-tokens N  bound on queued prompt tokens (waiting and prefilling, cached prefixes
                         excluded); past it a new turn gets 429 overloaded (default 16384)
  --no-prefix-cache      disable prefix reuse (the benchmark baseline)
  --port N               default 8080 (env PORT)
  --host H               default 127.0.0.1
  --secret S             shared secret (env AGENT_EDGE_SECRET; default "dev-secret" with a warning)
  --threads N            onnxruntime intra-op threads (default: all cores)
  --weights P            fp32 | fp16 (device-pool, host-pool) | int8 | int4 (bf16 is refused with the reason):
                         int8/int4 are blockwise (32) weight-only quantization, LM head and embeddings
                         included, cached next to the model (default int4 on cpu, fp16 on the GPU executors)
  --executor E           where the KV pool lives: cpu | device-pool (on the GPU) | host-pool (in host memory,
                         blocks uploaded per step) | auto (default: device-pool on a hardware WebGPU adapter,
                         then host-pool if onnxruntime's CUDA provider is installed and an NVIDIA device is
                         present, then cpu)
  --provider P           what runs the graph: node-webgpu (onnxruntime-node's WebGPU; device-pool's default)
                         | web-webgpu (onnxruntime-web on Dawn; device-pool) | node-cuda (host-pool's default)
                         | node-webgpu (host-pool)
  --id NAME              backend id reported to the edge (default backend-<port>)
  --register URL         heartbeat into the edge's pool at URL (e.g. https://edge.example.com)
  --advertise URL        the URL the edge reaches this backend at (default http://HOST:PORT)
  --kv-host-memory SIZE  a second KV tier in host memory, e.g. 4GiB: blocks evicted from the pool are
                         kept there by hash and copied back on a prefix hit (default 0: none)
  --kv-pull P            auto | always | never (default auto): whether a turn moved here from another
                         backend (kvSource) pulls the blocks it lacks from there; auto asks the cost
                         model (measured copy bandwidth vs prefill time), always skips it; never
                         also skips a drain's push of its trajectories' blocks to its peers
  --drain-grace MS       draining (SIGTERM or POST /v1/drain): exit after this long with no turn,
                         no block stream and no request (default 10000)
  --drain-timeout MS     draining: exit at the latest this long after it began (default 120000)
  --drain-push-ms MS     draining: push its trajectories' blocks to its peers (most recently used
                         first) for at most this long (default 30000)
  --demo-agent [N]       demo agent mode, for untrained (random-weight) models only: a turn with tools
                         whose last message is the user's is constrained to one tool call, every reply
                         is at most N tokens (default ${DEFAULT_DEMO_AGENT_TOKENS}) and a free-text reply ends there with
                         the end-of-turn token, sampling is greedy; so agent CLIs finish runs (default off)
  --speculative S        off | lookup | suffix (default lookup on the cpu executor, else off): speculative decoding, model-free drafts
                         verified in one step, outputs unchanged: lookup drafts what followed the
                         context's last tokens earlier in its own prompt and reply; suffix also drafts
                         from the tenant's recent replies
  --speculative-max N    most tokens drafted per sequence per step (default ${DEFAULT_MAX_DRAFT_TOKENS}, at most ${MAX_DRAFT_TOKENS})
  --step-trace DIR       append a JSON line per engine step to DIR/<id>.jsonl: what it computed and
                         its wall and CPU time (npm run bench -- step-costs DIR fits the costs)
  --help                 this text
`;
const { values } = parseArgs({
  args: withOptionalValue(process.argv.slice(2), "--demo-agent", String(DEFAULT_DEMO_AGENT_TOKENS)),
  options: {
    model: { type: "string" },
    "kv-memory": { type: "string", default: "1GiB" },
    "block-size": { type: "string", default: "16" },
    "max-batch-tokens": { type: "string", default: "512" },
    "max-queued-tokens": { type: "string", default: String(DEFAULT_MAX_QUEUED_TOKENS) },
    "no-prefix-cache": { type: "boolean", default: false },
    port: { type: "string", default: process.env.PORT ?? "8080" },
    host: { type: "string", default: "127.0.0.1" },
    secret: { type: "string", default: process.env.AGENT_EDGE_SECRET },
    threads: { type: "string" },
    weights: { type: "string" },
    executor: { type: "string", default: "auto" },
    provider: { type: "string" },
    id: { type: "string" },
    register: { type: "string" },
    advertise: { type: "string" },
    "step-trace": { type: "string" },
    speculative: { type: "string" },
    "speculative-max": { type: "string", default: String(DEFAULT_MAX_DRAFT_TOKENS) },
    "demo-agent": { type: "string" },
    "kv-pull": { type: "string", default: "auto" },
    "kv-host-memory": { type: "string", default: "0" },
    "drain-grace": { type: "string", default: "10000" },
    "drain-timeout": { type: "string", default: "120000" },
    "drain-push-ms": { type: "string", default: "30000" },
    help: { type: "boolean", default: false },
  },
  strict: true,
});
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}

const port = positiveInt(values.port!, "--port");
const secret = values.secret ?? DEV_SECRET;
if (!values.secret) console.warn(`[backend] no --secret / AGENT_EDGE_SECRET given: using "${DEV_SECRET}" (local development only)`);
const backendId = values.id ?? `backend-${port}`;

const backend = await createBackend({
  modelDir: values.model,
  kvMemoryBytes: parseSize(values["kv-memory"]!, "--kv-memory"),
  blockSize: positiveInt(values["block-size"]!, "--block-size"),
  maxBatchTokens: positiveInt(values["max-batch-tokens"]!, "--max-batch-tokens"),
  maxQueuedTokens: positiveInt(values["max-queued-tokens"]!, "--max-queued-tokens"),
  enablePrefixCache: !values["no-prefix-cache"],
  threads: values.threads ? positiveInt(values.threads, "--threads") : undefined,
  executor: oneOf("--executor", ["auto", "cpu", "device-pool", "host-pool"] as const, values.executor!),
  provider: values.provider === undefined ? undefined : oneOf("--provider", ["node-webgpu", "web-webgpu", "node-cuda", "node-cpu"] as const, values.provider),
  weights: values.weights ? weightsFlag(values.weights) : undefined,
  backendId,
  stepTraceDir: values["step-trace"],
  secret,
  kvPull: kvPullFlag(values["kv-pull"]!),
  hostTierBytes: values["kv-host-memory"] === "0" ? 0 : parseSize(values["kv-host-memory"]!, "--kv-host-memory"),
  demoAgent: values["demo-agent"] === undefined ? undefined : { replyTokens: positiveInt(values["demo-agent"], "--demo-agent") },
  speculative: { mode: values.speculative === undefined ? undefined : oneOf("--speculative", ["off", "lookup", "suffix"] as const, values.speculative), maxDraftTokens: positiveInt(values["speculative-max"]!, "--speculative-max", MAX_DRAFT_TOKENS) },
  log: (line) => console.log(`[backend] ${line}`),
});

const drain = new Drain();
const advertiseUrl = values.advertise ?? `http://${values.host}:${port}`;
// `--kv-pull never`: this backend moves no blocks, pulling or pushing.
const drainPush = values["kv-pull"] === "never" ? undefined : new DrainPush({ engine: backend.engine, selfUrl: advertiseUrl, secret, budgetMs: positiveInt(values["drain-push-ms"]!, "--drain-push-ms"), log: (line) => console.log(`[backend] ${backendId}: ${line}`) });
const app = createBackendApp({ engine: backend.engine, secret, backendId, drain, drainPush });
const server = serve({ fetch: app.fetch, port, hostname: values.host }, (info) => {
  const demo = backend.engine.options.demoAgent;
  console.log(`[backend] ${backendId} serving ${backend.engine.modelId} on http://${values.host}:${info.port}${demo ? ` (demo agent mode: ${demo.replyTokens} tokens a reply)` : ""}`);
});

const heartbeat = values.register
  ? startHeartbeat({
      edgeUrl: values.register,
      secret,
      backendId,
      advertiseUrl,
      engine: backend.engine,
      drain,
      onPeers: (peers) => drainPush?.offerPeers(peers),
      log: (line) => console.log(`[backend] ${line}`),
    })
  : undefined;

// The last beat says `leaving`, so the pool stops naming this backend (as a holder to pull from) now.
const shutdown = () => {
  server.close();
  void (heartbeat?.leave() ?? Promise.resolve())
    .then(() => backend.close())
    .then(() => process.exit(0));
};
// SIGINT stops at once; SIGTERM drains first (as POST /v1/drain does), then stops.
process.on("SIGINT", shutdown);
process.on("SIGTERM", () => {
  if (drain.start()) console.log(`[backend] ${backendId}: SIGTERM: draining`);
});
void drain
  .finished({
    graceMs: positiveInt(values["drain-grace"]!, "--drain-grace"),
    timeoutMs: positiveInt(values["drain-timeout"]!, "--drain-timeout"),
    busy: () => drainPush?.busy === true || backend.engine.numRunning + backend.engine.numWaiting + backend.engine.kvServer.activeStreams > 0,
  })
  .then((how) => {
    console.log(`[backend] ${backendId}: drained (${how === "idle" ? "idle" : "timeout reached"}); stopping`);
    shutdown();
  });

function weightsFlag(v: string): WeightPrecision {
  try {
    return parsePrecision(v);
  } catch (e) {
    console.error((e as Error).message);
    process.exit(2);
  }
}

function oneOf<T extends string>(flag: string, values: readonly T[], v: string): T {
  if ((values as readonly string[]).includes(v)) return v as T;
  console.error(`${flag} must be ${values.join(", ")}; got ${JSON.stringify(v)}`);
  process.exit(2);
}

function kvPullFlag(v: string): "auto" | "always" | "never" {
  if (v === "auto" || v === "always" || v === "never") return v;
  console.error(`--kv-pull must be auto, always or never, not ${JSON.stringify(v)}`);
  process.exit(2);
}
