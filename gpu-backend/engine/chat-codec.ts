import type { AssistantMessage, ChatMessage, ToolDefinition } from "../../protocol/messages";
import type { TokenPiece } from "../tokenizer/token-pieces";
import type { VocabEncoding } from "../tokenizer/tokenizer";
import type { ToolCallConvention } from "../tokenizer/tool-call-parser";

/** What the engine needs from a model's tokenizer and chat template. */
export interface ChatCodec {
  /**
   * Renders a transcript with the model's chat template; `thinking`, when given, is the
   * template's `enable_thinking` (absent: the template's default).
   */
  render(params: { messages: ChatMessage[]; tools?: ToolDefinition[] | undefined; addGenerationPrompt: boolean; thinking?: boolean }): string;
  /** Tokenizes rendered text (special tokens in the text are recognised; none are added). */
  encode(text: string): number[];
  /** Decodes ids back to text, special tokens kept. */
  decode(tokenIds: number[]): string;
  /** One token's text (decoded alone) and raw bytes, for logprobs (`TokenPieces`). */
  tokenPiece(tokenId: number): TokenPiece;
  /** A streaming decoder that never emits half a character; `flush` releases what it held back. */
  createDecoder(): { push(tokenId: number): string; flush(): string };
  /**
   * Parses the text of a reply (stop tokens excluded) per the template's tool-call convention.
   * Must never throw; a reply without tool calls keeps its text unchanged as content. `ids`: the
   * ids its calls streamed with (`ToolCallStream.ids`), given to its calls in order; calls past
   * them get fresh ones.
   */
  parseAssistant(text: string, ids?: readonly string[]): AssistantMessage;
  /** Tokens that end the model's turn. */
  readonly eosTokenIds: readonly number[];
  /** How the chat template writes tool calls (tool-call-parser.ts). */
  readonly toolCallConvention: ToolCallConvention;
  /**
   * The vocabulary for a grammar engine (constraint/): every id's piece (special tokens empty, the
   * convention's markers kept) and how pieces spell bytes.
   */
  grammarVocabulary(): { pieces: string[]; encoding: VocabEncoding };
}
