import { describe, expect, it } from "vitest";
import { canonicalizeTranscript, canonicalJson, canonicalJsonText, restoreIds } from "./canonicalize";
import { explainBreak, formatBreakHeader, PREFIX_BREAK_CAUSES, type PrefixBreakCause } from "./prefix-break";
import type { ChatMessage, ToolDefinition } from "../../protocol/messages";

const sys = (content: string): ChatMessage => ({ role: "system", content });
const user = (content: string): ChatMessage => ({ role: "user", content });
const call = (id: string, args: string): ChatMessage => ({ role: "assistant", content: null, tool_calls: [{ id, type: "function", function: { name: "search", arguments: args } }] });
const result = (id: string, content: string): ChatMessage => ({ role: "tool", tool_call_id: id, content });
const tool = (description: string): ToolDefinition => ({ type: "function", function: { name: "search", description, parameters: { type: "object", properties: { q: { type: "string" } } } } });

const SYSTEM = "You are a coding agent. Today is 2026-12-02T10:31:07Z. Be brief.";
const base: ChatMessage[] = [sys(SYSTEM), user("Find the bug."), call("call_8f3a9c2e1b7d4f60", '{"q":"bug","limit":5}'), result("call_8f3a9c2e1b7d4f60", "3 hits"), user("Fix it.")];

/** The stored transcript after one more turn: `base` plus the model's reply. */
const replied: ChatMessage[] = [...base, { role: "assistant", content: "Done." }];

/** A coding agent's system prompt with the volatile blocks clients put early (volatile-blocks.ts). */
const AGENT_SYSTEM = [
  "You are a coding agent.",
  "<env>\nWorking directory: /home/ana/shop\nIs directory a git repo: Yes\nPlatform: linux\nToday's date: 2026-12-06\n</env>",
  "gitStatus: This is the git status at the start of the conversation.\nCurrent branch: main\n\nStatus:\nM src/cart.ts\n\nRecent commits:\n1a2b3c4 Fix totals",
  "Be brief.",
].join("\n");
const agent: ChatMessage[] = [sys(AGENT_SYSTEM), user("Add a test.")];
const agentWith = (from: string, to: string): ChatMessage[] => [sys(AGENT_SYSTEM.replace(from, to)), user("Add a test.")];

/** One example per cause (docs/prefix-breaks.md shows the same ones); stored is `base` unless given. */
const cases: { cause: PrefixBreakCause; stored?: ChatMessage[]; incoming: ChatMessage[]; tools?: ToolDefinition[]; expect: Record<string, unknown> }[] = [
  { cause: "none", incoming: [...base, { role: "assistant", content: "Done." }], expect: {} },
  { cause: "timestamp", incoming: [sys(SYSTEM.replace("10:31:07", "10:32:55")), ...base.slice(1)], expect: { message: 0, field: "content", offset: SYSTEM.indexOf("10:31:07") + 4 } },
  { cause: "system-prompt-changed", incoming: [sys(SYSTEM.replace("Be brief.", "Be thorough.")), ...base.slice(1)], expect: { message: 0, field: "content", offset: SYSTEM.indexOf("brief") } },
  { cause: "random-id", incoming: [...base.slice(0, 2), call("call_0b1c2d3e4f5a6b7c", '{"q":"bug","limit":5}'), result("call_0b1c2d3e4f5a6b7c", "3 hits"), base[4]!], expect: { message: 2, field: "tool_calls[0].id" } },
  { cause: "json-serialization", incoming: [...base.slice(0, 2), call("call_8f3a9c2e1b7d4f60", '{"limit": 5, "q": "bug"}'), ...base.slice(3)], expect: { message: 2, field: "tool_calls[0].arguments", offset: 2 } },
  { cause: "inserted-before", incoming: [base[0]!, user("Context: retrieved doc #4"), ...base.slice(1)], expect: { message: 1, field: "messages" } },
  { cause: "regenerate", stored: replied, incoming: base, expect: { message: 5, field: "messages", offset: 0, before: "Done.", after: "" } },
  { cause: "removed-or-truncated", incoming: [base[0]!, ...base.slice(2)], expect: { message: 1 } },
  { cause: "removed-or-truncated", incoming: [...base.slice(0, 3), result("call_8f3a9c2e1b7d4f60", "3 h")], expect: { message: 3, field: "content", offset: 3 } },
  { cause: "tools-changed", incoming: base, tools: [tool("Search the code base (v2)")], expect: { field: "tools" } },
  { cause: "assistant-edited", incoming: [...base.slice(0, 2), call("call_8f3a9c2e1b7d4f60", '{"q":"bugs","limit":5}'), ...base.slice(3)], expect: { message: 2, field: "tool_calls[0].arguments", offset: 9 } },
  { cause: "other", incoming: [...base.slice(0, 1), user("Find the other bug."), ...base.slice(2)], expect: { message: 1, field: "content", offset: 9 } },
  { cause: "date", stored: agent, incoming: agentWith("2026-12-06", "2026-12-07"), expect: { message: 0, field: "content", offset: AGENT_SYSTEM.indexOf("2026-12-06") + 9 } },
  { cause: "cwd", stored: agent, incoming: agentWith("/home/ana/shop", "/home/ana/cart"), expect: { message: 0, field: "content", offset: AGENT_SYSTEM.indexOf("/home/ana/shop") + 10 } },
  { cause: "git-status", stored: agent, incoming: agentWith("M src/cart.ts\n", "M src/cart.ts\n?? notes.md\n"), expect: { message: 0, field: "content", offset: AGENT_SYSTEM.indexOf("M src/cart.ts\n") + 14 } },
  { cause: "env", stored: agent, incoming: agentWith("Platform: linux", "Platform: darwin"), expect: { message: 0, field: "content", offset: AGENT_SYSTEM.indexOf("Platform: linux") + 10 } },
];

