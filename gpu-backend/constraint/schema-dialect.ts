import { Ajv, type Options } from "ajv";
import { Ajv2019 } from "ajv/dist/2019";
import { Ajv2020 } from "ajv/dist/2020";
import { ProtocolError } from "../../protocol/errors";

/** One ajv instance per dialect; ajv's own options for all. */
const OPTIONS: Options = { strict: false, validateFormats: false, allErrors: false };
let instances: { draft7: Ajv; v2019: Ajv2019; v2020: Ajv2020 } | undefined;

/** The dialects `$schema` names, by the text its URI contains. */
const DIALECTS = [
  { match: /draft\/2020-12/, name: "2020-12" },
  { match: /draft\/2019-09/, name: "2019-09" },
  { match: /draft-07/, name: "draft-07" },
  { match: /draft-06/, name: "draft-06" },
  { match: /draft-04/, name: "draft-04" },
] as const;

export interface SchemaDialect {
  /** The validator of the schema's dialect. */
  ajv: Ajv;
  /** A deep copy of the schema to check and compile: no top-level `$schema`, draft-04 read as draft-07. */
  schema: Record<string, unknown>;
  /** The dialect, for messages: "2020-12", "draft-07 (no $schema)", ... */
  name: string;
}

/**
 * The JSON Schema dialect a tool's or answer's schema is written in, by its `$schema`, and the
 * validator for it. Clients send every one: zod 4's `toJSONSchema` and the Vercel AI SDK write
 * 2020-12, older tools draft-07 or draft-04, many none.
 *
 * - `.../draft/2020-12/schema`: ajv's `Ajv2020`; `.../draft/2019-09/schema`: `Ajv2019`;
 * - draft-07 and draft-06 (a subset of it): `Ajv` (draft-07);
 * - draft-04: `Ajv` (draft-07) after its boolean `exclusiveMinimum`/`exclusiveMaximum` become the
 *   numbers draft-06 on writes (ajv 8 has no draft-04 meta-schema);
 * - none: draft-07 (what ajv checked before dialects were read);
 * - another URI: read as 2020-12 (the current dialect); a `$schema` that is no string: `invalid_schema`.
 *
 * The top-level `$schema` is dropped from the copy: ajv then checks it against its default
 * meta-schema (the dialect's), whatever spelling of the URI the client used (`http`, a trailing
 * `#`), and the grammar engine never sees it.
 *
 * @example dialectOf({ $schema: "https://json-schema.org/draft/2020-12/schema", type: "object" }, "tools[0] (Bash)").name // "2020-12"
 */
export function dialectOf(given: Record<string, unknown>, where: string): SchemaDialect {
  instances ??= { draft7: new Ajv(OPTIONS), v2019: new Ajv2019(OPTIONS), v2020: new Ajv2020(OPTIONS) };
  const { $schema: uri, ...rest } = structuredClone(given);
  if (uri !== undefined && typeof uri !== "string") throw new ProtocolError("invalid_schema", `${where}: $schema must be a string (a JSON Schema dialect's URI), got ${JSON.stringify(uri)}`);
  if (uri === undefined) return { ajv: instances.draft7, schema: rest, name: "draft-07 (no $schema)" };
  const name = DIALECTS.find((d) => d.match.test(uri))?.name;
  switch (name) {
    case "2019-09":
      return { ajv: instances.v2019, schema: rest, name };
    case "draft-07":
    case "draft-06":
      return { ajv: instances.draft7, schema: rest, name };
    case "draft-04":
      return { ajv: instances.draft7, schema: draft4Bounds(rest) as Record<string, unknown>, name };
    default:
      return { ajv: instances.v2020, schema: rest, name: name ?? `2020-12 (for ${JSON.stringify(uri)})` };
  }
}

/** Draft-04's `exclusiveMaximum: true` next to `maximum: n` is draft-06's `exclusiveMaximum: n` (same for minimum), at every depth. */
function draft4Bounds(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(draft4Bounds);
  if (typeof node !== "object" || node === null) return node;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(node)) out[k] = draft4Bounds(v);
  for (const [bound, exclusive] of [["maximum", "exclusiveMaximum"], ["minimum", "exclusiveMinimum"]] as const) {
    if (typeof out[exclusive] !== "boolean") continue;
    if (out[exclusive] === true && typeof out[bound] === "number") {
      out[exclusive] = out[bound];
      delete out[bound];
    } else delete out[exclusive];
  }
  return out;
}
