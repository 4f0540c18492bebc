import { describe, expect, it } from "vitest";
import { ReplyTextSplitter } from "./reply-text";

function run(hasTools: boolean, tokens: string[]): { out: string[]; rest: string } {
  const split = new ReplyTextSplitter(hasTools);
  const out = tokens.map((t) => split.push(t));
  return { out, rest: split.finish() };
}

describe("ReplyTextSplitter", () => {
  it("passes every token through without tools, marker or not", () => {
    expect(run(false, ["a", "<tool_call>", "b"])).toEqual({ out: ["a", "<tool_call>", "b"], rest: "" });
  });

  it("holds back a tail that may start the marker, then releases it when it cannot", () => {
    const { out, rest } = run(true, ["Hello <tool", "s are", " fun"]);
    expect(out.join("") + rest).toBe("Hello <tools are fun");
    expect(out[0]).toBe("Hello "); // "<tool" could still become "<tool_call>"
  });

  it("never releases the marker or anything after it", () => {
    const { out, rest } = run(true, ["Sure.", " <tool_", "call>{\"name\":", "\"x\"}</tool_call>", " after"]);
    expect(out.join("") + rest).toBe("Sure. ");
  });

  it("releases the held tail at the end when no call came", () => {
    const { out, rest } = run(true, ["ok <"]);
    expect(out.join("")).toBe("ok ");
    expect(rest).toBe("<");
  });
});
