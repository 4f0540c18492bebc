import { z } from "zod";
import { ProtocolError } from "../../protocol";
import { fieldError } from "./field-error";

/**
 * The Responses API's `tools` as the function tools a model here can call. Codex CLI (0.16x/0.17x)
 * sends more than functions:
 *
 * - `namespace` tools (`{type: "namespace", name, description, tools: [function tools]}`, Codex's
 *   MCP and dynamic tool groups): flattened into their function tools, each named
 *   `namespacedToolName(namespace, name)`. Codex expects a call of a namespaced tool back as a
 *   `function_call` item carrying `namespace` and the tool's own `name`, so the flat names are
 *   kept with what they stand for (`ResponsesTools.namespaced`), and a `function_call` input item
 *   that carries `namespace` is read back under the flat name (responses-items.ts).
 * - `custom` (freeform) tools (`{type: "custom", name, description, format?}`, e.g. Codex's
 *   `apply_patch` with a Lark grammar, or its code-mode `exec`): served as a function tool with one
 *   string parameter, `input` (`customToolParameters`; the grammar is shown to the model in the
 *   parameter's description, not enforced). Their calls go back as `custom_tool_call` items with
 *   that `input` (`ResponsesTools.custom`, responses-items.ts), and a `custom_tool_call` input item
 *   is read back as the function call it was.
 * - tools this server cannot run: OpenAI-hosted ones (`web_search`, `file_search`,
 *   `code_interpreter`, `computer_use_preview`, `image_generation`, `mcp`, `tool_search`, ...) and
 *   `local_shell` (a client tool whose calls are `local_shell_call` items with an exec action,
 *   which the edge does not produce). Dropped with a warning for most tenants; refused (400 naming
 *   the tool) for strict ones (`STRICT_TENANTS`, model-names.ts).
 */

/** A function tool as the Responses API sends it (top level or inside a namespace). */
export const functionTool = z
  .object({
    type: z.literal("function"),
    name: z.string().min(1),
    description: z.string().nullable().optional(),
    parameters: z.record(z.string(), z.unknown()).nullable().optional(),
    strict: z.boolean().nullable().optional(),
  })
  .loose();

export type FunctionTool = z.infer<typeof functionTool>;

const namespaceTool = z
  .object({
    type: z.literal("namespace"),
    name: z.string().min(1),
    description: z.string().nullable().optional(),
    tools: z.array(z.looseObject({ type: z.string() })),
  })
  .loose();

/** A namespaced function's flat name and what it stands for. */
export interface NamespacedTool {
  namespace: string;
  name: string;
}

const customTool = z
  .object({
    type: z.literal("custom"),
    name: z.string().min(1),
    description: z.string().nullable().optional(),
    format: z.object({ type: z.string(), syntax: z.string().optional(), definition: z.string().optional() }).loose().nullable().optional(),
  })
  .loose();

export interface ResponsesTools {
  /** Every function tool, namespaced ones under their flat names, custom ones as functions, in request order. */
  functions: FunctionTool[];
  /** Flat name -> namespace and name, for each function that came from a namespace tool. */
  namespaced: Record<string, NamespacedTool>;
  /** The (flat) names of the custom (freeform) tools, served as functions taking `{input: string}`. */
  custom: string[];
  /** One line per dropped tool, naming it (`tools[2]: "web_search" ...`). */
  warnings: string[];
}

/**
 * The flat name of a function inside a namespace: `<namespace>__<name>`, or `<namespace><name>`
 * when the namespace already ends with `_` (Codex's `mcp__server__`).
 *
 * @example namespacedToolName("github", "create_issue") // "github__create_issue"
 */
export function namespacedToolName(namespace: string, name: string): string {
  return namespace.endsWith("_") ? `${namespace}${name}` : `${namespace}__${name}`;
}

/**
 * The tools of a Responses request as function tools (above). `strict`: a tool that would be
 * dropped is a 400 `invalid_request` naming it instead. A wrong shape is a 400 naming the field.
 *
 * @example responsesTools([{ type: "namespace", name: "gh", tools: [{ type: "function", name: "pr" }] }, { type: "web_search" }], false)
 * // { functions: [{ type: "function", name: "gh__pr" }], namespaced: { gh__pr: { namespace: "gh", name: "pr" } }, warnings: ['tools[1]: "web_search" ...'] }
 */
