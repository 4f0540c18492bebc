import type { ToolCall } from "../../protocol/messages";
import type { AssistantReply, TurnEvent } from "../../durable-objects/turn/turn-types";
import { ReplyTextSplitter } from "./reply-text";

/**
 * One thing a streamed reply does, in the order clients see it: text, a tool call opening (its id
 * and name, as soon as they are known), a piece of its arguments, the call closing (`call`: the
 * whole call as it ends: the done message's when the reply has ended, else what streamed).
 */
export type ReplyStep =
  | { type: "text"; text: string }
  /** `arguments`: only on a call that did not stream (it goes out whole): all its arguments. */
  | { type: "open"; index: number; id: string; name: string; arguments?: string }
  | { type: "arguments"; index: number; delta: string }
  | { type: "close"; index: number; call: ToolCall };

type TokenEvent = Extract<TurnEvent, { type: "token" }>;

interface OpenCall {
  index: number;
  id: string;
  name: string;
  arguments: string;
}

/**
 * The one rule by which every streaming API (chat chunks, Responses events, Messages events)
 * turns a turn's token events into `ReplyStep`s.
 *
 * Token events that carry `reply` (the backend parsed the reply for tool calls): its content is
 * text and its calls open, grow and close as they are generated; a call closes when the next one
 * opens or the reply ends. Text after the first call opened is held back (the done message says
 * what it is), and so is trailing whitespace until more text follows (a reply with calls has its
 * content trimmed). Token events without `reply` (a replayed turn, a backend that does not stream
 * calls), and every event of a request without tools: `ReplyTextSplitter` holds back what may be
 * a call, as before (without tools, nothing), and with tools trailing whitespace waits as above. Once any event carried `reply`, the text of events without
 * it adds nothing.
 *
 * At the end the done message is authoritative: text it holds past what streamed goes out (when
 * events carried `reply`), the open call closes with the message's call, and each call of the
 * message that did not stream (a replay, a call the backend did not stream) goes out whole: open
 * with all its arguments, close.
 *
 * @example
 * const steps = new ReplySteps(hasTools);
 * for await (const e of events) {
 *   if (e.type === "token") for (const s of steps.token(e)) render(s);
 *   else if (e.type === "done") for (const s of steps.finish(e.message)) render(s);
 * }
 */
export class ReplySteps {
  private readonly split: ReplyTextSplitter;
  /** Whether any token event carried `reply`. */
  private structured = false;
  /** Text that went out, and whitespace held at its end. */
  private streamed = "";
  private space = "";
  /** Calls that opened (by index), and the one still open. */
  private readonly opened = new Map<number, OpenCall>();
  private open: OpenCall | undefined;

  constructor(private readonly hasTools: boolean) {
    this.split = new ReplyTextSplitter(hasTools);
  }

  /** The steps one token event adds. */
  token(event: Pick<TokenEvent, "text" | "reply">): ReplyStep[] {
    const steps: ReplyStep[] = [];
    // Without tools in the request the reply's text goes out as it comes (the backend parses every
    // free reply, so `reply` comes without tools too).
    if (!event.reply || !this.hasTools) {
      if (this.structured) return steps;
      const out = this.split.push(event.text);
      if (!this.hasTools) {
        if (out) this.streamed += out;
        return out ? [{ type: "text", text: out }] : steps;
      }
      if (out) this.text(out, steps);
      return steps;
    }
    this.structured = true;
    if (event.reply.content) this.text(event.reply.content, steps);
    for (const d of event.reply.toolCalls ?? []) {
      let call = this.opened.get(d.index);
      if (!call) {
        // A call's first delta names it; a piece of a call never named cannot be rendered.
        if (d.id === undefined || d.name === undefined) continue;
        this.closeOpen(steps);
        call = { index: d.index, id: d.id, name: d.name, arguments: "" };
        this.opened.set(d.index, call);
        this.open = call;
        steps.push({ type: "open", index: d.index, id: d.id, name: d.name });
      }
      if (d.arguments && call === this.open) {
        call.arguments += d.arguments;
        steps.push({ type: "arguments", index: d.index, delta: d.arguments });
      }
    }
    return steps;
  }

  /** The steps that end the reply, by its done message. */
  finish(message: AssistantReply): ReplyStep[] {
    const calls = message.tool_calls ?? [];
    const steps: ReplyStep[] = [];
    // Without calls the held whitespace (and text the splitter held) is the reply's after all.
    const rest = (calls.length === 0 && this.opened.size === 0 ? this.space : "") + (this.structured ? "" : this.split.finish(calls.length > 0));
    this.space = "";
    if (rest) {
      this.streamed += rest;
      steps.push({ type: "text", text: rest });
    }
    const open = this.open;
    if (open) {
      const final = calls[open.index];
      const same = final !== undefined && final.id === open.id && final.function.name === open.name;
      const rest = same && final.function.arguments.startsWith(open.arguments) ? final.function.arguments.slice(open.arguments.length) : "";
      if (rest) steps.push({ type: "arguments", index: open.index, delta: rest });
      steps.push({ type: "close", index: open.index, call: same ? final : asCall(open) });
      this.open = undefined;
    }
    // Text the message holds past what streamed (what came after a call).
    const content = message.content ?? "";
    if (this.structured && content.length > this.streamed.length && content.startsWith(this.streamed)) {
      steps.push({ type: "text", text: content.slice(this.streamed.length) });
      this.streamed = content;
    }
    for (const [index, call] of calls.entries()) {
      if (this.opened.has(index)) continue;
      steps.push({ type: "open", index, id: call.id, name: call.function.name, arguments: call.function.arguments });
      steps.push({ type: "close", index, call });
    }
    return steps;
  }

  /** Content text: out at once before any call, holding back trailing whitespace; after a call, held. */
  private text(piece: string, steps: ReplyStep[]): void {
    if (this.opened.size > 0) return;
    const all = this.space + piece;
    const body = all.trimEnd();
    this.space = all.slice(body.length);
    if (!body) return;
    this.streamed += body;
    steps.push({ type: "text", text: body });
  }

  private closeOpen(steps: ReplyStep[]): void {
    if (!this.open) return;
    steps.push({ type: "close", index: this.open.index, call: asCall(this.open) });
    this.open = undefined;
  }
}

function asCall(c: OpenCall): ToolCall {
  return { id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } };
}
