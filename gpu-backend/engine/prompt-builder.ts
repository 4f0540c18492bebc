import type { ChatMessage, GenerateRequest, ToolDefinition } from "../../protocol/messages";
import { ProtocolError } from "../../protocol/errors";
import type { ChatCodec } from "./chat-codec";
import type { StateStore, TurnState } from "./state-store";

/** How a turn's prompt ids were obtained. */
export type PromptSource =
  /** Appended to a kept state: earlier prompt ids and the model's generated ids reused as is. */
  | "delta"
  /** Appended to a kept state, but the model's reply re-rendered by the template differs from
   * what it generated, so the reply's tokens come from the template (earlier prompt ids kept). */
  | "delta-rerendered"
  /** The whole transcript rendered and tokenized. */
  | "full"
  /** A fork's first turn (`forkOf`): the parent's kept ids, whole turns of them, as far as the
   * transcripts agree, then the rest of the rendered text encoded. */
  | "fork";

export interface BuiltPrompt {
  tokenIds: number[];
  promptText: string;
  messages: ChatMessage[];
  tools: ToolDefinition[] | undefined;
  source: PromptSource;
  /** The kept state this prompt extends (delta sources): its turn's partial last block may be reused. */
  base?: string;
}

/**
 * Turns a request into prompt token ids.
 *
 * A delta turn (or a full turn whose transcript extends the trajectory's kept state) renders the
 * whole transcript with the chat template, checks that the previous prompt text is a prefix of
 * it, and builds the ids as
 *
 *   previous prompt ids ++ generated ids ++ encode(rest of the text)
 *
 * where the generated ids are kept only if the template renders the reply as exactly the text the
 * model produced. The model's own output is therefore never re-tokenized, and the block hashes of
 * everything before stay identical, so the prefix cache hits all of it.
 *
 * A fork's first turn (a full turn with `forkOf`, whose kept state has the request's cache salt)
 * starts from that parent's ids the same way (`fork` below); a parent state this backend no
 * longer keeps makes it a plain full turn.
 *
 * @example
 * const prompt = buildPrompt(request, codec, states); // throws ProtocolError("state_unknown")
 */
export function buildPrompt(req: GenerateRequest, codec: ChatCodec, states: StateStore): BuiltPrompt {
  if (req.mode === "delta") {
    const state = req.stateId === undefined ? undefined : states.get(req.stateId);
    if (!state) {
      throw new ProtocolError(
        "state_unknown",
        `state ${JSON.stringify(req.stateId ?? "")} is unknown or no longer the trajectory's latest: resend the full transcript`,
      );
    }
    const grown: Conversation = { messages: [...state.messages, ...req.messages], tools: req.tools ?? state.tools, thinking: req.thinking };
    return extend(state, grown, codec) ?? full(grown, codec);
  }
  if (req.trajectoryId !== undefined) {
    const state = states.latestFor(req.trajectoryId);
    if (state && sameTools(state.tools, req.tools) && isPrefix(state.messages, req.messages)) {
      const extended = extend(state, conversationOf(req), codec);
      if (extended) return extended;
    }
  }
  const parent = req.forkOf === undefined ? undefined : states.latestFor(req.forkOf);
  if (parent && parent.cacheSalt === (req.cacheSalt ?? "")) return fork(parent, conversationOf(req), codec);
  return full(conversationOf(req), codec);
}

/** What a prompt renders: the messages, the tools, and the request's thinking switch. */
interface Conversation {
  messages: ChatMessage[];
  tools: ToolDefinition[] | undefined;
  thinking: boolean | undefined;
}

function conversationOf(req: GenerateRequest): Conversation {
  return { messages: req.messages, tools: req.tools, thinking: req.thinking };
}

/**
 * The number of prompt tokens a full turn over `messages` and `tools` has: the same rendering
 * (generation prompt included) and tokenization as `buildPrompt`'s full prompt, so it equals the
 * `usage.promptTokens` such a turn reports (`POST /v1/tokenize`). A delta turn may count a few
 * tokens differently, since it keeps the model's own reply tokens instead of re-tokenizing them.
 *
 * @example countPromptTokens([{ role: "user", content: "hi" }], undefined, codec) // 9
 */
