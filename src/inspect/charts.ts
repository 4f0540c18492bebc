import { html, type Html } from "./html";
import { COLORS, fmtInt, fmtMs } from "./layout";
import type { InspectTurn } from "./view";

const ROW_H = 24;
const BAR_H = 16;
const LABEL_W = 56;
const BAR_W = 520;
/** The break marker's cause, in a column after the longest figures text. */
const MARKER_X = LABEL_W + BAR_W + 250;
const WIDTH = MARKER_X + 200;

/**
 * One row per turn: a stacked bar of cached prompt tokens, computed prompt tokens and completion
 * tokens (every segment is a `rect.seg` with `data-turn`, `data-kind`, `data-tokens` and a
 * `<title>`, zero-width segments included), the figures after it, and a marker with the cause on
 * turns whose prefix broke (`g.break-marker`) or that were resent in full (`g.full-marker`).
 *
 * @example tokenBars(view.turns)
 */
export function tokenBars(turns: InspectTurn[]): Html {
  const max = Math.max(1, ...turns.map((t) => t.promptTokens + t.completionTokens));
  const scale = BAR_W / max;
  const height = turns.length * ROW_H + 24;
  const rows = turns.map((t, i) => {
    const y = 4 + i * ROW_H;
    const segs: { kind: "cached" | "computed" | "completion"; tokens: number; what: string }[] = [
      { kind: "cached", tokens: t.cachedTokens, what: "cached prompt tokens (reused from the KV cache)" },
      { kind: "computed", tokens: t.computedTokens, what: "computed prompt tokens (prefilled this turn)" },
      { kind: "completion", tokens: t.completionTokens, what: "completion tokens" },
    ];
    let x = LABEL_W;
    const rects = segs.map((s) => {
      const w = s.tokens * scale;
      const r = html`<rect class="seg ${s.kind}" data-turn="${t.turn}" data-kind="${s.kind}" data-tokens="${s.tokens}" x="${x.toFixed(1)}" y="${y}" width="${w.toFixed(1)}" height="${BAR_H}" fill="${COLORS[s.kind]}"><title>turn ${t.turn}: ${fmtInt(s.tokens)} ${s.what}</title></rect>`;
      x += w;
      return r;
    });
    const figures = `${fmtInt(t.cachedTokens)} cached + ${fmtInt(t.computedTokens)} computed + ${fmtInt(t.completionTokens)} out`;
    const textX = x + 6;
    const marker = t.marker
      ? html`<g class="${t.marker.kind}-marker" data-turn="${t.turn}" data-cause="${t.marker.cause}"><path d="M${LABEL_W - 12} ${y + 2} l5 10 h-10 z" fill="${t.marker.kind === "break" ? COLORS.break : COLORS.full}"/><title>turn ${t.turn}: ${t.marker.kind === "break" ? "prefix break" : "full resend"}: ${t.marker.label}</title><text x="${MARKER_X}" y="${y + 12}" style="fill:${t.marker.kind === "break" ? COLORS.break : COLORS.full};font-weight:600">${t.marker.kind === "break" ? "⚠ break" : "↻ full"}: ${t.marker.cause}</text></g>`
      : "";
    return html`<g class="turn-row" data-turn="${t.turn}"><text x="0" y="${y + 12}">turn ${t.turn}</text>${rects}<text x="${textX.toFixed(1)}" y="${y + 12}">${figures}</text>${marker}</g>`;
  });
  const axisY = turns.length * ROW_H + 8;
  return html`<svg class="token-bars" role="img" aria-label="prompt tokens per turn: cached, computed, completion" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" xmlns="http://www.w3.org/2000/svg">${rows}<line x1="${LABEL_W}" x2="${LABEL_W + BAR_W}" y1="${axisY}" y2="${axisY}" stroke="#bbb"/><text x="${LABEL_W}" y="${axisY + 13}">0</text><text x="${LABEL_W + BAR_W}" y="${axisY + 13}" text-anchor="end">${fmtInt(max)} tokens</text></svg>`;
}

const TL_LEFT = 56;
const TL_W = 900;

