import { describe, expect, it } from "vitest";
import { ProtocolError } from "../../protocol/errors";
import { checkedSchema, UNSUPPORTED_KEYWORDS } from "./schema-check";
import { xgrammar } from "./xgrammar";

/** A schema using the keyword, and a value that violates it (valid otherwise). */
const VIOLATIONS: [string, Record<string, unknown>, string][] = [
  ["not", { not: { type: "string" } }, '"a"'],
  ["if", { if: { type: "string" }, then: { minLength: 2 } }, '"a"'],
  ["uniqueItems", { type: "array", uniqueItems: true }, "[1, 1]"],
  ["multipleOf", { type: "integer", multipleOf: 3 }, "4"],
  ["dependentRequired", { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, dependentRequired: { a: ["b"] } }, '{"a": 1}'],
  ["dependentSchemas", { type: "object", properties: { a: { type: "integer" } }, dependentSchemas: { a: { required: ["b"] } } }, '{"a": 1}'],
  ["contains", { type: "array", contains: { type: "integer" } }, '["a"]'],
];

describe("checkedSchema", () => {
  it("pins that xgrammar ignores the keywords called unsupported (re-evaluate the list when one fails)", async () => {
    const X = xgrammar();
    for (const [keyword, schema, bad] of VIOLATIONS) {
      expect(UNSUPPORTED_KEYWORDS as readonly string[]).toContain(keyword);
      const grammar = await X.Grammar.fromJSONSchema(JSON.stringify(schema), true, undefined, undefined, false);
      expect(await X.Testings.isGrammarAcceptString(grammar, bad), `${keyword} accepts ${bad}`).toBe(true);
      grammar.dispose();
    }
  });

  it("refuses an unsupported keyword under strict, naming it and where it is; drops it otherwise", () => {
    const schema = { type: "object", properties: { n: { type: "integer", multipleOf: 3 }, not: { type: "string" } }, required: ["n"] };
    expect(() => checkedSchema(schema, { strict: true, where: "w" })).toThrow(/"multipleOf" at #\/properties\/n/);
    const loose = checkedSchema(schema, { strict: false, where: "w" });
    expect(loose).toEqual({ type: "object", properties: { n: { type: "integer" }, not: { type: "string" } }, required: ["n"] }); // a property named "not" is no keyword
    expect(schema.properties.n).toHaveProperty("multipleOf"); // the caller's schema is untouched
  });

  it("answers invalid_schema for what is no JSON Schema, and turns bounded numbers into bounded integers", () => {
    for (const bad of [{ type: "strnig" }, { $ref: "#/$defs/missing" }]) {
      const e = (() => {
        try {
          checkedSchema(bad, { strict: true, where: "w" });
        } catch (err) {
          return err;
        }
      })();
      expect(e).toBeInstanceOf(ProtocolError);
      expect((e as ProtocolError).code).toBe("invalid_schema");
    }
    expect(checkedSchema({ type: "number", minimum: 0.5, exclusiveMaximum: 10 }, { strict: true, where: "w" })).toEqual({ type: "integer", minimum: 1, maximum: 9 });
    expect(checkedSchema({ type: "number" }, { strict: true, where: "w" })).toEqual({ type: "number" });
  });

  it("checks a schema text once: the same text again is the same result, strictness apart, refusals every time", () => {
    const schema = { type: "object", properties: { n: { type: "integer", multipleOf: 3 } } };
    const loose = checkedSchema(schema, { strict: false, where: "a" });
    expect(checkedSchema(structuredClone(schema), { strict: false, where: "b" })).toBe(loose);
    expect(loose).toEqual({ type: "object", properties: { n: { type: "integer" } } });
    for (const where of ["tools[0]", "tools[1]"]) expect(() => checkedSchema(schema, { strict: true, where })).toThrow(new RegExp(`^${where.replace(/[[\]]/g, "\\$&")}: the keyword "multipleOf"`));
    for (let i = 0; i < 2; i++) expect(() => checkedSchema({ type: "nope" }, { strict: false, where: "c" })).toThrow(/not a valid JSON Schema/);
  });
});
