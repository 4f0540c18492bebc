import { html, raw, type Html } from "./html";

/** Segment colours, shared by the charts, legends and tables. */
export const COLORS = { cached: "#2e7d32", computed: "#ef6c00", completion: "#1565c0", break: "#c62828", full: "#8e6d00", pause: "#9e9e9e", ttft: "#0d47a1" } as const;

const CSS = `
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "Liberation Sans", sans-serif; margin: 0; color: #1d1d1f; background: #fafafa; }
main { max-width: 1320px; margin: 0 auto; padding: 16px 16px 48px; }
h1 { font-size: 20px; margin: 8px 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; }
code, pre { font: 12.5px/1.4 ui-monospace, "DejaVu Sans Mono", "Liberation Mono", monospace; }
a { color: #0b57d0; text-decoration: none; } a:hover { text-decoration: underline; }
.meta { color: #555; } .meta span { margin-right: 14px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin-top: 14px; }
.card { background: #fff; border: 1px solid #e2e2e2; border-radius: 8px; padding: 8px 14px; min-width: 140px; }
.card b { display: block; font-size: 20px; } .card small { color: #666; }
.panel { background: #fff; border: 1px solid #e2e2e2; border-radius: 8px; padding: 10px 12px; overflow-x: auto; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { text-align: right; padding: 4px 8px; border-bottom: 1px solid #eee; white-space: nowrap; }
th { background: #f3f3f3; font-weight: 600; } td.l, th.l { text-align: left; }
table.turns { font-size: 13px; } table.turns th, table.turns td { padding: 4px 5px; } table.turns th { white-space: normal; vertical-align: bottom; } table.turns .miss { display: block; font-size: 12px; }
td.wrap { white-space: normal; min-width: 110px; max-width: 170px; }
.legend span { margin-right: 14px; } .sw { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px; vertical-align: -1px; }
.marker { font-weight: 600; } .marker.break { color: ${COLORS.break}; } .marker.full { color: ${COLORS.full}; }
.lease { border: 1px solid #888; border-radius: 10px; padding: 0 6px; font-size: 12px; }
.diff { display: grid; grid-template-columns: 1fr 1fr; gap: 8px; }
.diff pre { margin: 0; padding: 8px; background: #f6f6f6; border-radius: 6px; white-space: pre-wrap; word-break: break-word; max-height: 260px; overflow: auto; }
.diff h4 { margin: 0 0 4px; font-size: 12px; color: #555; }
.break-detail { border-left: 4px solid ${COLORS.break}; background: #fff; padding: 8px 12px; margin: 8px 0; border-radius: 0 6px 6px 0; }
.msg { border-top: 1px solid #eee; padding: 4px 0; } .msg pre { margin: 2px 0 0; white-space: pre-wrap; word-break: break-word; }
.role { font-weight: 600; color: #555; }
.note { color: #666; font-size: 12.5px; }
svg text { font: 11px system-ui, "Liberation Sans", sans-serif; fill: #333; }
`;

/**
 * A complete inspector page: no script, no external resource (the response's CSP forbids both).
 *
 * @example return c.html(page({ title: "Trajectories", body: html`<h1>...</h1>` }).text);
 */
export function page(params: { title: string; body: Html }): Html {
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${params.title}</title><style>${raw(CSS)}</style></head>
<body><main>${params.body}</main></body></html>`;
}

/** No scripts, no external loads, no framing: the page is static HTML and inline SVG. */
export const PAGE_HEADERS = {
  "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-store",
} as const;

export function swatch(color: string): Html {
  return html`<span class="sw" style="background:${color}"></span>`;
}

/** 1234567 -> "1,234,567". */
export function fmtInt(n: number): string {
  return Math.round(n).toLocaleString("en-US");
}

/** 850 -> "850 ms", 1234 -> "1.23 s", 125000 -> "2 min 5 s". */
export function fmtMs(ms: number): string {
  if (!Number.isFinite(ms)) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)} min ${s % 60} s`;
}

/** 0.8123 -> "81.2%"; null -> "–". */
export function fmtPct(rate: number | null): string {
  return rate === null ? "–" : `${(rate * 100).toFixed(1)}%`;
}

/** An ISO time as "2026-05-01 12:34:56" (UTC; headers say so). */
export function fmtTime(iso: string | null): string {
  if (!iso) return "–";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toISOString().slice(0, 19).replace("T", " ");
}

export function inspectPaths(tenant: string, id?: string) {
  const base = `/v1/tenants/${encodeURIComponent(tenant)}`;
  return {
    list: `${base}/inspect`,
    listJson: `${base}/inspect.json`,
    trajectory: id === undefined ? "" : `${base}/trajectories/${encodeURIComponent(id)}/inspect`,
    trajectoryJson: id === undefined ? "" : `${base}/trajectories/${encodeURIComponent(id)}/inspect.json`,
  };
}
