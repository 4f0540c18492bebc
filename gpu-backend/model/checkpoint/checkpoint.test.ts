import { cpSync, mkdtempSync, readFileSync, rmSync, truncateSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectedTensorShapes, loadCheckpoint, type Checkpoint } from "./checkpoint";
import { generateWeights, materializeTinyModel, tinyDemoConfig } from "./demo-model";
import { ModelLoadError } from "./model-load-error";
import { openSafetensors, writeSafetensors, type SafetensorsTensorToWrite } from "./safetensors";

const root = mkdtempSync(join(tmpdir(), "checkpoint-test-"));
let tinyDir: string;
let tiny: Checkpoint;
let caseNumber = 0;

beforeAll(async () => {
  tinyDir = await materializeTinyModel(join(root, "tiny"));
  tiny = await loadCheckpoint(tinyDir);
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A fresh copy of the tiny model folder to break. */
function copyOfTiny(): string {
  const dir = join(root, `case-${caseNumber++}`);
  cpSync(tinyDir, dir, { recursive: true });
  return dir;
}

function editJson(path: string, edit: (json: Record<string, unknown>) => void): void {
  const json = JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
  edit(json);
  writeFileSync(path, JSON.stringify(json));
}

/** Rewrites a safetensors header in place (tensor bytes untouched; offsets are relative to the data). */
function editHeader(path: string, edit: (header: Record<string, Record<string, unknown>>) => void): void {
  const bytes = readFileSync(path);
  const length = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + length).toString()) as Record<string, Record<string, unknown>>;
  edit(header);
  const json = Buffer.from(JSON.stringify(header));
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(json.length));
  writeFileSync(path, Buffer.concat([prefix, json, bytes.subarray(8 + length)]));
}

/** Every tensor of a checkpoint as BF16 words, to rewrite its weights. */
function tinyTensors(): Record<string, SafetensorsTensorToWrite> {
  return generateWeights(tinyDemoConfig(), 1);
}

async function loadError(dir: string): Promise<ModelLoadError> {
  try {
    await loadCheckpoint(dir);
  } catch (e) {
    expect(e).toBeInstanceOf(ModelLoadError);
    return e as ModelLoadError;
  }
  throw new Error("expected a ModelLoadError");
}

