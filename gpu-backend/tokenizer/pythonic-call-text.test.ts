import { describe, expect, it } from "vitest";
import { readPythonicCallList } from "./pythonic-call-text";

describe("readPythonicCallList", () => {
  it("reads a call list at an offset and gives the index past its closing bracket", () => {
    expect(readPythonicCallList('[get_weather(city="Paris", days=3)]', 0)).toEqual({
      calls: [{ name: "get_weather", arguments: '{"city": "Paris", "days": 3}' }],
      end: 35,
    });
    const text = 'Sure.\n\n[a(), b(x=[1, {"k": None}],)] trailing';
    const found = readPythonicCallList(text, 7)!;
    expect(found.calls).toEqual([
      { name: "a", arguments: "{}" },
      { name: "b", arguments: '{"x": [1, {"k": null}]}' },
    ]);
    expect(text.slice(found.end)).toBe(" trailing");
  });

  it("gives undefined, never throws, for anything that is not a call list", () => {
    const deep = `[f(x=${"[".repeat(100)}${"]".repeat(100)})]`;
    for (const text of ["", "[", "[]", "x[f()]", "[f()", "[f(]", "[f(x=1,,)]", "[f(x=1)(y=2)]", "[f(x={1: 2})]", "[f(True=1)]", "[f(x=inf)]", deep]) {
      expect(readPythonicCallList(text, 0), text.slice(0, 20)).toBeUndefined();
    }
    expect(readPythonicCallList(`[f(x=${"[".repeat(60)}${"]".repeat(60)})]`, 0)?.calls[0]?.name).toBe("f");
  });
});
