import { describe, expect, it } from "vitest";
import type { AssistantMessage, ReplyDelta } from "../../protocol/messages";
import { replyDeltasMismatch, sumReplyDeltas, type SummedReply } from "./reply-deltas";
import { toolCallIds } from "./tool-call-id";
import { parseAssistantText, type ToolCallConvention } from "./tool-call-parser";
import { ToolCallStream } from "./tool-call-stream";

/**
 * The streamed deltas of realistic replies, fed in many random splits (whole characters, as the
 * decoder emits them), against the parser's final message: same ids and names, arguments byte
 * for byte, the same content, and each call's name before its last piece.
 */
const REPLIES: Record<ToolCallConvention, string[]> = {
  hermes: [
    'I will check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "units": {"temp": "c", "wind": ["kmh", "ms"]}, "days": 3}}\n</tool_call>',
    '<tool_call>\n{"name": "grep", "arguments": {"q": "brace } and { and \\"quote\\" and \\\\ slash"}}\n</tool_call>\n<tool_call>\n{"name": "write", "arguments": {"s": "</tool_call> inside", "u": "héllo 🌍 \\u00e9\\n"}}\n</tool_call>\nDone, both.',
    '<tool_call>\n{"name": "run_shell", "arguments": "{\\"cmd\\": \\"ls -la | grep }\\"}"}\n</tool_call>',
    'Time:\n<tool_call>\n{"name": "now"}\n</tool_call>',
    '<tool_call>\n{ "arguments" : { "b" : 2 ,\n  "a" : [1, 2.5e3, null, true] } , "name" : "sum" }\n</tool_call>',
    '<tool_call>\n{"name": "scale", "arguments": 42}\n</tool_call>',
    '<think>\nMaybe <tool_call>\n{"name": "x", "arguments": {}}\n</tool_call> no.\n</think>\n\nLet me call.\n<tool_call>\n{"name": "get_time", "arguments": {"tz": "Europe/Paris", "detail": {"seconds": true}}}\n</tool_call>',
    '<think>\nI could write <tool_call>\n{"name": "x", "arguments": {"a": 1}}\n</tool_call>',
    "Just text with < and <tool and <tool_call> not json </tool_call> and a [bracket].",
    'Text <tool_call>\n{"arguments": {"a": 1}}\n</tool_call> and <tool_call>\n{"name": "ok", "arguments": {"nested": {"deep": {"deeper": [{"x": "]"}]}}}}\n</tool_call>',
  ],
  "phi4-mini": [
    'Sure.<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {"tz": "CET", "fmt": "{h}:{m}"}}]<|/tool_call|>',
    '<|tool_call|>[{"name": "search", "arguments": {"query": "unicode ü 中文", "limit": 10}}]',
    '<|tool_call|>{"name": "f", "arguments": {"a": [1, {"b": "}"}]}}<|/tool_call|> and after.',
    "No calls <|tool_call|>[]<|/tool_call|> here.",
  ],
  "llama3-json": [
    '{"name": "get_weather", "parameters": {"city": "Paris", "n": 3}}',
    '<|python_tag|>{"name": "search", "parameters": {"query": "a \\"quoted\\" {x} \\\\"}}',
    '  {"name": "run", "arguments": "{\\"a\\": 1}"}  \n',
    "The answer is {not json}.",
    '{"name": "f", "parameters": {"a": 1}} and then text',
  ],
  pythonic: [
    '[get_weather(city="Paris", days=3)]',
    "Let me look.\n\n[get_weather(city='Paris', units=None, flags=[True, False], opts={\"a\": (1, 2), \"b\": {\"c\": 1.50}}), get_time(tz=\"UTC\")]",
    '[search(q="f(x) = [1, 2], \\"y\\"", raw=r"C:\\path", multi="""a\nb "quoted" c""", n=-.5, e=\'it\\\'s\')]',
    "[now()]\n",
    "[f(a=1,), g(b=\"x\",),]",
    "Use [1, 2] and [x] and [f(x) here.",
    "A list [f(x=1)] in prose, then more.",
  ],
  none: ['Anything <tool_call>\n{"name": "x", "arguments": {}}\n</tool_call> stays text.'],
};

/** Replies whose parse the stream cannot know before the end (see the contract): checked apart. */
const DIVERGING = new Set(["A list [f(x=1)] in prose, then more.", '{"name": "f", "parameters": {"a": 1}} and then text']);