describe("prefix-break explainer", () => {
  for (const c of cases) {
    it(`classifies ${c.cause}${c.expect.field ? ` (${c.expect.field})` : ""}`, () => {
      const b = explainBreak(c.stored ?? base, c.incoming, [tool("Search the code base")], c.tools ?? [tool("Search the code base")]);
      expect(b.cause).toBe(c.cause);
      expect(b).toMatchObject(c.expect);
      if (b.cause !== "none") expect(formatBreakHeader(b).startsWith(`${c.cause}`)).toBe(true);
    });
  }

  it("covers every cause with an example", () => {
    expect(new Set(cases.map((c) => c.cause))).toEqual(new Set(PREFIX_BREAK_CAUSES));
  });

  it("shows the first differing text side by side", () => {
    const b = explainBreak(base, [sys(SYSTEM.replace("10:31:07", "10:32:55")), ...base.slice(1)], [], []);
    expect(b.before).toContain("10:31:07");
    expect(b.after).toContain("10:32:55");
    expect(formatBreakHeader({ ...b, uncachedFromToken: 17 })).toBe(`timestamp; message=0; field=content; offset=${SYSTEM.indexOf("10:31:07") + 4}; uncached_from_token=17`);
  });

  const variants: [PrefixBreakCause, string, string][] = [
    ["date", "Current date: Dec 2, 2026.", "Current date: Dec 3, 2026."],
    ["date", "Today's date is 2026-12-06.", "Today's date is 2026-12-07."],
    ["date", "It is Sun, 6 Dec 2026.", "It is Mon, 7 Dec 2026."],
    ["timestamp", "Current time: Dec 2, 2026, 10:31.", "Current time: Dec 2, 2026, 10:45."],
    ["timestamp", "Today is 2026-12-02T10:31:07Z.", "Today is 2026-12-03T10:31:07Z."],
    ["cwd", "<environment_context>\n  <cwd>/repo/a</cwd>\n  <shell>zsh</shell>\n</environment_context>", "<environment_context>\n  <cwd>/repo/b</cwd>\n  <shell>zsh</shell>\n</environment_context>"],
    ["env", "<environment_context>\n  <cwd>/repo</cwd>\n  <shell>zsh</shell>\n</environment_context>", "<environment_context>\n  <cwd>/repo</cwd>\n  <shell>bash</shell>\n</environment_context>"],
    ["cwd", "Primary working directory: /w/one\nok", "Primary working directory: /w/two\nok"],
    ["git-status", "gitStatus: snapshot\nCurrent branch: main\n\nRecent commits:\n1a2b3c4 one\n\nBe brief.", "gitStatus: snapshot\nCurrent branch: main\n\nRecent commits:\n9f8e7d6 two\n\nBe brief."],
    // As Claude Code 2.1 and Qwen Code 0.24 write them (test/clients fixtures).
    ["cwd", "# Environment\nYou have been invoked in the following environment: \n - Primary working directory: /tmp/a/work\n - Platform: linux\n", "# Environment\nYou have been invoked in the following environment: \n - Primary working directory: /tmp/b/work\n - Platform: linux\n"],
    ["env", "# Environment\nYou have been invoked in the following environment: \n - Primary working directory: /w\n - Is a git repository: true\n\n# Tone", "# Environment\nYou have been invoked in the following environment: \n - Primary working directory: /w\n - Is a git repository: false\n\n# Tone"],
    ["git-status", "<system-reminder>\n# gitStatus\nThis is the git status at the start of the conversation.\nCurrent branch: main\n\nStatus:\n(clean)\n</system-reminder>", "<system-reminder>\n# gitStatus\nThis is the git status at the start of the conversation.\nCurrent branch: main\n\nStatus:\nM a.ts\n</system-reminder>"],
    ["cwd", "I'm currently working in the directory: /tmp/qwen-a/work\nok", "I'm currently working in the directory: /tmp/qwen-b/work\nok"],
    ["date", "Today's date is Sunday, December 6, 2026.\nMy operating system is: linux", "Today's date is Monday, December 7, 2026.\nMy operating system is: linux"],
    ["other", "# Environment\n - Platform: linux\n\n# Tone\nUse tabs.", "# Environment\n - Platform: linux\n\n# Tone\nUse spaces."],
    // A change that runs past the block is not the block's.
    ["other", "cwd: /a\nUse tabs.", "cwd: /b\nUse spaces."],
    ["other", "gitStatus: snapshot\nCurrent branch: main\n\nUse tabs.", "gitStatus: snapshot\nCurrent branch: main\n\nUse spaces."],
    ["timestamp", "now=1764670000123 ok", "now=1764670099999 ok"],
    ["timestamp", "at 10:32 PM sharp", "at 11:05 PM sharp"],
    ["random-id", "session 5b0c1f3e-2d4a-4c7e-9f10-3a2b1c0d9e8f started", "session 0f9e8d7c-6b5a-4f3e-8d2c-1b0a9f8e7d6c started"],
    ["random-id", "nonce=9f8e7d6c5b4a3f2e end", "nonce=0a1b2c3d4e5f6a7b end"],
    ["other", "Use tabs.", "Use spaces."],
  ];
  for (const [cause, was, now] of variants) {
    it(`classifies ${JSON.stringify(was)} -> ${JSON.stringify(now)} as ${cause}`, () => {
      expect(explainBreak([user(was)], [user(now)], [], []).cause).toBe(cause);
    });
  }

  it("tells a regenerate (the stored transcript minus its last reply) from other shorter transcripts", () => {
    const reply = (content: string | null, calls?: ChatMessage["tool_calls"]): ChatMessage => ({ role: "assistant", content, ...(calls ? { tool_calls: calls } : {}) });
    // A reply of tool calls only, resent without it.
    const withCall = [...base, reply(null, [{ id: "call_1", type: "function", function: { name: "search", arguments: "{}" } }])];
    expect(explainBreak(withCall, base, [], [])).toMatchObject({ cause: "regenerate", message: 5, before: "" });
    // Two messages short, or short of a message that is not an assistant reply: removed-or-truncated.
    expect(explainBreak(replied, base.slice(0, 4), [], []).cause).toBe("removed-or-truncated");
    expect(explainBreak(base, base.slice(0, 4), [], []).cause).toBe("removed-or-truncated");
    // One message short, but the last user message was edited: the edit is the break.
    expect(explainBreak(replied, [...base.slice(0, 4), user("Fix it now.")], [], []).cause).toBe("other");
    // Canonicalization makes a resend with fresh ids identical first (planTurn compares the canonical form).
    const resent = canonicalizeTranscript([...base.slice(0, 2), call("toolu_01XyZ", '{ "limit": 5, "q": "bug" }'), result("toolu_01XyZ", "3 hits"), base[4]!]).messages;
    expect(explainBreak([...canonicalizeTranscript(base).messages, replied[5]!], resent, [], []).cause).toBe("regenerate");
  });

  const edits: [string, ChatMessage, ChatMessage, Record<string, unknown>][] = [
    ["reasoning stripped", { role: "assistant", content: "<think>\nRead it first.\n</think>\n\nDone." }, { role: "assistant", content: "Done." }, { cause: "assistant-edited", field: "content", offset: 0 }],
    ["reply rewritten", { role: "assistant", content: "Use tabs." }, { role: "assistant", content: "Use spaces." }, { cause: "assistant-edited", field: "content", offset: 4 }],
    ["tool renamed", call("call_1", "{}"), { ...call("call_1", "{}"), tool_calls: [{ id: "call_1", type: "function", function: { name: "grep", arguments: "{}" } }] }, { cause: "assistant-edited", field: "tool_calls[0].name" }],
    ["tool call added", call("call_1", "{}"), { ...call("call_1", "{}"), tool_calls: [...call("call_1", "{}").tool_calls!, ...call("call_2", "{}").tool_calls!] }, { cause: "assistant-edited", field: "tool_calls[1]" }],
    // The more specific causes still win on assistant messages.
    ["reply cut short", { role: "assistant", content: "Done. Anything else?" }, { role: "assistant", content: "Done." }, { cause: "removed-or-truncated", field: "content" }],
    ["arguments re-serialized", call("call_1", '{"a":1,"b":2}'), call("call_1", '{"b": 2, "a": 1}'), { cause: "json-serialization" }],
    ["call id changed", call("call_8f3a9c2e1b7d4f60", "{}"), call("call_0b1c2d3e4f5a6b7c", "{}"), { cause: "random-id" }],
    ["timestamp in the reply", { role: "assistant", content: "It is 10:31 now." }, { role: "assistant", content: "It is 10:45 now." }, { cause: "timestamp" }],
    // A message whose role changed is no assistant edit.
    ["role changed", { role: "assistant", content: "Hi." }, user("Hi."), { cause: "other", field: "role" }],
  ];
  for (const [what, was, now, expected] of edits) {
    it(`classifies an assistant message's change (${what}) as ${String(expected.cause)}`, () => {
      expect(explainBreak([user("q"), was, user("next")], [user("q"), now, user("next")], [], [])).toMatchObject({ message: 1, ...expected });
    });
  }

  it("tells key-order changes in tool definitions from real changes", () => {
    const reordered: ToolDefinition[] = [{ function: { parameters: { properties: { q: { type: "string" } }, type: "object" }, description: "Search the code base", name: "search" }, type: "function" }];
    expect(explainBreak(base, base, [tool("Search the code base")], reordered).cause).toBe("json-serialization");
  });
});

