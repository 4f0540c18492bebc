/**
 * HTML built by a tagged template that escapes every interpolated value unless it is already
 * `Html` (the result of another `html` template or of `raw`). Transcript text is user content:
 * nothing reaches the page unescaped by accident.
 *
 * @example html`<td title="${name}">${count}</td>` // name "<b>" becomes &lt;b&gt;
 */
export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

export type HtmlValue = Html | string | number | boolean | null | undefined | readonly HtmlValue[];

export function html(strings: TemplateStringsArray, ...values: HtmlValue[]): Html {
  let out = strings[0]!;
  values.forEach((v, i) => {
    out += render(v) + strings[i + 1]!;
  });
  return new Html(out);
}

/** Markup the caller vouches for (constant strings of this module's callers only). */
export function raw(text: string): Html {
  return new Html(text);
}

/** Escapes text for HTML element content and double- or single-quoted attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => ESCAPES[ch]!);
}

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

function render(v: HtmlValue): string {
  if (v === null || v === undefined || v === false) return "";
  if (v instanceof Html) return v.text;
  if (Array.isArray(v)) return v.map(render).join("");
  return escapeHtml(String(v));
}
