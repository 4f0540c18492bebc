import type { ReplyDelta } from "../../protocol/messages";
import { MarkedCallStream } from "./json-call-stream";
import { LlamaCallStream } from "./llama-call-stream";
import { PythonicCallStream } from "./pythonic-call-stream";
import { ReplyDeltaBuilder, type ConventionStream } from "./reply-delta-builder";
import { newToolCallId } from "./tool-call-id";
import type { ToolCallConvention } from "./tool-call-parser";

/**
 * Splits a reply's text, as it is generated, into what each piece adds to the reply's structure
 * (protocol/messages.ts `ReplyDelta`): content outside calls, and per call its first delta (id
 * and name, as soon as the name is complete) then its arguments piece by piece. Fed the text the
 * token frames carry (after stop strings), in order; `finish` gives what the end settles (text a
 * marker's beginning held back, a call list that needed the end to be one).
 *
 * What it holds to, with the parser (`parseAssistantText` of tool-call-parser.ts, given `ids`):
 * per call of the final message, the streamed id and name are the message's and the arguments
 * pieces add up to its `function.arguments` byte for byte; the content pieces add up to the
 * message's content (trimmed at its two ends when there are calls). The splitter reads each
 * convention the way the parser does: hermes blocks (not inside a leading `<think>` section),
 * phi4-mini blocks, a llama3-json reply that is one call object, a pythonic call list that ends
 * the reply. Arguments written as an object stream as their raw text; written as a JSON string,
 * they go out decoded when the string closes; pythonic arguments go out as the JSON the parser
 * builds, one keyword argument at a time. A call the parser refuses at the end (cut by the
 * budget, no closing tag, malformed JSON, text after a llama3-json object or a pythonic list, a
 * `</think>` after a call in a reply that neither it nor its prompt opened with `<think>`) may
 * have streamed.
 *
 * @example
 * const stream = new ToolCallStream("hermes");
 * stream.push('Checking.\n<tool_call>\n{"name": "get_weather", "argu');
 * // { content: "Checking.\n", toolCalls: [{ index: 0, id: "call_…", name: "get_weather" }] }
 * stream.push('ments": {"city": "Paris"}}\n</tool_call>'); // { toolCalls: [{ index: 0, arguments: '{"city": "Paris"}' }] }
 * stream.finish(); // {}
 * codec.parseAssistant(text, stream.ids); // the same id
 */
export class ToolCallStream {
  private readonly s: { text: string; pos: number; readonly out: ReplyDeltaBuilder };
  private readonly convention: ConventionStream;

  /**
   * `reasoningOpen`: the prompt ends with `<think>` (a template that opens the reasoning section
   * itself), so hermes blocks before a `</think>` wait for one (then they are reasoning) or for
   * the end (then they are calls), as the parser reads them.
   */
  constructor(convention: ToolCallConvention, makeId: () => string = newToolCallId, o: { reasoningOpen?: boolean } = {}) {
    this.s = { text: "", pos: 0, out: new ReplyDeltaBuilder(makeId) };
    this.convention = conventionStream(convention, o.reasoningOpen === true);
  }

  /** The ids of the calls streamed so far, by call index: what the final parse names its calls. */
  get ids(): readonly string[] {
    return this.s.out.ids;
  }

  /** What `text` (the reply's next piece) adds. */
  push(text: string): ReplyDelta {
    this.s.text += text;
    this.convention.run(this.s, false);
    return this.s.out.take();
  }

  /** What the end of the reply settles, with `text` (its last piece, if any): the rest of it. */
  finish(text = ""): ReplyDelta {
    this.s.text += text;
    this.convention.run(this.s, true);
    return this.s.out.take();
  }
}

function conventionStream(convention: ToolCallConvention, reasoningOpen: boolean): ConventionStream {
  switch (convention) {
    case "hermes":
      return new MarkedCallStream({ open: "<tool_call>", close: "</tool_call>", arrays: false, closeOptionalAtEnd: false, reasoning: true, reasoningOpen });
    case "phi4-mini":
      return new MarkedCallStream({ open: "<|tool_call|>", close: "<|/tool_call|>", arrays: true, closeOptionalAtEnd: true, reasoning: false });
    case "llama3-json":
      return new LlamaCallStream();
    case "pythonic":
      return new PythonicCallStream();
    case "none":
      return { run: (s) => {
        s.out.addContent(s.text.slice(s.pos));
        s.pos = s.text.length;
      } };
  }
}