export function countPromptTokens(messages: ChatMessage[], tools: ToolDefinition[] | undefined, codec: ChatCodec, thinking?: boolean): number {
  return full({ messages, tools, thinking }, codec).tokenIds.length;
}

/**
 * The prompt text of a conversation. A template that refuses the conversation (Gemma's role
 * alternation, a `raise_exception`) is the client's error: `invalid_request` naming the template.
 * `thinking` (the request's switch) is the template's `enable_thinking`; undefined: its default.
 */
function render({ messages, tools, thinking }: Conversation, codec: ChatCodec): string {
  try {
    return codec.render({ messages, tools, addGenerationPrompt: true, ...(thinking === undefined ? {} : { thinking }) });
  } catch (e) {
    throw new ProtocolError("invalid_request", `the model's chat template rejects these messages: ${(e as Error).message}`, { cause: e });
  }
}

function full(conversation: Conversation, codec: ChatCodec): BuiltPrompt {
  const promptText = render(conversation, codec);
  const { messages, tools } = conversation;
  return { tokenIds: codec.encode(promptText), promptText, messages, tools, source: "full" };
}

function extend(state: TurnState, conversation: Conversation, codec: ChatCodec): BuiltPrompt | undefined {
  const promptText = render(conversation, codec);
  const { messages, tools } = conversation;
  if (!promptText.startsWith(state.promptText)) return undefined; // template not prefix-stable here
  const rest = promptText.slice(state.promptText.length);
  if (state.generatedText.length > 0 && rest.startsWith(state.generatedText)) {
    const tail = codec.encode(rest.slice(state.generatedText.length));
    return { tokenIds: [...state.promptTokenIds, ...state.generatedTokenIds, ...tail], promptText, messages, tools, source: "delta", base: state.stateId };
  }
  return { tokenIds: [...state.promptTokenIds, ...codec.encode(rest)], promptText, messages, tools, source: "delta-rerendered", base: state.stateId };
}

/**
 * A fork's first prompt from its parent's kept state. Both the parent's ids (prompt and
 * generated, so its replies keep the ids the model generated) and the fork's plain full prompt
 * are split after each end-of-turn id; the parent's turns are taken while each is the fork's
 * turn (the same ids, or ids that decode to the same text), then the plain prompt goes on:
 *
 *   parent ids:  | sys+user1 ... <eos> | reply1 (generated) <eos> | \n user2 ... <eos> | reply2 ...
 *   fork plain:  | sys+user1 ... <eos> | reply1 (re-encoded) <eos> | \n other user2 ... <eos> | ...
 *   fork ids:    | parent's             | parent's                 | plain from here on ...
 *
 * After the last turn taken comes the encoding of the text after its end-of-turn token: what a
 * delta turn from the parent's state at that reply appends (an end-of-turn token is a special
 * token, which the tokenizer never merges across, so these are the plain prompt's ids after it,
 * unless the tokenizer folds the whitespace after a special token into it, as Phi-3's does). The
 * fork's replies are rendered as the parent's state keeps them (`withKeptReplies`), as a delta
 * turn renders them, not as the edge stores them (canonical tool calls). Nothing of the parent's
 * matches: the plain full prompt.
 */
function fork(parent: TurnState, forked: Conversation, codec: ChatCodec): BuiltPrompt {
  const plain = full({ ...forked, messages: withKeptReplies(forked.messages, parent.messages) }, codec);
  const kept = [...parent.promptTokenIds, ...parent.generatedTokenIds];
  const keptEnds = turnEnds(kept, codec.eosTokenIds);
  const plainEnds = turnEnds(plain.tokenIds, codec.eosTokenIds);
  let turns = 0;
  while (turns < keptEnds.length && turns < plainEnds.length) {
    const a = kept.slice(keptEnds[turns - 1] ?? 0, keptEnds[turns]);
    const b = plain.tokenIds.slice(plainEnds[turns - 1] ?? 0, plainEnds[turns]);
    if (!sameIds(a, b) && codec.decode(a) !== codec.decode(b)) break;
    turns++;
  }
  if (turns === 0) return full(forked, codec);
  // The tail as a delta turn encodes it: the text after that end-of-turn token on its own (the same
  // ids as the plain prompt's, unless the tokenizer folds whitespace into a special token before it).
  const textEnds = turnTextEnds(plain.promptText, codec.eosTokenIds.map((id) => codec.decode([id])));
  const tail = textEnds.length === plainEnds.length ? codec.encode(plain.promptText.slice(textEnds[turns - 1])) : plain.tokenIds.slice(plainEnds[turns - 1]);
  return { ...plain, tokenIds: [...kept.slice(0, keptEnds[turns - 1]), ...tail], source: "fork" };
}

