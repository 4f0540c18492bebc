import type { ReplyDelta, ToolCallDelta } from "../../protocol/messages";

/**
 * Gathers what streamed text adds to a reply's structure (protocol/messages.ts `ReplyDelta`):
 * content, calls opened (each draws its id then) and their arguments pieces, merged per call in
 * the order they came. `take` hands the delta over and starts the next.
 *
 * @example
 * const out = new ReplyDeltaBuilder(() => "call_1");
 * out.addContent("Checking.");
 * out.addArguments(out.openCall("get_weather"), '{"city": ');
 * out.take(); // { content: "Checking.", toolCalls: [{ index: 0, id: "call_1", name: "get_weather", arguments: '{"city": ' }] }
 */
export class ReplyDeltaBuilder {
  /** The ids of the calls opened so far, by call index. */
  readonly ids: string[] = [];
  private content = "";
  private pieces: ToolCallDelta[] = [];

  constructor(private readonly makeId: () => string) {}

  addContent(text: string): void {
    this.content += text;
  }

  /** Opens the reply's next call: its first delta carries its fresh id and its name. Returns its index. */
  openCall(name: string): number {
    const index = this.ids.length;
    const id = this.makeId();
    this.ids.push(id);
    this.pieces.push({ index, id, name });
    return index;
  }

  addArguments(index: number, text: string): void {
    if (text.length === 0) return;
    const last = this.pieces.at(-1);
    if (last?.index === index) last.arguments = (last.arguments ?? "") + text;
    else this.pieces.push({ index, arguments: text });
  }

  /** What was added since the last `take` (`{}` when nothing was). */
  take(): ReplyDelta {
    const delta: ReplyDelta = {};
    if (this.content.length > 0) delta.content = this.content;
    if (this.pieces.length > 0) delta.toolCalls = this.pieces;
    this.content = "";
    this.pieces = [];
    return delta;
  }
}

/** The reply's text as a convention's splitter reads it: all text so far, and how much of it is settled. */
export interface StreamText {
  readonly text: string;
  /** Text before this index went out as content or was read as calls. */
  pos: number;
  readonly out: ReplyDeltaBuilder;
}

/** One convention's splitter: reads `s.text` from `s.pos` as far as it can; `final`: the text is complete. */
export interface ConventionStream {
  run(s: StreamText, final: boolean): void;
}