export function responsesTools(tools: readonly { type: string; [key: string]: unknown }[], strict: boolean, at = "tools"): ResponsesTools {
  const out: ResponsesTools = { functions: [], namespaced: {}, custom: [], warnings: [] };
  tools.forEach((t, i) => {
    if (t.type === "function") {
      out.functions.push(parse(functionTool, t, `${at}[${i}]`));
    } else if (t.type === "namespace") {
      const ns = parse(namespaceTool, t, `${at}[${i}]`);
      ns.tools.forEach((inner, k) => {
        const where = `${at}[${i}].tools[${k}]`;
        if (inner.type !== "function" && inner.type !== "custom") throw new ProtocolError("invalid_request", `${where}.type: a namespace holds function and custom tools, not ${JSON.stringify(inner.type)}`);
        const f = inner.type === "function" ? parse(functionTool, inner, where) : customAsFunction(parse(customTool, inner, where));
        const flat = namespacedToolName(ns.name, f.name);
        out.functions.push({ ...f, name: flat });
        out.namespaced[flat] = { namespace: ns.name, name: f.name };
        if (inner.type === "custom") out.custom.push(flat);
      });
    } else if (t.type === "custom") {
      const f = customAsFunction(parse(customTool, t, `${at}[${i}]`));
      out.functions.push(f);
      out.custom.push(f.name);
    } else {
      const why = `${JSON.stringify(t.type)} tools are not run by this server (it answers function calls only)`;
      if (strict) throw new ProtocolError("invalid_request", `${at}[${i}].type: ${why}; refused for this tenant (STRICT_TENANTS)`);
      out.warnings.push(`${at}[${i}]: ${why}; dropped`);
    }
  });
  checkToolNames(out.functions);
  return out;
}

/**
 * Several groups of tools as one (the request's `tools`, then each `additional_tools` input item's):
 * a 400 when two share a name.
 */
export function mergeTools(groups: readonly ResponsesTools[]): ResponsesTools {
  const out: ResponsesTools = {
    functions: groups.flatMap((g) => g.functions),
    namespaced: Object.assign({}, ...groups.map((g) => g.namespaced)) as Record<string, NamespacedTool>,
    custom: groups.flatMap((g) => g.custom),
    warnings: groups.flatMap((g) => g.warnings),
  };
  checkToolNames(out.functions);
  return out;
}

function checkToolNames(functions: readonly FunctionTool[]): void {
  const seen = new Set<string>();
  for (const f of functions) {
    if (seen.has(f.name)) throw new ProtocolError("invalid_request", `tools: two tools are named ${JSON.stringify(f.name)} (a namespaced tool is named <namespace>__<name>)`);
    seen.add(f.name);
  }
}

/** A custom tool as the function it is served as (strict: its one `input` string, exactly). */
function customAsFunction(c: z.infer<typeof customTool>): FunctionTool {
  return { type: "function", name: c.name, ...(c.description ? { description: c.description } : {}), parameters: customToolParameters(c.format ?? undefined), strict: true };
}

/**
 * The parameters a custom tool is served with: one string, `input`, the tool's freeform input;
 * its format (a grammar's syntax and definition) is in the description, for the model to follow.
 *
 * @example customToolParameters(undefined) // { type: "object", properties: { input: { type: "string", description: "..." } }, required: ["input"], additionalProperties: false }
 */
export function customToolParameters(format: { type: string; syntax?: string; definition?: string } | undefined): Record<string, unknown> {
  const grammar = format?.definition ? ` It must follow this ${format.syntax ?? format.type} grammar:\n${format.definition}` : "";
  return {
    type: "object",
    properties: { input: { type: "string", description: `The tool's input, as free text.${grammar}` } },
    required: ["input"],
    additionalProperties: false,
  };
}

/**
 * What a reply's call of `name` is in Codex's terms: the namespace and the tool's own name for a
 * flattened namespaced tool, else just the name.
 *
 * @example namespacedCall("gh__pr", { gh__pr: { namespace: "gh", name: "pr" } }) // { namespace: "gh", name: "pr" }
 */
export function namespacedCall(name: string, namespaced: Readonly<Record<string, NamespacedTool>>): { name: string; namespace?: string } {
  const n = Object.prototype.hasOwnProperty.call(namespaced, name) ? namespaced[name] : undefined;
  return n ? { namespace: n.namespace, name: n.name } : { name };
}

function parse<T extends z.ZodType>(schema: T, raw: unknown, where: string): z.infer<T> {
  const r = schema.safeParse(raw);
  if (r.success) return r.data;
  throw fieldError(r.error, { prefix: where });
}
