import { z } from "zod";
import { ProtocolError } from "../../protocol";
import { cacheControl } from "./cache-control";
import { fieldError } from "./field-error";

/**
 * A Messages request's `tools`: custom tools, validated one by one; Anthropic's server tools
 * dropped with a warning (refused for a strict tenant); other typed tools refused.
 */

export const tool = z
  .object({
    type: z
      .literal("custom", { error: (iss) => `tool type ${JSON.stringify(iss.input)} is not supported: only custom tools ({name, description, input_schema})` })
      .nullable()
      .optional(),
    name: z.string().min(1),
    description: z.string().optional(),
    input_schema: z.object({ type: z.literal("object") }).loose(),
    cache_control: cacheControl,
    strict: z.boolean().optional(),
  })
  .loose();

export type MessagesTool = z.infer<typeof tool>;

/** Anthropic's server tools (run by Anthropic's API, not by the client): dropped with a warning, refused when strict. */
const SERVER_TOOL = /^(web_search|web_fetch|code_execution|tool_search_tool_regex|tool_search_tool_bm25)_\d{8}$/;

/**
 * The custom tools of a request, validated one by one (a 400 names the field); Anthropic's server
 * tools dropped with a warning each (refused when `strict`); any other typed tool (Anthropic-defined
 * client tools: `bash_*`, `text_editor_*`, ...) refused. Undefined without `tools`.
 */
export function servedTools(raw: readonly { type?: string | null }[] | undefined, strict: boolean): { tools: MessagesTool[] | undefined; warnings: string[] } {
  const warnings: string[] = [];
  if (raw === undefined) return { tools: undefined, warnings };
  const tools: MessagesTool[] = [];
  raw.forEach((t, i) => {
    if (typeof t.type === "string" && SERVER_TOOL.test(t.type)) {
      const why = `${JSON.stringify(t.type)} is a server tool, which this server does not run`;
      if (strict) throw new ProtocolError("invalid_request", `tools[${i}].type: ${why}; refused for this tenant (STRICT_TENANTS)`);
      warnings.push(`tools[${i}]: ${why}; dropped`);
      return;
    }
    const r = tool.safeParse(t);
    if (!r.success) throw fieldError(r.error, { prefix: `tools[${i}]`, deepest: true });
    tools.push(r.data);
  });
  return { tools, warnings };
}
