import { describe, expect, it } from "vitest";
import { ReplyTextSplitter } from "./reply-text";

function run(hasTools: boolean, tokens: string[], hasCalls = false): { out: string[]; rest: string } {
  const split = new ReplyTextSplitter(hasTools);
  const out = tokens.map((t) => split.push(t));
  return { out, rest: split.finish(hasCalls) };
}

describe("ReplyTextSplitter", () => {
  it("passes every token through without tools, marker or not", () => {
    expect(run(false, ["a", "<tool_call>", "b"])).toEqual({ out: ["a", "<tool_call>", "b"], rest: "" });
  });

  it("holds back a tail that may start a marker, then releases it when it cannot", () => {
    const { out, rest } = run(true, ["Hello <tool", "s are", " fun"]);
    expect(out.join("") + rest).toBe("Hello <tools are fun");
    expect(out[0]).toBe("Hello "); // "<tool" could still become "<tool_call>"
  });

  it("never releases a call: text from the marker on stays back when the reply has calls", () => {
    for (const marker of ["<tool_call>", "<|tool_call|>", "<|python_tag|>"]) {
      const { out, rest } = run(true, ["Sure.", ` ${marker.slice(0, 4)}`, `${marker.slice(4)}{"name":`, '"x"}', " after"], true);
      expect(out.join("") + rest, marker).toBe("Sure. ");
    }
  });

  it("holds a reply that opens as a whole-reply JSON or pythonic call (Llama 3 JSON, Gemma)", () => {
    expect(run(true, ["  ", '{"name": "get', '_weather"}'], true)).toEqual({ out: ["", "", ""], rest: "" });
    expect(run(true, ["[get_weather(", 'city="Paris")]'], true)).toEqual({ out: ["", ""], rest: "" });
  });

  it("releases everything held at the end when the reply has no calls, so the stream equals the content", () => {
    expect(run(true, ["ok <"]).out.join("") + run(true, ["ok <"]).rest).toBe("ok <");
    const json = run(true, ['{"answer"', ": 42}"]);
    expect(json.out.join("")).toBe("");
    expect(json.rest).toBe('{"answer": 42}');
    const literal = run(true, ["see <tool_call> in the docs"]);
    expect(literal.out.join("") + literal.rest).toBe("see <tool_call> in the docs");
  });
});
