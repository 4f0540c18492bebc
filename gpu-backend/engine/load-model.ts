import { existsSync } from "node:fs";
import type { ChatCodec } from "./chat-codec";
import { TokenPieces } from "../tokenizer/token-pieces";
import { newToolCallId } from "../tokenizer/tool-call-id";
import { detectToolCallConvention, parseAssistantText, toolCallMarkers } from "../tokenizer/tool-call-parser";
import { loadCheckpoint, type Checkpoint } from "../model/checkpoint/checkpoint";
import { isGgufPath, loadGgufCheckpoint } from "../model/checkpoint/gguf-checkpoint";
import type { DecoderSpec, WeightSource } from "../model/graph/decoder-spec";
import { demoFamilyOf, materializeFamilyDemo } from "../model/checkpoint/demo-families";
import { decoderSpecOf } from "../model/checkpoint/decoder-spec-of";

export interface LoadedModel {
  spec: DecoderSpec;
  weights: WeightSource;
  codec: ChatCodec;
  checkpoint: Checkpoint;
}

/** Longest context served by default (rotary tables and the context check are sized by it). */
export const DEFAULT_MAX_CONTEXT = 32_768;

/**
 * Loads a Hugging Face-style folder or a GGUF file (`*.gguf`, model/checkpoint/gguf-checkpoint.ts),
 * or materializes and loads the embedded demo model when `dir` is undefined, into what the executor and the engine need: the decoder spec, the weights, and the
 * engine's `ChatCodec` (tokenizer, chat template, tool-call convention). It lives with the engine
 * because the codec is the engine's interface; server/backend.ts assembles the backend from it
 * (executor, block pool, engine, HTTP app, heartbeats).
 *
 * @example
 * const { spec, weights, codec } = await loadModel({ dir: undefined, log: console.log });
 */
export async function loadModel(options: { dir: string | undefined; maxContext?: number; log?: (line: string) => void }): Promise<LoadedModel> {
  const log = options.log ?? (() => {});
  // A demo family or demo model id ("qwen3", "demo-gemma3-random") is materialized; anything else is a folder.
  const family = options.dir === undefined ? "llama" : existsSync(options.dir) ? undefined : demoFamilyOf(options.dir);
  const dir = family ? await materializeFamilyDemo(family, { onProgress: log }) : options.dir!;
  log(`loading ${dir}`);
  const checkpoint = isGgufPath(dir) ? await loadGgufCheckpoint(dir, { log }) : await loadCheckpoint(dir);
  const spec = decoderSpecOf(checkpoint.modelId, checkpoint.config, options.maxContext ?? DEFAULT_MAX_CONTEXT);
  const { tokenizer, template } = checkpoint;
  const weights = checkpoint.weights;
  const eos = new Set([...tokenizer.eosTokenIds, ...checkpoint.config.eosTokenIds]);
  const toolCalls = detectToolCallConvention(checkpoint.chatTemplate);
  const pieces = new TokenPieces(tokenizer);
  const codec: ChatCodec = {
    render: ({ thinking, ...p }) => template.render(thinking === undefined ? p : { ...p, extra: { enable_thinking: thinking } }),
    encode: (text) => tokenizer.encode(text, { addSpecialTokens: false }),
    decode: (ids) => tokenizer.decode(ids, { skipSpecialTokens: false }),
    tokenPiece: (id) => pieces.piece(id),
    createDecoder: () => tokenizer.createDecoder({ skipSpecialTokens: false }),
    parseAssistant: (text) => parseAssistantText(text, toolCalls, newToolCallId),
    eosTokenIds: [...eos],
    toolCallConvention: toolCalls,
    grammarVocabulary: () => ({ pieces: tokenizer.grammarPieces(toolCallMarkers(toolCalls)), encoding: tokenizer.vocabEncoding }),
  };
  return { spec, weights, codec, checkpoint };
}