function random(seed: number): () => number {
  let state = seed;
  return () => (state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32;
}

/** `text` cut into pieces of 1 to `most` characters (code points: the decoder never emits half a one). */
function split(text: string, next: () => number, most: number): string[] {
  const chars = [...text];
  const pieces: string[] = [];
  for (let i = 0; i < chars.length; ) {
    const n = 1 + Math.floor(next() * most);
    pieces.push(chars.slice(i, i + n).join(""));
    i += n;
  }
  return pieces;
}

function streamed(text: string, convention: ToolCallConvention, pieces: string[]): { deltas: ReplyDelta[]; sum: SummedReply; message: AssistantMessage } {
  let n = 0;
  const stream = new ToolCallStream(convention, () => `call_${++n}`);
  const deltas: ReplyDelta[] = [...pieces.map((p) => stream.push(p)), stream.finish()];
  return { deltas, sum: sumReplyDeltas(deltas), message: parseAssistantText(text, convention, toolCallIds(stream.ids)) };
}

function expectAgrees(text: string, convention: ToolCallConvention, pieces: string[], where: string): void {
  const { deltas, message } = streamed(text, convention, pieces);
  expect(replyDeltasMismatch(deltas, message), where).toBeUndefined();
}

describe("ToolCallStream", () => {
  for (const [convention, replies] of Object.entries(REPLIES) as [ToolCallConvention, string[]][]) {
    it(`${convention}: every split streams the final message's calls and content`, () => {
      const next = random(7);
      for (const text of replies.filter((t) => !DIVERGING.has(t))) {
        expectAgrees(text, convention, [text], `${JSON.stringify(text)} whole`);
        expectAgrees(text, convention, [...text], `${JSON.stringify(text)} per character`);
        for (let round = 0; round < 40; round++) {
          const pieces = split(text, next, 1 + (round % 8));
          expectAgrees(text, convention, pieces, `${JSON.stringify(text)} as ${JSON.stringify(pieces)}`);
        }
      }
    });
  }

  it("a call's name comes before its last piece, in order of the calls", () => {
    const next = random(11);
    const cases: [ToolCallConvention, string][] = [
      ["hermes", REPLIES.hermes[0]!],
      ["hermes", REPLIES.hermes[2]!],
      ["phi4-mini", REPLIES["phi4-mini"][0]!],
      ["llama3-json", REPLIES["llama3-json"][1]!],
      ["pythonic", REPLIES.pythonic[1]!],
      ["pythonic", REPLIES.pythonic[2]!],
    ];
    for (const [convention, text] of cases) {
      for (let round = 0; round < 20; round++) {
        const { sum } = streamed(text, convention, split(text, next, 4));
        expect(sum.calls.length, text).toBeGreaterThan(0);
        for (const call of sum.calls) expect(call.opened, `${text}: ${call.name}`).toBeLessThan(call.last);
        expect(sum.calls.map((c) => c.opened)).toEqual([...sum.calls.map((c) => c.opened)].sort((a, b) => a - b));
      }
    }
  });

  it("arguments stream as they are written, not at the end of the call", () => {
    const stream = new ToolCallStream("hermes", () => "call_x");
    expect(stream.push('Hi <tool_call>\n{"name": "get_weather", "arguments": {"ci')).toEqual({ content: "Hi ", toolCalls: [{ index: 0, id: "call_x", name: "get_weather", arguments: '{"ci' }] });
    expect(stream.push('ty": "Par')).toEqual({ toolCalls: [{ index: 0, arguments: 'ty": "Par' }] });
    expect(stream.push('is"}}\n</tool')).toEqual({ toolCalls: [{ index: 0, arguments: 'is"}' }] });
    expect(stream.push("_call>")).toEqual({});
    expect(stream.finish()).toEqual({});
  });

  it("after a prompt that opened <think>, a block waits for </think> (reasoning) or the end (a call)", () => {
    const next = random(5);
    const reasoned = 'I may need <tool_call>\n{"name": "x", "arguments": {}}\n</tool_call> here.\n</think>\n\n<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>';
    const unclosed = 'Calling.\n<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>';
    for (const text of [reasoned, unclosed]) {
      for (let round = 0; round < 20; round++) {
        let n = 0;
        const stream = new ToolCallStream("hermes", () => `call_${++n}`, { reasoningOpen: true });
        const deltas = [...split(text, next, 1 + (round % 6)).map((p) => stream.push(p)), stream.finish()];
        const message = parseAssistantText(text, "hermes", toolCallIds(stream.ids));
        expect(message.tool_calls?.map((c) => c.function.name)).toEqual(["get_time"]);
        expect(replyDeltasMismatch(deltas, message), text).toBeUndefined();
      }
    }
    // Without the option the reasoning's block streams as a call the parser does not keep.
    const { deltas, message } = streamed(reasoned, "hermes", [...reasoned]);
    expect(replyDeltasMismatch(deltas, message)).toMatch(/^streamed calls/);
  });

  it("content that may begin a marker waits for the text that settles it", () => {
    const stream = new ToolCallStream("hermes");
    expect(stream.push("a <tool_c")).toEqual({ content: "a " });
    expect(stream.push("ar")).toEqual({ content: "<tool_car" });
    expect(stream.push(" <")).toEqual({ content: " " });
    expect(stream.finish()).toEqual({ content: "<" });
  });

  it("a call the parser refuses at the end has streamed (the contract's documented case), and the message keeps its text", () => {
    for (const [convention, text] of [
      ["hermes", 'Cut <tool_call>\n{"name": "f", "arguments": {"a": 1}}'],
      ["pythonic", "A list [f(x=1)] in prose, then more."],
      ["llama3-json", '{"name": "f", "parameters": {"a": 1}} and then text'],
    ] as [ToolCallConvention, string][]) {
      const { deltas, sum, message } = streamed(text, convention, [...text]);
      expect(sum.calls.map((c) => c.name), text).toEqual(["f"]);
      expect(message, text).toEqual({ role: "assistant", content: text });
      expect(replyDeltasMismatch(deltas, message), text).toMatch(/^streamed calls/);
    }
  });
});
