import { describe, expect, it } from "vitest";
import { canonicalJsonText } from "./canonicalize";
import { JsonCompactor, compactJsonText } from "./compact-json";

/** Every way to cut `text` into pieces of 1..3 characters (deterministic, by a seed). */
function pieces(text: string, seed: number): string[] {
  const out: string[] = [];
  let x = seed;
  for (let i = 0; i < text.length; ) {
    x = (x * 1103515245 + 12345) % 2147483648;
    const n = 1 + (x % 3);
    out.push(text.slice(i, i + n));
    i += n;
  }
  return out;
}

const SAMPLES = [
  '{ "path" : "src/a b.ts",\n  "limit": 5 }',
  '{"q": "say \\"hi\\" , { ok }", "tags": [ "a" , "b" ], "n": -1.5e3, "x": null}',
  '  [ 1, { "b" : true , "a" : false } ]  ',
  '{"nested": {"z": {"y": [ ] }, "a": "\\\\"}}',
  "ls -la /tmp , now",
  "",
];

describe("JsonCompactor", () => {
  it("compacts valid JSON as JSON.stringify would, keeping the model's key order", () => {
    for (const text of [SAMPLES[0]!, SAMPLES[2]!, SAMPLES[3]!]) {
      expect(compactJsonText(text)).toBe(JSON.stringify(JSON.parse(text)));
    }
    // Numbers stay as written (JSON.stringify would write -1500).
    expect(compactJsonText(SAMPLES[1]!)).toBe('{"q":"say \\"hi\\" , { ok }","tags":["a","b"],"n":-1.5e3,"x":null}');
    expect(compactJsonText('{ "b": 1, "a": 2 }')).toBe('{"b":1,"a":2}');
  });

  it("gives the same text piece by piece as on the whole, however the text is cut", () => {
    for (const text of SAMPLES) {
      for (let seed = 1; seed <= 20; seed++) {
        const c = new JsonCompactor();
        expect(pieces(text, seed).map((p) => c.push(p)).join(""), `${text} / ${seed}`).toBe(compactJsonText(text));
      }
    }
  });

  it("never rewrites a value: text that is not a JSON object or array passes unchanged, and whitespace between two words stays", () => {
    expect(compactJsonText("ls -la /tmp , now")).toBe("ls -la /tmp , now");
    expect(compactJsonText("  plain ")).toBe("  plain ");
    expect(compactJsonText("[1 2, tru e]")).toBe("[1 2,tru e]");
  });

  it("canonicalizes to the same stored arguments as the model's text did, where canonical JSON rewrites nothing", () => {
    for (const text of [SAMPLES[0]!, SAMPLES[2]!, SAMPLES[3]!]) expect(canonicalJsonText(compactJsonText(text))).toBe(canonicalJsonText(text));
    // -1.5e3 would be rewritten: canonical JSON leaves the compacted text as it is.
    expect(canonicalJsonText(compactJsonText(SAMPLES[1]!))).toBe(compactJsonText(SAMPLES[1]!));
  });
});
