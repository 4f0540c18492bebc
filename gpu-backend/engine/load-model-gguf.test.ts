import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadCheckpoint } from "../model/checkpoint/checkpoint";
import { loadGgufCheckpoint } from "../model/checkpoint/gguf-checkpoint";
import { tinyFamilyConfig, type TokenizerIds } from "../model/checkpoint/demo-families";
import { demoModelConfig, materializeModel } from "../model/checkpoint/demo-model";
import { exportGguf } from "../model/export/gguf-export";
import { loadModel } from "./load-model";
import { defaultPrecision, weightsAt } from "./weight-precision";
import { trainedModelPath } from "../model/checkpoint/trained-models";
import { readGguf } from "../model/gguf/gguf-reader";

/** `--model FILE.gguf`: loadModel and the weight precision choice over a GGUF file (model/checkpoint/gguf-checkpoint.ts). */
const root = mkdtempSync(join(tmpdir(), "load-model-gguf-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const ids: TokenizerIds = { vocabSize: demoModelConfig().vocabSize, bosTokenId: null, eosTokenIds: demoModelConfig().eosTokenIds };

describe("loadModel with a GGUF file", () => {
  it("serves `--model FILE.gguf`: spec, codec and the int4 weights as stored through weightsAt", async () => {
    const folder = await loadCheckpoint(await materializeModel({ dir: join(root, "served"), config: tinyFamilyConfig("llama", ids), seed: 7 }));
    const path = join(root, "served-Q4_0.gguf");
    exportGguf(folder, path, { fileType: "Q4_0" });
    const lines: string[] = [];
    const model = await loadModel({ dir: path, maxContext: 256, log: (l) => lines.push(l) });
    expect(lines[0]).toBe(`loading ${path}`);
    expect(model.checkpoint.ggufPath).toBe(path);
    expect(model.spec.numLayers).toBe(2);
    const text = "<|im_start|>user\nhi there<|im_end|>";
    expect(model.codec.decode(model.codec.encode(text))).toBe(text);
    expect(model.codec.eosTokenIds).toEqual(expect.arrayContaining(folder.config.eosTokenIds));
    const w = weightsAt(model.checkpoint, "cpu", "int4", (l) => lines.push(l));
    expect(w.quantized?.freshCount).toBe(0);
    expect(lines.some((l) => /int4: 9 of 9 linear weights taken as stored Q4_0 blocks/.test(l))).toBe(true);
  });

  it("defaults to int8 on cpu for a file of 4-bit blocks int4 cannot take as stored (Q4_1), int4 for a Q4_0 or float file", async () => {
    const path = join(root, "served-Q4_0.gguf"); // the test above wrote it
    expect(defaultPrecision("cpu", await loadGgufCheckpoint(path))).toBe("int4");
    const f16 = join(root, "served-F16.gguf");
    exportGguf(await loadCheckpoint(join(root, "served")), f16, { fileType: "F16" });
    expect(defaultPrecision("cpu", await loadGgufCheckpoint(f16))).toBe("int4");
    expect(defaultPrecision("cpu", await loadCheckpoint(join(root, "served")))).toBe("int4"); // a folder of floats
    const smollm2 = trainedModelPath("smollm2");
    expect(readGguf(smollm2).tensors.filter((t) => t.ggmlType === 3).length).toBe(210); // Q4_1
    const trained = await loadGgufCheckpoint(smollm2);
    expect(defaultPrecision("cpu", trained)).toBe("int8");
    expect(defaultPrecision("device-pool", trained)).toBe("fp16");
    expect(defaultPrecision("cpu")).toBe("int4");
  });
});