function sameValues(a: Float32Array, b: Float32Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** float32 of a bfloat16 word, computed from its bits without the library code. */
function bf16Value(word: number): number {
  const view = new DataView(new ArrayBuffer(4));
  view.setUint16(0, word, false);
  view.setUint16(2, 0, false);
  return view.getFloat32(0, false);
}

describe("loadCheckpoint: the tiny materialized model", () => {
  it("reads config, model id, tokenizer and chat template", () => {
    expect(tiny.dir).toBe(tinyDir);
    expect(tiny.modelId).toBe("tiny-llama-random");
    expect(tiny.config).toEqual(tinyDemoConfig());
    expect(tiny.tokenizer.vocabSize).toBe(151669);
    expect(tiny.tokenizer.eosTokenIds).toEqual([151645, 151643]);
    expect(tiny.chatTemplate).toContain("<tool_call>");
    expect(tiny.template.render({ messages: [{ role: "user", content: "hi" }], addGenerationPrompt: true })).toBe(
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    );
  });

  it("lists exactly the tensors the config implies, with their shapes", () => {
    const expected = expectedTensorShapes(tiny.config);
    expect([...tiny.tensorNames].sort()).toEqual([...expected.keys()].sort());
    expect(expected.has("lm_head.weight")).toBe(false); // tied
    expect(tiny.tensorInfo("model.layers.1.self_attn.k_proj.weight")).toMatchObject({ dtype: "BF16", shape: [32, 64] });
    expect(tiny.tensorInfo("model.embed_tokens.weight").shape).toEqual([151680, 64]);
  });

  it("returns every tensor as the exact values of its bfloat16 words", () => {
    const words = generateWeights(tinyDemoConfig(), 1);
    for (const name of tiny.tensorNames) {
      const { data, shape } = tiny.getTensor(name);
      const source = words[name]!;
      expect(shape).toEqual(source.shape);
      expect(data.length).toBe(source.data.length);
      const step = Math.max(1, Math.floor(data.length / 5000));
      for (let i = 0; i < data.length; i += step) {
        if (data[i] !== bf16Value(source.data[i]!)) throw new Error(`${name}[${i}]: ${data[i]} !== ${bf16Value(source.data[i]!)}`);
      }
    }
    expect([...tiny.getTensor("model.norm.weight").data].every((v) => v === 1)).toBe(true);
  });

  it("uses the folder name without agent_edge.json, and generation_config's eos ids", async () => {
    const dir = copyOfTiny();
    unlinkSync(join(dir, "agent_edge.json"));
    editJson(join(dir, "generation_config.json"), (j) => (j.eos_token_id = [151643, 151662]));
    const c = await loadCheckpoint(dir);
    expect(c.modelId).toBe(dir.split("/").pop());
    expect(c.tokenizer.eosTokenIds).toEqual([151643, 151662, 151645]);
  });

  it("picks the template named default from a list, or reads chat_template.jinja", async () => {
    const dir = copyOfTiny();
    editJson(join(dir, "tokenizer_config.json"), (j) => {
      j.chat_template = [
        { name: "tool_use", template: "tools" },
        { name: "default", template: "{{ messages[0].content }}!" },
      ];
    });
    expect((await loadCheckpoint(dir)).chatTemplate).toBe("{{ messages[0].content }}!");
    editJson(join(dir, "tokenizer_config.json"), (j) => delete j.chat_template);
    writeFileSync(join(dir, "chat_template.jinja"), "{{ messages[0].content }}?");
    expect((await loadCheckpoint(dir)).chatTemplate).toBe("{{ messages[0].content }}?");
  });
});

describe("loadCheckpoint: sharded weights", () => {
  it("reads tensors through model.safetensors.index.json from two shards", async () => {
    const dir = copyOfTiny();
    unlinkSync(join(dir, "model.safetensors"));
    const names = tiny.tensorNames;
    const half = Math.ceil(names.length / 2);
    const shardNames = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"];
    const weightMap: Record<string, string> = {};
    [names.slice(0, half), names.slice(half)].forEach((part, i) => {
      const tensors: Record<string, SafetensorsTensorToWrite> = {};
      // The first shard stores float32, the second bfloat16: both must read back identically.
      for (const name of part) {
        const { data, shape } = tiny.getTensor(name);
        tensors[name] = { dtype: i === 0 ? "F32" : "BF16", shape, data };
        weightMap[name] = shardNames[i]!;
      }
      writeSafetensors(join(dir, shardNames[i]!), tensors);
    });
    writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap }));

    const sharded = await loadCheckpoint(dir);
    expect([...sharded.tensorNames].sort()).toEqual([...names].sort());
    expect(sharded.tensorInfo(names[0]!).file).toBe(join(dir, shardNames[0]!));
    expect(sharded.tensorInfo(names.at(-1)!).file).toBe(join(dir, shardNames[1]!));
    for (const name of [names[0]!, names[half]!, names.at(-1)!, "model.embed_tokens.weight"]) {
      const got = sharded.getTensor(name);
      const want = tiny.getTensor(name);
      expect(got.shape).toEqual(want.shape);
      expect(sameValues(got.data, want.data)).toBe(true);
    }
  });

  it("names the shard and the index when they disagree", async () => {
    const dir = copyOfTiny();
    unlinkSync(join(dir, "model.safetensors"));
    writeSafetensors(join(dir, "a.safetensors"), { "model.norm.weight": { dtype: "F32", shape: [64], data: new Float32Array(64) } });
    const index = join(dir, "model.safetensors.index.json");
    writeFileSync(index, JSON.stringify({ weight_map: { "model.norm.weight": "a.safetensors", "model.embed_tokens.weight": "a.safetensors" } }));
    expect((await loadError(dir)).message).toBe(`${join(dir, "a.safetensors")}: has no tensor model.embed_tokens.weight (model.safetensors.index.json puts it here)`);
    writeFileSync(index, JSON.stringify({ weight_map: { "model.norm.weight": "b.safetensors" } }));
    expect((await loadError(dir)).message).toBe(`${join(dir, "b.safetensors")}: file not found`);
    writeFileSync(index, JSON.stringify({ weight_map: { "model.norm.weight": "a.safetensors" } }));
    expect((await loadError(dir)).message).toBe(`${index}: tensor model.embed_tokens.weight is missing (config.json implies it)`);
  });
});

