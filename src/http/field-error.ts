import type { z } from "zod";
import { ProtocolError } from "../../protocol";

/**
 * The one way a request body's validation failure becomes an error: a 400 `invalid_request`
 * whose message starts with the field's path (`messages[2].content: ...`), after `prefix` (a
 * path the schema did not see, e.g. `input[3]`). `deepest`: for a union, name the failing field
 * of the branch that got furthest rather than the union itself.
 *
 * @example throw fieldError(result.error) // invalid_request "tools[0].function.name: Required"
 */
export function fieldError(error: z.ZodError, options: { prefix?: string; deepest?: boolean } = {}): ProtocolError {
  const first = error.issues[0]!;
  const { path, message } = options.deepest ? deepestIssue(first) : { path: first.path, message: first.message };
  const where = `${options.prefix ?? ""}${formatPath(path)}`.replace(/^\./, "");
  return new ProtocolError("invalid_request", `${where || "body"}: ${message}`);
}

type Issue = z.core.$ZodIssue;

/**
 * The issue to report: inside a union (a string or blocks, a block's type), the branch that got
 * furthest into the value, so the message names the field that is wrong rather than the union.
 */
function deepestIssue(issue: Issue): { path: PropertyKey[]; message: string } {
  let best: { path: PropertyKey[]; message: string } | undefined;
  if (issue.code === "invalid_union") {
    for (const branch of issue.errors) {
      if (branch.length === 0) continue;
      const d = deepestIssue(branch[0]!);
      if (d.path.length > 0 && (!best || d.path.length > best.path.length)) best = d;
    }
  }
  return best ? { path: [...issue.path, ...best.path], message: best.message } : { path: [...issue.path], message: issue.message };
}

function formatPath(path: readonly PropertyKey[]): string {
  return path.map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("");
}
