/**
 * The `x-agent-edge-warning` response header: what a request asked for that the edge dropped
 * (the parsers' `warnings`), one header value. Warnings quote what the client sent (a tool's
 * type), so the value is made safe for a header: printable ASCII only (anything else becomes
 * `?`), the warnings joined with `; `, cut to WARNING_HEADER_MAX characters.
 */

export const WARNING_HEADER = "x-agent-edge-warning";

/** Longest header value (the full list is in the response's metadata). */
export const WARNING_HEADER_MAX = 1024;

/**
 * The header value for a request's warnings, or undefined when there are none.
 *
 * @example warningHeader(['tools[2]: "web_search" tools are not run by this server ...; dropped']) // 'tools[2]: "web_search" tools are ...'
 */
export function warningHeader(warnings: readonly string[]): string | undefined {
  if (warnings.length === 0) return undefined;
  const value = warnings.join("; ").replace(/[^\x20-\x7e]/g, "?");
  return value.length > WARNING_HEADER_MAX ? `${value.slice(0, WARNING_HEADER_MAX - 3)}...` : value;
}