describe("loadCheckpoint errors name the file", () => {
  it("a missing folder or config.json", async () => {
    const missing = join(root, "does-not-exist");
    expect((await loadError(missing)).message).toBe(`${join(missing, "config.json")}: file not found`);
    const dir = copyOfTiny();
    unlinkSync(join(dir, "config.json"));
    expect((await loadError(dir)).message).toBe(`${join(dir, "config.json")}: file not found`);
  });

  it("config.json that is not JSON", async () => {
    const dir = copyOfTiny();
    writeFileSync(join(dir, "config.json"), "{ hidden_size: 64 ");
    const e = await loadError(dir);
    expect(e.file).toBe(join(dir, "config.json"));
    expect(e.message).toMatch(/config\.json: invalid JSON/);
  });

  it("an unsupported rope type", async () => {
    const dir = copyOfTiny();
    editJson(join(dir, "config.json"), (j) => (j.rope_scaling = { rope_type: "yarn", factor: 4, original_max_position_embeddings: 4096 }));
    expect((await loadError(dir)).message).toBe(`${join(dir, "config.json")}: rope_scaling.rope_type "yarn" is not supported (supported: default, linear, llama3, longrope)`);
  });

  it("a tensor of the wrong shape", async () => {
    const dir = copyOfTiny();
    const tensors = tinyTensors();
    tensors["model.layers.1.mlp.up_proj.weight"]!.shape = [64, 128];
    writeSafetensors(join(dir, "model.safetensors"), tensors);
    expect((await loadError(dir)).message).toBe(
      `${join(dir, "model.safetensors")}: model.layers.1.mlp.up_proj.weight has shape [64, 128] but config.json implies [128, 64]`,
    );
  });

  it("a missing tensor, and lm_head when embeddings are not tied", async () => {
    const dir = copyOfTiny();
    const tensors = tinyTensors();
    delete tensors["model.layers.0.post_attention_layernorm.weight"];
    writeSafetensors(join(dir, "model.safetensors"), tensors);
    expect((await loadError(dir)).message).toBe(
      `${join(dir, "model.safetensors")}: tensor model.layers.0.post_attention_layernorm.weight is missing (config.json implies it)`,
    );
    const untied = copyOfTiny();
    editJson(join(untied, "config.json"), (j) => (j.tie_word_embeddings = false));
    expect((await loadError(untied)).message).toBe(`${join(untied, "model.safetensors")}: tensor lm_head.weight is missing (config.json implies it)`);
  });

  it("q/k/v biases required by attention_bias", async () => {
    const dir = copyOfTiny();
    editJson(join(dir, "config.json"), (j) => (j.attention_bias = true));
    expect((await loadError(dir)).message).toBe(`${join(dir, "model.safetensors")}: tensor model.layers.0.self_attn.q_proj.bias is missing (config.json implies it)`);
  });

  it("a truncated model.safetensors", async () => {
    const dir = copyOfTiny();
    const path = join(dir, "model.safetensors");
    truncateSync(path, readFileSync(path).length - 100);
    const e = await loadError(dir);
    expect(e.file).toBe(path);
    expect(e.message).toMatch(/model\.safetensors: tensor model\.norm\.weight: data_offsets \[\d+, \d+\] run past the end of the data \(\d+ bytes\): the file is truncated/);
  });

  it("an unknown dtype, and a known one that cannot be read", async () => {
    const dir = copyOfTiny();
    const path = join(dir, "model.safetensors");
    editHeader(path, (h) => (h["model.layers.0.mlp.gate_proj.weight"]!.dtype = "Q4_K"));
    expect((await loadError(dir)).message).toBe(`${path}: tensor model.layers.0.mlp.gate_proj.weight has unknown dtype "Q4_K"`);
    editHeader(path, (h) => (h["model.layers.0.mlp.gate_proj.weight"]!.dtype = "I16"));
    expect((await loadError(dir)).message).toBe(`${path}: model.layers.0.mlp.gate_proj.weight has dtype I16; only F32, F16 and BF16 are supported`);
  });

  it("missing weights and tokenizer files", async () => {
    const noWeights = copyOfTiny();
    unlinkSync(join(noWeights, "model.safetensors"));
    expect((await loadError(noWeights)).message).toBe(`${join(noWeights, "model.safetensors")}: file not found (nor model.safetensors.index.json)`);
    const noTokenizer = copyOfTiny();
    unlinkSync(join(noTokenizer, "tokenizer.json"));
    expect((await loadError(noTokenizer)).message).toBe(`${join(noTokenizer, "tokenizer.json")}: file not found`);
    const noTemplate = copyOfTiny();
    editJson(join(noTemplate, "tokenizer_config.json"), (j) => delete j.chat_template);
    expect((await loadError(noTemplate)).message).toMatch(/tokenizer_config\.json: no chat_template \(and no chat_template\.jinja\)/);
  });

  it("a vocabulary larger than the embedding", async () => {
    const dir = copyOfTiny();
    editJson(join(dir, "config.json"), (j) => (j.vocab_size = 151000));
    const tensors = tinyTensors();
    tensors["model.embed_tokens.weight"] = { dtype: "BF16", shape: [151000, 64], data: new Uint16Array(151000 * 64) };
    writeSafetensors(join(dir, "model.safetensors"), tensors);
    expect((await loadError(dir)).message).toBe(`${join(dir, "tokenizer.json")}: has token ids up to 151668 but config.json vocab_size is 151000`);
  });

  it("reads nothing but headers until a tensor is asked for", () => {
    const file = openSafetensors(join(tinyDir, "model.safetensors"));
    expect(file.info("model.embed_tokens.weight").byteLength).toBe(151680 * 64 * 2);
  });
});
