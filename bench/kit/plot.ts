export interface Series {
  name: string;
  color: string;
  /** Draw the line dashed (e.g. a reference such as an ideal). */
  dashed?: boolean;
  points: { x: number; y: number }[];
}

/**
 * A small dependency-free SVG line chart (linear axes, legend), for benchmark reports. `logY` /
 * `logX` put an axis on a log10 scale (x values must then be > 0; ticks stay at the data's x values).
 *
 * @example
 * writeFileSync("ttft.svg", lineChart({ title: "TTFT per turn", xLabel: "turn", yLabel: "ms", series }));
 */
export function lineChart(opts: { title: string; xLabel: string; yLabel: string; series: Series[]; logY?: boolean; logX?: boolean; width?: number; height?: number; legend?: "top-left" | "bottom-right" }): string {
  const W = opts.width ?? 760;
  const H = opts.height ?? 420;
  const m = { l: 70, r: 20, t: 40, b: 50 };
  const all = opts.series.flatMap((s) => s.points);
  const xMin = Math.min(...all.map((p) => p.x));
  const xMax = Math.max(...all.map((p) => p.x));
  const ys = all.map((p) => p.y).filter((y) => !opts.logY || y > 0);
  const yMin = opts.logY ? Math.pow(10, Math.floor(Math.log10(Math.min(...ys)))) : 0;
  const yMax = opts.logY ? Math.pow(10, Math.ceil(Math.log10(Math.max(...ys)))) : niceCeil(Math.max(...ys));
  const fy = (y: number) =>
    opts.logY
      ? m.t + (H - m.t - m.b) * (1 - (Math.log10(Math.max(y, yMin)) - Math.log10(yMin)) / (Math.log10(yMax) - Math.log10(yMin)))
      : m.t + (H - m.t - m.b) * (1 - (y - yMin) / (yMax - yMin || 1));
  const fx = (x: number) =>
    opts.logX
      ? m.l + ((W - m.l - m.r) * (Math.log10(x) - Math.log10(xMin))) / (Math.log10(xMax) - Math.log10(xMin) || 1)
      : m.l + ((W - m.l - m.r) * (x - xMin)) / (xMax - xMin || 1);
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  out.push(`<text x="${W / 2}" y="22" text-anchor="middle" font-size="15">${esc(opts.title)}</text>`);
  const yTicks = opts.logY
    ? Array.from({ length: Math.round(Math.log10(yMax / yMin)) + 1 }, (_, i) => yMin * Math.pow(10, i))
    : Array.from({ length: 6 }, (_, i) => yMin + ((yMax - yMin) * i) / 5);
  for (const t of yTicks) {
    out.push(`<line x1="${m.l}" x2="${W - m.r}" y1="${fy(t)}" y2="${fy(t)}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${m.l - 6}" y="${fy(t) + 4}" text-anchor="end">${fmt(t)}</text>`);
  }
  const xs = [...new Set(all.map((p) => p.x))].sort((a, b) => a - b);
  const step = Math.max(1, Math.ceil(xs.length / 12));
  xs.forEach((x, i) => {
    if (i % step === 0) out.push(`<text x="${fx(x)}" y="${H - m.b + 18}" text-anchor="middle">${fmt(x)}</text>`);
  });
  out.push(`<line x1="${m.l}" x2="${m.l}" y1="${m.t}" y2="${H - m.b}" stroke="#333"/>`);
  out.push(`<line x1="${m.l}" x2="${W - m.r}" y1="${H - m.b}" y2="${H - m.b}" stroke="#333"/>`);
  out.push(`<text x="${W / 2}" y="${H - 12}" text-anchor="middle">${esc(opts.xLabel)}</text>`);
  out.push(`<text x="16" y="${H / 2}" text-anchor="middle" transform="rotate(-90 16 ${H / 2})">${esc(opts.yLabel)}</text>`);
  opts.series.forEach((s, i) => {
    const pts = s.points.map((p) => `${fx(p.x).toFixed(1)},${fy(p.y).toFixed(1)}`).join(" ");
    out.push(`<polyline points="${pts}" fill="none" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ""}/>`);
    for (const p of s.points) out.push(`<circle cx="${fx(p.x).toFixed(1)}" cy="${fy(p.y).toFixed(1)}" r="2.5" fill="${s.color}"/>`);
    const lx = opts.legend === "bottom-right" ? W - m.r - 170 : m.l + 12;
    const ly = opts.legend === "bottom-right" ? H - m.b - 12 - opts.series.length * 18 : m.t;
    out.push(`<rect x="${lx}" y="${ly + 6 + i * 18}" width="12" height="12" fill="${s.color}"/>`);
    out.push(`<text x="${lx + 18}" y="${ly + 16 + i * 18}">${esc(s.name)}</text>`);
  });
  out.push("</svg>");
  return out.join("\n");
}