/**
 * The turns on a time axis: each turn from its start to its end (the part before the first token
 * darker), the client's pauses between turns (tools running) as grey gaps with their length, and
 * a red tick at the start of a turn whose prefix broke.
 */
export function timeline(turns: InspectTurn[]): Html {
  const last = turns.at(-1);
  const span = Math.max(1, last ? last.startOffsetMs + last.totalMs : 1);
  const scale = TL_W / span;
  const height = turns.length > 0 ? 96 : 40;
  const barY = 20;
  const items = turns.map((t, i) => {
    const x = TL_LEFT + t.startOffsetMs * scale;
    const w = Math.max(2, t.totalMs * scale);
    const tw = Math.min(w, Math.max(1, t.ttftMs * scale));
    const prev = i > 0 ? turns[i - 1]! : undefined;
    let pause: Html | string = "";
    if (prev && t.pauseBeforeMs !== null && t.pauseBeforeMs > 0) {
      const px = TL_LEFT + (prev.startOffsetMs + prev.totalMs) * scale;
      const pw = t.pauseBeforeMs * scale;
      pause = html`<g class="pause" data-before-turn="${t.turn}" data-ms="${Math.round(t.pauseBeforeMs)}"><rect x="${px.toFixed(1)}" y="${barY + 6}" width="${pw.toFixed(1)}" height="8" fill="${COLORS.pause}" opacity="0.45"><title>client pause before turn ${t.turn} (tools): ${fmtMs(t.pauseBeforeMs)}</title></rect>${pw > 44 ? html`<text x="${(px + pw / 2).toFixed(1)}" y="${barY + 34}" text-anchor="middle" style="fill:#666">tool ${fmtMs(t.pauseBeforeMs)}</text>` : ""}</g>`;
    }
    const tick = t.marker?.kind === "break" ? html`<line class="break-tick" data-turn="${t.turn}" x1="${x.toFixed(1)}" x2="${x.toFixed(1)}" y1="${barY - 8}" y2="${barY + 28}" stroke="${COLORS.break}" stroke-width="2"><title>turn ${t.turn}: prefix break: ${t.marker.label}</title></line>` : "";
    return html`${pause}<g class="turn-span" data-turn="${t.turn}"><rect x="${x.toFixed(1)}" y="${barY}" width="${w.toFixed(1)}" height="20" fill="${COLORS.completion}" opacity="0.55"><title>turn ${t.turn}: ${fmtMs(t.totalMs)} total, first token after ${fmtMs(t.ttftMs)} (${t.backend})</title></rect><rect x="${x.toFixed(1)}" y="${barY}" width="${tw.toFixed(1)}" height="20" fill="${COLORS.ttft}"><title>turn ${t.turn}: time to first token ${fmtMs(t.ttftMs)}</title></rect><text x="${(x + 2).toFixed(1)}" y="${barY - 4}">${t.turn}</text></g>${tick}`;
  });
  const ticks = axisTicks(span).map((ms) => {
    const x = TL_LEFT + ms * scale;
    return html`<line x1="${x.toFixed(1)}" x2="${x.toFixed(1)}" y1="${height - 26}" y2="${height - 20}" stroke="#999"/><text x="${x.toFixed(1)}" y="${height - 8}" text-anchor="middle">${fmtMs(ms)}</text>`;
  });
  const width = TL_LEFT + TL_W + 40;
  return html`<svg class="timeline" role="img" aria-label="turns and tool pauses on a time axis" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" xmlns="http://www.w3.org/2000/svg"><text x="0" y="${barY + 14}">turns</text>${items}<line x1="${TL_LEFT}" x2="${TL_LEFT + TL_W}" y1="${height - 26}" y2="${height - 26}" stroke="#999"/>${ticks}</svg>`;
}

/** Round tick positions (1, 2 or 5 x 10^k ms apart), 4 to 10 of them from 0 to `span`. */
function axisTicks(span: number): number[] {
  const rough = span / 6;
  const pow = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 5, 10].map((m) => m * pow).find((s) => s >= rough) ?? 10 * pow;
  const out: number[] = [];
  for (let t = 0; t <= span + 1e-9; t += step) out.push(t);
  return out;
}
