import { describe, expect, it } from "vitest";
import { z } from "zod";
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

/** Tools as clients write them: zod 4's `toJSONSchema` (what Claude Code and the Vercel AI SDK send: 2020-12), older dialects, none. */
const bashZod = z.object({ command: z.string().describe("The command to run"), timeout: z.number().max(600_000).optional(), description: z.string().optional() });
const todoZod = z.object({ todos: z.array(z.object({ content: z.string().min(1), status: z.enum(["pending", "in_progress", "completed"]) })) });

describe("checkedSchema: JSON Schema dialects", () => {
  it("checks zod 4's 2020-12 output (no 5xx: ajv's default class has no 2020-12 meta-schema), and drops the top-level $schema", () => {
    for (const schema of [z.toJSONSchema(bashZod), z.toJSONSchema(todoZod)] as Record<string, unknown>[]) {
      expect(schema.$schema).toBe("https://json-schema.org/draft/2020-12/schema");
      const checked = checkedSchema(schema, { strict: false, where: "tools[0] (Bash)" });
      expect(checked).not.toHaveProperty("$schema");
      expect(checked.properties).toBeDefined();
    }
    expect(checkedSchema(z.toJSONSchema(bashZod) as Record<string, unknown>, { strict: true, where: "w" }).properties).toMatchObject({ timeout: { type: "integer", maximum: 600_000 } });
  });

  it("checks 2019-09, draft-07, draft-06, draft-04 (boolean exclusive bounds) and schemas without $schema", () => {
    const where = "tools[1] (Read)";
    const v2019 = { $schema: "https://json-schema.org/draft/2019-09/schema", type: "object", $defs: { path: { type: "string" } }, properties: { path: { $ref: "#/$defs/path" } }, required: ["path"] };
    expect(checkedSchema(v2019, { strict: true, where })).toEqual({ type: "object", $defs: { path: { type: "string" } }, properties: { path: { $ref: "#/$defs/path" } }, required: ["path"] });
    const draft7 = { $schema: "http://json-schema.org/draft-07/schema#", type: "object", definitions: { n: { type: "integer" } }, properties: { n: { $ref: "#/definitions/n" } } };
    expect(checkedSchema(draft7, { strict: true, where })).not.toHaveProperty("$schema");
    expect(checkedSchema({ $schema: "http://json-schema.org/draft-06/schema#", type: "object", properties: { n: { type: "integer", exclusiveMinimum: 0 } } }, { strict: true, where }).properties).toEqual({ n: { type: "integer", exclusiveMinimum: 0 } });
    const draft4 = { $schema: "http://json-schema.org/draft-04/schema#", type: "object", properties: { n: { type: "number", minimum: 0, exclusiveMinimum: true, maximum: 5, exclusiveMaximum: false } } };
    expect(checkedSchema(draft4, { strict: true, where }).properties).toEqual({ n: { type: "integer", minimum: 1, maximum: 5 } });
    expect(checkedSchema({ type: "object", properties: { a: { type: "string" } } }, { strict: true, where })).toEqual({ type: "object", properties: { a: { type: "string" } } });
    // An unknown dialect URI is read as 2020-12 (its meta-schema wants prefixItems non-empty; draft-07's knows no such keyword).
    const other = { $schema: "https://example.com/my-dialect", type: "array", prefixItems: [{ type: "string" }] };
    expect(checkedSchema(other, { strict: false, where })).toEqual({ type: "array", prefixItems: [{ type: "string" }] });
    expect(() => checkedSchema({ ...other, prefixItems: [] }, { strict: false, where })).toThrow(/\(2020-12 \(for "https:\/\/example.com\/my-dialect"\)\): schema\/prefixItems/);
  });

  it("answers invalid_schema naming the tool for a broken schema in any dialect, and for a $schema that is no string", () => {
    const broken = [
      { $schema: "https://json-schema.org/draft/2020-12/schema", type: "object", properties: { command: { type: "strnig" } } },
      { $schema: "https://json-schema.org/draft/2019-09/schema", type: "object", required: "command" },
      { $schema: "http://json-schema.org/draft-07/schema#", type: "object", properties: { a: { $ref: "#/definitions/missing" } } },
      { $schema: 7, type: "object" },
    ];
    for (const schema of broken) {
      let error: unknown;
      try {
        checkedSchema(schema, { strict: false, where: "tools[3] (Bash)" });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(ProtocolError);
      expect((error as ProtocolError).code).toBe("invalid_schema");
      expect((error as ProtocolError).message).toMatch(/^tools\[3\] \(Bash\): /);
    }
  });
});
