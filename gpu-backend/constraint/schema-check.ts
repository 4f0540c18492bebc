import { ProtocolError } from "../../protocol/errors";
import { dialectOf } from "./schema-dialect";

/**
 * JSON-schema keywords that xgrammar 0.1.27 compiles without enforcing (measured: its grammar
 * accepts a value that violates them; `schema-check.test.ts` pins each one, so a release that
 * starts enforcing one fails there). `allOf` is enforced only with a single subschema.
 */
export const UNSUPPORTED_KEYWORDS = ["not", "if", "then", "else", "uniqueItems", "multipleOf", "dependentRequired", "dependentSchemas", "contains", "minContains", "maxContains"] as const;

/**
 * A bounded `number` as a bounded `integer`: xgrammar enforces integer ranges but not number ranges
 * exactly (`maximum: 2` lets `2.5` through), so a number with bounds is generated as an integer
 * inside them: always valid, never fractional.
 */
function integerRange(s: Record<string, unknown>): Record<string, unknown> {
  if (s.type !== "number") return s;
  const num = (k: string) => (typeof s[k] === "number" ? (s[k] as number) : undefined);
  const [min, max, exMin, exMax] = [num("minimum"), num("maximum"), num("exclusiveMinimum"), num("exclusiveMaximum")];
  if (min === undefined && max === undefined && exMin === undefined && exMax === undefined) return s;
  const out: Record<string, unknown> = { ...s, type: "integer" };
  delete out.exclusiveMinimum;
  delete out.exclusiveMaximum;
  const lows = [min !== undefined ? Math.ceil(min) : undefined, exMin !== undefined ? Math.floor(exMin) + 1 : undefined].filter((v) => v !== undefined);
  const highs = [max !== undefined ? Math.floor(max) : undefined, exMax !== undefined ? Math.ceil(exMax) - 1 : undefined].filter((v) => v !== undefined);
  if (lows.length > 0) out.minimum = Math.max(...lows);
  if (highs.length > 0) out.maximum = Math.min(...highs);
  return out;
}

/** Keywords whose value is one subschema, a list of them, or a map of them (where to look deeper). */
const ONE = ["items", "additionalProperties", "propertyNames", "unevaluatedProperties", "unevaluatedItems", "not", "if", "then", "else", "contains"];
const LIST = ["prefixItems", "anyOf", "oneOf", "allOf", "items"];
const MAP = ["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"];

/**
 * Checks a schema a constraint will be compiled from and returns the schema to compile.
 *
 * - Checked against the meta-schema of its `$schema` (2020-12, 2019-09, draft-07, draft-06 and
 *   draft-04 read as draft-07, none: draft-07, another: 2020-12; `schema-dialect.ts`); not a
 *   valid JSON Schema there (or a `$ref` that does not resolve): `invalid_schema`, with ajv's
 *   message. The schema returned has no top-level `$schema` (and draft-04's boolean
 *   `exclusiveMinimum`/`exclusiveMaximum` are numbers).
 * - A `number` with bounds becomes an `integer` within them ({@link integerRange}).
 * - A keyword the grammar engine would silently ignore ({@link UNSUPPORTED_KEYWORDS}, `allOf`
 *   with more than one subschema): with `strict`, `unsupported_schema` naming the keyword and
 *   where it is; without, best effort: the keyword is dropped and the rest enforced.
 *
 * @example checkedSchema({ type: "object", properties: { n: { type: "integer", multipleOf: 2 } } }, { strict: false, where: "tools[0]" })
 * // { type: "object", properties: { n: { type: "integer" } } }
 */
export function checkedSchema(schema: Record<string, unknown>, o: { strict: boolean; where: string }): Record<string, unknown> {
  // An agent sends the same tools every turn: ajv's compile (~1.5 ms a schema, ~20 ms for 14
  // tools) runs once per schema text. Only successes are kept; they do not depend on `where`.
  const key = `${o.strict}:${JSON.stringify(schema)}`;
  const hit = checked.get(key);
  if (hit) {
    checked.delete(key);
    checked.set(key, hit);
    return hit;
  }
  const result = check(schema, o);
  checked.set(key, result);
  if (checked.size > CHECKED_ENTRIES) checked.delete(checked.keys().next().value!);
  return result;
}

/** Checked schemas kept (least recently used dropped first): the distinct tools of recent requests. */
const CHECKED_ENTRIES = 512;
const checked = new Map<string, Record<string, unknown>>();

function check(given: Record<string, unknown>, o: { strict: boolean; where: string }): Record<string, unknown> {
  const { ajv, schema, name } = dialectOf(given, o.where);
  let valid: boolean;
  try {
    valid = ajv.validateSchema(schema) as boolean;
  } catch (e) {
    throw new ProtocolError("invalid_schema", `${o.where}: not a valid JSON Schema (${name}): ${(e as Error).message}`);
  }
  if (!valid) throw new ProtocolError("invalid_schema", `${o.where}: not a valid JSON Schema (${name}): ${ajv.errorsText(ajv.errors, { dataVar: "schema" })}`);
  try {
    ajv.compile(schema);
  } catch (e) {
    throw new ProtocolError("invalid_schema", `${o.where}: not a valid JSON Schema (${name}): ${(e as Error).message}`);
  } finally {
    ajv.removeSchema(schema); // ajv caches by schema object: without this every request would stay
  }
  return walk(schema, "#", o) as Record<string, unknown>;
}

function walk(node: unknown, at: string, o: { strict: boolean; where: string }): unknown {
  if (typeof node !== "object" || node === null || Array.isArray(node)) return node;
  const s = integerRange(node as Record<string, unknown>);
  for (const keyword of Object.keys(s)) {
    const unsupported = (UNSUPPORTED_KEYWORDS as readonly string[]).includes(keyword) || (keyword === "allOf" && Array.isArray(s.allOf) && s.allOf.length > 1);
    if (unsupported) {
      if (o.strict)
        throw new ProtocolError("unsupported_schema", `${o.where}: the keyword "${keyword}" at ${at} is not supported by constrained decoding (unsupported: ${UNSUPPORTED_KEYWORDS.join(", ")}, allOf with several subschemas)`);
      delete s[keyword];
      continue;
    }
    const value = s[keyword];
    if (ONE.includes(keyword) && !Array.isArray(value)) s[keyword] = walk(value, `${at}/${keyword}`, o);
    else if (LIST.includes(keyword) && Array.isArray(value)) s[keyword] = value.map((v, i) => walk(v, `${at}/${keyword}/${i}`, o));
    else if (MAP.includes(keyword) && typeof value === "object" && value !== null)
      for (const [k, v] of Object.entries(value)) (value as Record<string, unknown>)[k] = walk(v, `${at}/${keyword}/${k}`, o);
  }
  return s;
}
