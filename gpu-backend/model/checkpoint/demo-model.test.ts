import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  countParameters,
  defaultDemoModelDir,
  demoModelConfig,
  DEMO_FORMAT_VERSION,
  generateWeights,
  materializeModel,
  materializeTinyModel,
  qwen3TokenizerDir,
  tinyDemoConfig,
} from "./demo-model";
import { parseModelConfig } from "./parse-model-config";
import { modelConfigToJson } from "./model-config-json";
import { bf16ToF32 } from "./safetensors";

const root = mkdtempSync(join(tmpdir(), "demo-model-test-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("demo model config", () => {
  it("is the documented ~100M-parameter Llama 3-style model with the Qwen3 vocabulary padded to 128", () => {
    const c = demoModelConfig();
    expect(c).toMatchObject({
      modelType: "llama",
      hiddenSize: 512,
      intermediateSize: 1536,
      numHiddenLayers: 8,
      numAttentionHeads: 8,
      numKeyValueHeads: 2,
      headDim: 64,
      rmsNormEps: 1e-6,
      ropeTheta: 500000,
      ropeScaling: { ropeType: "llama3", factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 8192 },
      maxPositionEmbeddings: 32768,
      vocabSize: 151680, // 151669 ids (151643 + 26 added tokens) rounded up to a multiple of 128
      tieWordEmbeddings: true,
      attentionBias: false,
      eosTokenIds: [151645, 151643],
      torchDtype: "bfloat16",
    });
    // embeddings 151680·512 + 8 layers · (q 512² + k,v 2·128·512 + o 512² + mlp 3·512·1536 + 2 norms of 512) + final norm 512
    expect(countParameters(c)).toBe(151680 * 512 + 8 * (2 * 512 * 512 + 2 * 128 * 512 + 3 * 512 * 1536 + 2 * 512) + 512);
    expect(countParameters(c)).toBe(101_786_112);
    expect(parseModelConfig(modelConfigToJson(c), "config.json")).toEqual(c);
  });

  it("lives under AGENT_EDGE_CACHE_DIR when it is set, else in the repository's .cache", () => {
    const saved = process.env.AGENT_EDGE_CACHE_DIR;
    try {
      process.env.AGENT_EDGE_CACHE_DIR = "/tmp/agent-edge-cache";
      expect(defaultDemoModelDir()).toBe("/tmp/agent-edge-cache/models/demo-llama-random");
      delete process.env.AGENT_EDGE_CACHE_DIR;
      expect(defaultDemoModelDir()).toBe(join(import.meta.dirname, "../../../.cache/models/demo-llama-random"));
    } finally {
      if (saved === undefined) delete process.env.AGENT_EDGE_CACHE_DIR;
      else process.env.AGENT_EDGE_CACHE_DIR = saved;
    }
  });

  it("finds the Qwen3 tokenizer files", () => {
    expect(existsSync(join(qwen3TokenizerDir(), "tokenizer.json"))).toBe(true);
    expect(existsSync(join(qwen3TokenizerDir(), "tokenizer_config.json"))).toBe(true);
  });
});

describe("generateWeights", () => {
  it("is deterministic per (seed, tensor name) and differs across seeds", () => {
    const a = generateWeights(tinyDemoConfig(), 7);
    const b = generateWeights(tinyDemoConfig(), 7);
    const c = generateWeights(tinyDemoConfig(), 8);
    const oneLayer = generateWeights({ ...tinyDemoConfig(), numHiddenLayers: 1 }, 7);
    const name = "model.layers.0.self_attn.q_proj.weight";
    expect(a[name]!.data).toEqual(b[name]!.data);
    expect(oneLayer[name]!.data).toEqual(a[name]!.data);
    expect(c[name]!.data).not.toEqual(a[name]!.data);
    expect(a["model.layers.0.self_attn.k_proj.weight"]!.data).not.toEqual(a["model.layers.1.self_attn.k_proj.weight"]!.data);
  });

  it("draws linear weights from N(0, 0.02²) and sets norm weights to 1", () => {
    const weights = generateWeights(tinyDemoConfig(), 3);
    const values = bf16ToF32(weights["model.embed_tokens.weight"]!.data);
    let sum = 0;
    let sumSq = 0;
    let within1Std = 0;
    for (const v of values) {
      sum += v;
      sumSq += v * v;
      if (Math.abs(v) <= 0.02) within1Std++;
    }
    const mean = sum / values.length;
    const std = Math.sqrt(sumSq / values.length - mean * mean);
    expect(Math.abs(mean)).toBeLessThan(1e-4);
    expect(std).toBeGreaterThan(0.0198);
    expect(std).toBeLessThan(0.0202);
    expect(within1Std / values.length).toBeCloseTo(0.6827, 2); // a normal, not a uniform (0.577)
    expect([...bf16ToF32(weights["model.layers.1.input_layernorm.weight"]!.data)].every((v) => v === 1)).toBe(true);
  });
});

