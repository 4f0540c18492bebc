import { availableParallelism } from "node:os";
import { parseArgs } from "node:util";
import { resolveSecret, startStack, StackStartError, type Stack } from "./stack";
import { positiveInt } from "../gpu-backend/server/cli-args";
import { demoFamilyOf } from "../gpu-backend/model/checkpoint/demo-families";
import { DEFAULT_DEMO_AGENT_TOKENS } from "../gpu-backend/engine/demo-agent";
import { DEMO_FAMILIES } from "../gpu-backend/model/families/registry";

/** `npm start -- --help` prints this. */
const USAGE = `npm start -- [flags]: the whole local stack, i.e. local GPU backend(s) serving the embedded
demo model and the edge Worker (wrangler dev) wired to them. Ctrl-C stops everything.

  --backends N           local backends on consecutive ports from --backend-port (default 1)
  --backend-port N       port of the first backend (default 8080)
  --port N               port of the edge (default 8787)
  --model DIR|FILE.gguf|DEMO  backend model folder, a GGUF file, or a demo family (${DEMO_FAMILIES.join(", ")})
                         (default: the embedded demo-llama-random), or smollm2 (the trained test model,
                         bash scripts/fetch-test-models.sh), or hf:ORG/NAME[@REVISION][:FILE] (downloaded
                         from the Hugging Face hub into the model cache; HF_TOKEN, HF_ENDPOINT)
  --kv-memory SIZE       backend KV pool budget, e.g. 512MiB (default 1GiB)
  --weights P            backend weight precision: fp32, int8 or int4 (default int4 on cpu; see npm run backend -- --help)
  --no-prefix-cache      backends without prefix reuse (the benchmark baseline)
  --demo-agent N         backends in demo agent mode with N-token replies (default: on, N = 48,
                         for the untrained demo models, so agent CLIs complete their tool loops;
                         docs/engine.md); --no-demo-agent turns it off
  --no-devtools          wrangler dev without its devtools inspector, which costs ~40 ms of
                         CPU per streamed turn (for load tests; the benchmarks use it)
  --timeout SECONDS      how long start-up may take (default 300)
  --help                 this text

The edge-backend secret comes from env AGENT_EDGE_SECRET, else .dev.vars, else "dev-secret".
One backend alone: npm run backend -- --help.
`;

const values = parseCli();
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}

const backends = positiveInt(values.backends, "--backends");
// An untrained demo model never calls a tool nor ends a reply: demo agent mode, unless asked not to.
const untrained = values.model === undefined || demoFamilyOf(values.model) !== undefined;
const demoAgent = values["no-demo-agent"] ? undefined : values["demo-agent"] !== undefined ? String(positiveInt(values["demo-agent"], "--demo-agent")) : untrained ? String(DEFAULT_DEMO_AGENT_TOKENS) : undefined;
const { secret, source } = resolveSecret();
const controller = new AbortController();
let stack: Stack | undefined;
let signals = 0;
let firstSignalAt = 0;

const onSignal = (signal: NodeJS.Signals) => {
  // One Ctrl-C can arrive twice (from the terminal and relayed by npm and tsx): only a second
  // signal well after the first means "kill now".
  if (signals > 0 && Date.now() - firstSignalAt < 1000) return;
  signals += 1;
  if (signals === 1) {
    firstSignalAt = Date.now();
    console.log(`\n[start] ${signal}: stopping every part (again to kill at once)`);
    controller.abort();
  } else {
    console.log(`[start] ${signal} again: killing every part now`);
    // startStack's process "exit" hook SIGKILLs every process group it started.
    process.exit(130);
  }
};
process.on("SIGINT", onSignal);
process.on("SIGTERM", onSignal);