describe("safe canonicalization", () => {
  it("gives a client's random tool-call ids and key orders one canonical form", () => {
    const a = canonicalizeTranscript(base);
    const b = canonicalizeTranscript([...base.slice(0, 2), call("toolu_01XyZ", '{ "limit": 5, "q": "bug" }'), result("toolu_01XyZ", "3 hits"), base[4]!]);
    expect(b.messages).toEqual(a.messages);
    expect(a.messages[2]!.tool_calls![0]!.id).toBe("call_0");
    expect(a.messages[3]!.tool_call_id).toBe("call_0");
    expect(a.messages[2]!.tool_calls![0]!.function.arguments).toBe('{"limit":5,"q":"bug"}');
    expect(b.repaired).toEqual({ toolCallIds: 1, jsonArguments: 1 });
    expect(restoreIds(b.messages[2]!, b.idMap).tool_calls![0]!.id).toBe("toolu_01XyZ");
  });

  it("a client id reused by a later call maps that call's result to that call, not the first", () => {
    const c = canonicalizeTranscript([base[0]!, base[1]!, call("call_1", "{}"), result("call_1", "first"), call("call_1", "{}"), result("call_1", "second")]);
    expect(c.messages.map((m) => m.tool_calls?.[0]?.id ?? m.tool_call_id)).toEqual([undefined, undefined, "call_0", "call_0", "call_1", "call_1"]);
  });

  it("leaves canonical transcripts and non-JSON arguments alone", () => {
    const once = canonicalizeTranscript(base).messages;
    expect(canonicalizeTranscript(once).repaired).toEqual({ toolCallIds: 0, jsonArguments: 0 });
    expect(canonicalJsonText("not json {")).toBe("not json {");
    expect(canonicalJson({ b: [{ d: 1, c: 2 }], a: null })).toBe('{"a":null,"b":[{"c":2,"d":1}]}');
  });

  it("never rewrites a value: numbers a double cannot hold and duplicate keys leave the text alone", () => {
    // Valid JSON a constrained model does write (the grammar allows any exponent): JSON.parse makes
    // these Infinity, a rounded integer and +0, which JSON.stringify writes as null, other digits, 0.
    for (const text of ['{ "amount": 67722.3e44, "to": "EUR" }', '{"b": -331E68577055376, "a": 1}', '{"id": 12345678901234567890}', '{"x": -0}', '{"a": 1, "a": 2}']) {
      expect(canonicalJsonText(text), text).toBe(text);
    }
    // Reordering and respacing still happen, with numbers, strings and escapes kept; a number
    // written other than as JavaScript writes it (1e2, 1.50) is the client's spelling: kept too.
    expect(canonicalJsonText('{ "z": [1.5, -2000, "x\\"y"], "a": {"d": 0.1, "c": "1"} }')).toBe('{"a":{"c":"1","d":0.1},"z":[1.5,-2000,"x\\"y"]}');
    expect(canonicalJsonText('{"b": 1e2, "a": 1.50}')).toBe('{"b": 1e2, "a": 1.50}');
  });
});