/** The offset after each end-of-turn token's text in `text`. */
function turnTextEnds(text: string, eosTexts: string[]): number[] {
  const ends: number[] = [];
  for (let from = 0; ; ) {
    let at = -1;
    let length = 0;
    for (const t of eosTexts) {
      const i = t.length > 0 ? text.indexOf(t, from) : -1;
      if (i >= 0 && (at < 0 || i < at)) [at, length] = [i, t.length];
    }
    if (at < 0) return ends;
    from = at + length;
    ends.push(from);
  }
}

/** The index after each end-of-turn id. */
function turnEnds(tokenIds: number[], eosTokenIds: readonly number[]): number[] {
  const eos = new Set(eosTokenIds);
  const ends: number[] = [];
  tokenIds.forEach((id, i) => eos.has(id) && ends.push(i + 1));
  return ends;
}

function sameIds(a: number[], b: number[]): boolean {
  return a.length === b.length && a.every((id, i) => id === b[i]);
}

/**
 * `messages` with the kept state's own replies in place of the same replies as the edge stores them
 * (tool-call ids and JSON layout aside: canonical ids, canonical JSON), as far as the transcripts
 * agree: the state keeps each reply as the model wrote it, which renders back to its generated text.
 */
function withKeptReplies(messages: ChatMessage[], kept: ChatMessage[]): ChatMessage[] {
  const out = [...messages];
  for (let i = 0; i < Math.min(messages.length, kept.length); i++) {
    if (sameMessage(messages[i]!, kept[i]!)) continue;
    if (!sameReply(messages[i]!, kept[i]!)) break;
    out[i] = kept[i]!;
  }
  return out;
}

function sameReply(a: ChatMessage, b: ChatMessage): boolean {
  const calls = b.tool_calls ?? [];
  return (
    a.role === "assistant" &&
    b.role === "assistant" &&
    (a.content ?? "") === (b.content ?? "") &&
    (a.tool_calls ?? []).length === calls.length &&
    (a.tool_calls ?? []).every((c, j) => c.function.name === calls[j]!.function.name && sameJson(c.function.arguments, calls[j]!.function.arguments))
  );
}

function sameJson(a: string, b: string): boolean {
  if (a === b) return true;
  try {
    return sortedJson(JSON.parse(a)) === sortedJson(JSON.parse(b));
  } catch {
    return false;
  }
}

/** JSON text with object keys sorted at every level. */
function sortedJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(sortedJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>).sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${sortedJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

function isPrefix(prefix: ChatMessage[], messages: ChatMessage[]): boolean {
  if (prefix.length > messages.length) return false;
  for (let i = 0; i < prefix.length; i++) if (!sameMessage(prefix[i]!, messages[i]!)) return false;
  return true;
}

function sameMessage(a: ChatMessage, b: ChatMessage): boolean {
  return (
    a.role === b.role &&
    (a.content ?? "") === (b.content ?? "") &&
    (a.tool_call_id ?? "") === (b.tool_call_id ?? "") &&
    (a.name ?? "") === (b.name ?? "") &&
    JSON.stringify(a.tool_calls ?? []) === JSON.stringify(b.tool_calls ?? [])
  );
}

function sameTools(a: ToolDefinition[] | undefined, b: ToolDefinition[] | undefined): boolean {
  return JSON.stringify(a ?? []) === JSON.stringify(b ?? []);
}