console.log(`[start] secret from ${source === "default" ? 'the default "dev-secret" (local only)' : source}`);
try {
  stack = await startStack({
    backends,
    backendPort: positiveInt(values["backend-port"], "--backend-port"),
    edgePort: positiveInt(values.port, "--port"),
    modelDir: values.model,
    kvMemory: values["kv-memory"],
    ...(values.weights !== undefined ? { weights: values.weights } : {}),
    noPrefixCache: values["no-prefix-cache"],
    ...(demoAgent !== undefined ? { backendArgs: ["--demo-agent", demoAgent] } : {}),
    // Local agents that name no session (Qwen Code) get delta turns too (docs/edge.md, Sessions).
    vars: { DERIVED_SESSIONS: "on" },
    devtools: !values["no-devtools"],
    // N backends on one machine: share the cores instead of each taking all of them.
    threads: backends > 1 ? Math.max(1, Math.floor(availableParallelism() / backends)) : undefined,
    secret,
    readyTimeoutMs: positiveInt(values.timeout, "--timeout") * 1000,
    signal: controller.signal,
  });
} catch (e) {
  if (e instanceof StackStartError && e.reason === "aborted") {
    console.log("[start] stopped before start-up finished");
    process.exit(signals > 0 ? 0 : 1);
  }
  console.error(`\n[start] FAILED: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
}

const modelId = await servedModelId(stack.backendUrls[0]!, secret);
console.log(`
Agent Edge is up: ${stack.edgeUrl}   (ready in ${stack.readySeconds.toFixed(1)} s)${demoAgent !== undefined ? `\n  demo agent mode: replies of at most ${demoAgent} tokens, a tool call on each user turn with tools (--no-demo-agent: off)` : ""}
  backends: ${stack.parts
    .filter((p) => p.kind === "backend")
    .map((p) => `${p.name} ${p.url}`)
    .join(", ")}

  curl ${stack.edgeUrl}/v1/chat/completions \\
    -H 'Authorization: Bearer sk-local-dev' \\
    -H 'x-trajectory-id: demo-1' \\
    -H 'Content-Type: application/json' \\
    -d '{"model":"${modelId}","messages":[{"role":"user","content":"Hello"}],"max_tokens":16}'

Ctrl-C stops everything.
`);

const aborted = new Promise<void>((resolve) => {
  if (controller.signal.aborted) resolve();
  controller.signal.addEventListener("abort", () => resolve(), { once: true });
});
const outcome = await Promise.race([stack.exited, aborted.then(() => undefined)]);
if (outcome) {
  const { part, exit } = outcome;
  const how = exit.signal ? `was killed by ${exit.signal}` : `exited with code ${exit.code}`;
  console.error(`[start] ${part.name} ${how}; stopping the rest`);
}
await stack.stop();
console.log("[start] stopped");
process.exit(outcome ? 1 : 0);

// ---------------------------------------------------------------------------------------------

/** The model id the backend serves (for the sample curl); the demo model's id if it cannot say. */
async function servedModelId(backendUrl: string, secret: string): Promise<string> {
  try {
    const res = await fetch(`${backendUrl}/v1/models`, { headers: { "x-agent-edge-secret": secret }, signal: AbortSignal.timeout(2000) });
    const body = (await res.json()) as { data?: { id?: unknown }[] };
    const id = body.data?.[0]?.id;
    if (typeof id === "string") return id;
  } catch {
    /* fall through */
  }
  return "demo-llama-random";
}

function parseCli() {
  try {
    return parseArgs({
      options: {
        backends: { type: "string", default: "1" },
        "backend-port": { type: "string", default: "8080" },
        port: { type: "string", default: "8787" },
        model: { type: "string" },
        "kv-memory": { type: "string" },
        weights: { type: "string" },
        "no-prefix-cache": { type: "boolean", default: false },
        "demo-agent": { type: "string" },
        "no-demo-agent": { type: "boolean", default: false },
        "no-devtools": { type: "boolean", default: false },
        timeout: { type: "string", default: "300" },
        help: { type: "boolean", default: false },
      },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (e) {
    console.error(`${(e as Error).message}\n\n${USAGE}`);
    process.exit(2);
  }
}