function niceCeil(v: number): number {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const k of [1, 2, 2.5, 5, 10]) if (k * p >= v) return k * p;
  return 10 * p;
}

function fmt(v: number): string {
  if (v >= 1000) return `${+(v / 1000).toFixed(1)}k`;
  return `${+v.toFixed(2)}`;
}

function esc(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

/** One series of a bar chart: a value per category (null: not measured, no bar). */
export interface BarSeries {
  name: string;
  color: string;
  values: (number | null)[];
}

/**
 * A grouped bar chart (one group per category, one bar per series, linear y from 0, legend), for
 * figures by a named case rather than a number.
 *
 * @example
 * writeFileSync("speed.svg", barChart({ title: "Decode", yLabel: "tokens/s", categories: ["a", "b"], series: [{ name: "off", color: "#888", values: [90, 91] }] }));
 */
export function barChart(opts: { title: string; yLabel: string; categories: string[]; series: BarSeries[]; width?: number; height?: number }): string {
  const W = opts.width ?? 760;
  const H = opts.height ?? 420;
  const m = { l: 70, r: 20, t: 40 + 18 * Math.ceil(opts.series.length / 2), b: 50 };
  const yMax = niceCeil(Math.max(0, ...opts.series.flatMap((s) => s.values.filter((v): v is number => v !== null))));
  const fy = (y: number) => m.t + (H - m.t - m.b) * (1 - y / yMax);
  const groupW = (W - m.l - m.r) / Math.max(1, opts.categories.length);
  const barW = (groupW * 0.8) / Math.max(1, opts.series.length);
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  out.push(`<text x="${W / 2}" y="22" text-anchor="middle" font-size="15">${esc(opts.title)}</text>`);
  for (let i = 0; i <= 5; i++) {
    const t = (yMax * i) / 5;
    out.push(`<line x1="${m.l}" x2="${W - m.r}" y1="${fy(t)}" y2="${fy(t)}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${m.l - 6}" y="${fy(t) + 4}" text-anchor="end">${fmt(t)}</text>`);
  }
  opts.categories.forEach((c, ci) => {
    const x0 = m.l + ci * groupW + groupW * 0.1;
    opts.series.forEach((s, si) => {
      const v = s.values[ci];
      if (v === null || v === undefined) return;
      out.push(`<rect x="${(x0 + si * barW).toFixed(1)}" y="${fy(v).toFixed(1)}" width="${(barW - 1).toFixed(1)}" height="${(fy(0) - fy(v)).toFixed(1)}" fill="${s.color}"/>`);
    });
    out.push(`<text x="${(m.l + (ci + 0.5) * groupW).toFixed(1)}" y="${H - m.b + 18}" text-anchor="middle">${esc(c)}</text>`);
  });
  out.push(`<line x1="${m.l}" x2="${m.l}" y1="${m.t}" y2="${H - m.b}" stroke="#333"/>`);
  out.push(`<line x1="${m.l}" x2="${W - m.r}" y1="${H - m.b}" y2="${H - m.b}" stroke="#333"/>`);
  out.push(`<text x="16" y="${H / 2}" text-anchor="middle" transform="rotate(-90 16 ${H / 2})">${esc(opts.yLabel)}</text>`);
  opts.series.forEach((s, i) => {
    const lx = m.l + 12 + (i % 2) * 330;
    const ly = 34 + Math.floor(i / 2) * 18;
    out.push(`<rect x="${lx}" y="${ly}" width="12" height="12" fill="${s.color}"/>`);
    out.push(`<text x="${lx + 18}" y="${ly + 10}">${esc(s.name)}</text>`);
  });
  out.push("</svg>");
  return out.join("\n");
}
