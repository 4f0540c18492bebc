import { describe, expect, it } from "vitest";
import type { ChatMessage } from "../../protocol/messages";
import { canonicalizeTranscript } from "./canonicalize";
import { checkToolAnswers } from "./tool-answers";

const sys: ChatMessage = { role: "system", content: "You are an agent." };
const user = (content: string): ChatMessage => ({ role: "user", content });
const calls = (...ids: string[]): ChatMessage => ({ role: "assistant", content: null, tool_calls: ids.map((id) => ({ id, type: "function", function: { name: "ls", arguments: "{}" } })) });
const answer = (id: string | undefined): ChatMessage => ({ role: "tool", content: "a b", ...(id !== undefined ? { tool_call_id: id } : {}) });

/** The error message checkToolAnswers throws, or undefined when it accepts. */
function refusal(messages: ChatMessage[], firstNew?: number): string | undefined {
  try {
    checkToolAnswers(messages, firstNew);
    return undefined;
  } catch (e) {
    expect(e).toMatchObject({ name: "ProtocolError", code: "invalid_request", httpStatus: 400 });
    return (e as Error).message;
  }
}

describe("checkToolAnswers", () => {
  it("accepts transcripts whose tool messages answer the calls they follow", () => {
    expect(refusal([sys, user("hi")])).toBeUndefined();
    expect(refusal([sys, user("hi"), calls("a"), answer("a"), user("more"), calls("b", "c"), answer("c"), answer("b")])).toBeUndefined();
    // Two turns reusing one id (some servers number calls per reply): each answers the call it follows.
    expect(refusal([user("hi"), calls("call_0"), answer("call_0"), calls("call_0"), answer("call_0")])).toBeUndefined();
    // A call left unanswered is not this check's concern.
    expect(refusal([user("hi"), calls("a", "b"), answer("a"), user("next")])).toBeUndefined();
  });

  it("refuses a tool message that answers no call, naming its index and the id", () => {
    expect(refusal([sys, user("hi"), { role: "assistant", content: "ok" }, answer("x")])).toBe(
      `messages[3]: tool message answers tool_call_id "x", which no earlier assistant message's tool_calls names`,
    );
    expect(refusal([answer("x")])).toMatch(/^messages\[0\]: tool message answers tool_call_id "x", which no earlier/);
    expect(refusal([user("hi"), calls("a"), answer("b")])).toMatch(/^messages\[2\]: tool message answers tool_call_id "b", which no earlier/);
  });

  it("refuses a tool message without tool_call_id", () => {
    expect(refusal([user("hi"), calls("a"), answer(undefined)])).toBe("messages[2]: tool message has no tool_call_id");
  });

  it("refuses an answer to an older call that does not follow it", () => {
    expect(refusal([user("hi"), calls("a"), answer("a"), user("go on"), answer("a")])).toBe(
      `messages[4]: tool message answers tool_call_id "a" of messages[1], but messages[3] (role user) comes between: a tool message must follow its assistant message with only tool messages between them`,
    );
    expect(refusal([user("hi"), calls("a"), answer("a"), calls("b"), answer("a")])).toMatch(
      /^messages\[4\]: tool message answers tool_call_id "a" of messages\[1\], but it follows messages\[3\], whose tool_calls are "b"/,
    );
  });

  it("checks only the messages from firstNew on, naming them as the client sent them", () => {
    const stored = [sys, user("hi"), calls("call_0")];
    // An append turn answering a stored call.
    expect(refusal([...stored, answer("call_0")], stored.length)).toBeUndefined();
    expect(refusal([...stored, answer("call_0"), answer("call_9")], stored.length)).toMatch(/^messages\[1\]: tool message answers tool_call_id "call_9", which no earlier/);
    expect(refusal([...stored, user("x"), answer("call_0")], stored.length)).toMatch(/^messages\[1\]: tool message answers tool_call_id "call_0" of stored message 2, but messages\[0\] \(role user\) comes between/);
    // A stored message that breaks the rule is not the new turn's fault.
    expect(refusal([user("hi"), answer("old"), { role: "assistant", content: "ok" }, user("next")], 2)).toBeUndefined();
  });

  it("is checked on the client's ids: a transcript valid before canonicalization stays valid after it", () => {
    // Ids that collide with the canonical ones of other calls.
    const transcript = [user("hi"), calls("call_1"), answer("call_1"), calls("x"), answer("x"), calls("call_0", "call_2"), answer("call_2"), answer("call_0")];
    expect(refusal(transcript)).toBeUndefined();
    expect(refusal(canonicalizeTranscript(transcript).messages)).toBeUndefined();
    // One id for two calls, the second already canonical ("call_1"): valid as sent. (canonicalize
    // maps the second answer to the first call's canonical id, which is why planTurn checks the
    // client's ids, not the canonical ones.)
    expect(refusal([user("hi"), calls("call_1"), answer("call_1"), calls("call_1"), answer("call_1")])).toBeUndefined();
  });
});
