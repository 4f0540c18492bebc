import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel } from "./load-model";
import { resolveModelSource } from "./model-source";
import { readGguf } from "../model/gguf/gguf-reader";
import { modelCacheDir } from "../model/checkpoint/demo-model";
import { TRAINED_MODELS, trainedModelPath } from "../model/checkpoint/trained-models";
import { filesOf, startHubStandIn, type HubStandIn } from "../model/hub/testing/hub-stand-in";
import { tinyModelDir } from "../model/testing/tiny-model";

const SMOLLM2 = TRAINED_MODELS.find((m) => m.name === "smollm2")!;
/** The real cache's trained model (before this file points AGENT_EDGE_CACHE_DIR elsewhere). */
const realSmollm2 = join(modelCacheDir(), SMOLLM2.file);

let root: string;
let hub: HubStandIn;
const saved = { cache: process.env.AGENT_EDGE_CACHE_DIR, endpoint: process.env.HF_ENDPOINT, token: process.env.HF_TOKEN };

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "agent-edge-model-source-"));
  const tiny = await tinyModelDir(root);
  hub = await startHubStandIn({ "org/tiny": { commit: "a".repeat(40), files: filesOf(tiny) } });
  process.env.AGENT_EDGE_CACHE_DIR = join(root, "cache");
  process.env.HF_ENDPOINT = hub.url;
  delete process.env.HF_TOKEN;
});
afterAll(async () => {
  for (const [k, v] of [["AGENT_EDGE_CACHE_DIR", saved.cache], ["HF_ENDPOINT", saved.endpoint], ["HF_TOKEN", saved.token]] as const) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
  await hub?.close();
  rmSync(root, { recursive: true, force: true });
});

describe("--model sources", () => {
  it("smollm2 is the trained test model in the cache; missing or the wrong size, the error names the fetch script", async () => {
    await expect(resolveModelSource("smollm2")).rejects.toThrow(/not in the model cache: run bash scripts\/fetch-test-models\.sh/);
    const path = join(root, "cache", "models", SMOLLM2.file);
    mkdirSync(join(path, ".."), { recursive: true });
    writeFileSync(path, "short");
    expect(() => trainedModelPath()).toThrow(/5 bytes, expected 98362432: run bash scripts\/fetch-test-models\.sh/);
    // A sparse file of the right size stands in for the 94 MiB GGUF (only the size is checked on load).
    closeSync(openSync(path, "w"));
    truncateSync(path, SMOLLM2.bytes);
    expect(await resolveModelSource("smollm2")).toBe(path);
  });

  it("the fetch script and trained-models.ts pin the same file, sha256 and size", () => {
    const script = readFileSync(join(import.meta.dirname, "../../scripts/fetch-test-models.sh"), "utf8");
    expect(script).toContain(`GGUF_SHA256="${SMOLLM2.sha256}"`);
    expect(script).toContain(`GGUF_BYTES=${SMOLLM2.bytes}`);
    expect(SMOLLM2.file).toBe(`smollm2/${/GGUF_NAME="([^"]+)"/.exec(script)![1]}`);
  });

  it("hf:ORG/NAME downloads from the hub and loads like the folder; a second load does not touch the network", async () => {
    const lines: string[] = [];
    const model = await loadModel({ dir: "hf:org/tiny", log: (l) => lines.push(l) });
    expect(lines.some((l) => l.startsWith("[hub] hf:org/tiny: commit aaaaaaaaaaaa"))).toBe(true);
    const direct = await loadModel({ dir: await tinyModelDir(root) });
    expect({ ...model.spec, modelId: "" }).toEqual({ ...direct.spec, modelId: "" });
    expect(model.codec.encode("Hello, hub")).toEqual(direct.codec.encode("Hello, hub"));
    const seen = hub.requests.length;
    await loadModel({ dir: "hf:org/tiny" });
    expect(hub.requests.length).toBe(seen);
  });

  // In CI, .ci/run fetches the file before the tests; elsewhere this runs once it is fetched.
  it.runIf(existsSync(realSmollm2) || process.env.CI)("the fetched SmolLM2 GGUF is the model docs/model-sources.md describes", () => {
    expect(existsSync(realSmollm2), `${realSmollm2} missing: run bash scripts/fetch-test-models.sh (.ci/run does)`).toBe(true);
    const g = readGguf(realSmollm2);
    const value = (k: string) => g.metadata[k]?.value;
    expect([value("general.architecture"), value("llama.vocab_size"), value("general.file_type"), value("llama.block_count"), g.tensors.length]).toEqual(["llama", 49152, 3, 30, 272]);
    expect(String(value("tokenizer.chat_template"))).toContain("<|im_start|>");
  });
});
