import type { ChatCodec } from "./chat-codec";
import { TokenPieces } from "../tokenizer/token-pieces";
import { toolCallIds } from "../tokenizer/tool-call-id";
import { withGenericTools } from "../tokenizer/generic-tools";
import { detectToolCallConvention, parseAssistantText, toolCallMarkers } from "../tokenizer/tool-call-parser";
import { loadCheckpoint, type Checkpoint } from "../model/checkpoint/checkpoint";
import { isGgufPath, loadGgufCheckpoint } from "../model/checkpoint/gguf-checkpoint";
import type { DecoderSpec, WeightSource } from "../model/graph/decoder-spec";
import { decoderSpecOf } from "../model/checkpoint/decoder-spec-of";
import { resolveModelSource } from "./model-source";

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
 * (executor, block pool, engine, HTTP app, heartbeats). `dir` is any `--model` value: a demo
 * family, a trained test model ("smollm2"), an `hf:` hub model (resolveModelSource, model-source.ts).
 *
 * @example
 * const { spec, weights, codec } = await loadModel({ dir: undefined, log: console.log });
 */
export async function loadModel(options: { dir: string | undefined; maxContext?: number; log?: (line: string) => void }): Promise<LoadedModel> {
  const log = options.log ?? (() => {});
  // Hook point (model-source.ts): the `--model` value as a local path, a folder or a file. A demo
  // family is materialized, "smollm2" is the fetched trained test model (a .gguf file), "hf:..." is
  // downloaded from the hub; what reads the path (GGUF or folder) comes after this line.
  const dir = await resolveModelSource(options.dir, log);
  log(`loading ${dir}`);
  const checkpoint = isGgufPath(dir) ? await loadGgufCheckpoint(dir, { log }) : await loadCheckpoint(dir);
  const spec = decoderSpecOf(checkpoint.modelId, checkpoint.config, options.maxContext ?? DEFAULT_MAX_CONTEXT);
  const { tokenizer, template } = checkpoint;
  const weights = checkpoint.weights;
  const eos = new Set([...tokenizer.eosTokenIds, ...checkpoint.config.eosTokenIds]);
  // A template that renders no tools gets the generic Hermes-style rendering (generic-tools.ts):
  // tools in the system message, calls as <tool_call> blocks, parsed and constrained as "hermes".
  const templateToolCalls = detectToolCallConvention(checkpoint.chatTemplate);
  const toolCalls = templateToolCalls === "none" ? "hermes" : templateToolCalls;
  const pieces = new TokenPieces(tokenizer);
  const codec: ChatCodec = {
    render: ({ thinking, ...p }) => {
      const q = templateToolCalls === "none" && p.tools?.length ? { ...p, messages: withGenericTools(p.messages, p.tools), tools: undefined } : p;
      return template.render(thinking === undefined ? q : { ...q, extra: { enable_thinking: thinking } });
    },
    encode: (text) => tokenizer.encode(text, { addSpecialTokens: false }),
    decode: (ids) => tokenizer.decode(ids, { skipSpecialTokens: false }),
    tokenPiece: (id) => pieces.piece(id),
    createDecoder: () => tokenizer.createDecoder({ skipSpecialTokens: false }),
    parseAssistant: (text, ids) => parseAssistantText(text, toolCalls, toolCallIds(ids)),
    eosTokenIds: [...eos],
    toolCallConvention: toolCalls,
    grammarVocabulary: () => ({ pieces: tokenizer.grammarPieces(toolCallMarkers(toolCalls)), encoding: tokenizer.vocabEncoding }),
  };
  return { spec, weights, codec, checkpoint };
}