describe("materializeModel", () => {
  it("writes a Hugging Face folder with an untrained-model README, atomically", async () => {
    const dir = await materializeTinyModel(join(root, "tiny"));
    expect(readdirSync(dir).sort()).toEqual([
      "README.md",
      "agent_edge.json",
      "config.json",
      "generation_config.json",
      "model.safetensors",
      "tokenizer.json",
      "tokenizer_config.json",
    ]);
    expect(readdirSync(root)).toEqual(["tiny"]); // no temporary folders left behind
    expect(JSON.parse(readFileSync(join(dir, "agent_edge.json"), "utf8"))).toEqual({
      model_id: "tiny-llama-random",
      seed: 1,
      untrained: true,
      format_version: DEMO_FORMAT_VERSION,
      tokenizer_sha256: createHash("sha256").update(readFileSync(join(dir, "tokenizer.json"))).update(readFileSync(join(dir, "tokenizer_config.json"))).digest("hex"),
    });
    expect(readFileSync(join(dir, "README.md"), "utf8")).toMatch(/UNTRAINED[\s\S]*meaningless/);
    expect(JSON.parse(readFileSync(join(dir, "generation_config.json"), "utf8")).eos_token_id).toEqual([151645, 151643]);
    expect(readFileSync(join(dir, "tokenizer.json")).equals(readFileSync(join(qwen3TokenizerDir(), "tokenizer.json")))).toBe(true);
  });

  it("skips a folder that already holds the same model, and replaces one with another seed", async () => {
    const lines: string[] = [];
    const dir = join(root, "idempotent");
    await materializeModel({ dir, config: tinyDemoConfig(), seed: 5, onProgress: (l) => lines.push(l) });
    expect(lines.some((l) => l.includes("generating"))).toBe(true);
    const weights = join(dir, "model.safetensors");
    const firstWrite = statSync(weights).mtimeMs;

    lines.length = 0;
    await materializeModel({ dir, config: tinyDemoConfig(), seed: 5, onProgress: (l) => lines.push(l) });
    expect(lines).toEqual([`idempotent: already at ${dir}`]);
    expect(statSync(weights).mtimeMs).toBe(firstWrite);

    const before = readFileSync(weights);
    await materializeModel({ dir, config: tinyDemoConfig(), seed: 6 });
    expect(JSON.parse(readFileSync(join(dir, "agent_edge.json"), "utf8")).seed).toBe(6);
    expect(readFileSync(weights).equals(before)).toBe(false);
    expect(readdirSync(root).filter((n) => n.startsWith("."))).toEqual([]);
  });

  it("rewrites a folder whose marker has another format version", async () => {
    const dir = join(root, "old-format");
    await materializeModel({ dir, config: tinyDemoConfig(), seed: 5 });
    writeFileSync(join(dir, "agent_edge.json"), JSON.stringify({ model_id: "old-format", seed: 5, untrained: true, format_version: 0 }));
    const lines: string[] = [];
    await materializeModel({ dir, config: tinyDemoConfig(), seed: 5, onProgress: (l) => lines.push(l) });
    expect(lines.some((l) => l.includes("generating"))).toBe(true);
    expect(JSON.parse(readFileSync(join(dir, "agent_edge.json"), "utf8")).format_version).toBe(DEMO_FORMAT_VERSION);
  });
});

describe("materializeModel and the tokenizer", () => {
  it("rewrites a folder whose tokenizer files changed (a new chat template reaches the model)", async () => {
    const tok = join(root, "tok-changed");
    mkdirSync(tok);
    for (const f of ["tokenizer.json", "tokenizer_config.json"]) writeFileSync(join(tok, f), readFileSync(join(qwen3TokenizerDir(), f)));
    const dir = join(root, "tok-model");
    await materializeModel({ dir, config: tinyDemoConfig(), seed: 1, tokenizerFrom: tok });
    const config = JSON.parse(readFileSync(join(tok, "tokenizer_config.json"), "utf8")) as Record<string, unknown>;
    writeFileSync(join(tok, "tokenizer_config.json"), JSON.stringify({ ...config, chat_template: "{{ messages[0].content }}" }));
    await materializeModel({ dir, config: tinyDemoConfig(), seed: 1, tokenizerFrom: tok });
    expect(JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")).chat_template).toBe("{{ messages[0].content }}");
  });
});
