import type { IndexedTrajectory } from "../../durable-objects/tenant-index/tenant-index-store";
import { html, type Html } from "./html";
import { COLORS, fmtInt, fmtPct, fmtTime, inspectPaths, page } from "./layout";

/** A trajectory row of the list page and of its JSON. */
export interface ListedTrajectory extends IndexedTrajectory {
  hitRate: number | null;
  inspectUrl: string;
}

export function listedTrajectories(tenant: string, rows: IndexedTrajectory[]): ListedTrajectory[] {
  return rows.map((r) => ({ ...r, hitRate: r.promptTokens > 0 ? r.cachedTokens / r.promptTokens : null, inspectUrl: inspectPaths(tenant, r.id).trajectory }));
}

/**
 * The tenant's recent trajectories, most recently active first, each with its turns, tokens and
 * cache hit rate (with a small bar) and a link to its page.
 *
 * @example return c.html(listPage("acme", listedTrajectories("acme", rows)).text, 200, PAGE_HEADERS);
 */
export function listPage(tenant: string, rows: ListedTrajectory[]): Html {
  const paths = inspectPaths(tenant);
  const body = html`
<h1>Trajectories of <code>${tenant}</code></h1>
<p class="meta">Most recently active first · ${rows.length} shown · <a href="${paths.listJson}">JSON</a></p>
${
  rows.length === 0
    ? html`<p class="note">No trajectories yet. Name one with <code>x-trajectory-id</code> on a chat completion, or create one at <code>POST /v1/tenants/${tenant}/trajectories</code>.</p>`
    : html`<div class="panel"><table class="trajectories">
<thead><tr><th class="l">trajectory</th><th class="l">hit rate</th><th>turns</th><th>prompt tokens</th><th>cached</th><th>computed</th><th>completion</th><th class="l">created (UTC)</th><th class="l">last turn (UTC)</th></tr></thead>
<tbody>${rows.map(row)}</tbody></table></div>`
}`;
  return page({ title: `${tenant} · trajectory inspector`, body });
}

function row(r: ListedTrajectory): Html {
  const pct = r.hitRate === null ? 0 : Math.round(r.hitRate * 100);
  return html`<tr data-id="${r.id}"><td class="l"><a href="${r.inspectUrl}"><code>${r.id}</code></a></td><td class="l hit-rate"><svg width="80" height="10" viewBox="0 0 80 10" xmlns="http://www.w3.org/2000/svg"><rect width="80" height="10" fill="#eee"/><rect width="${(pct * 0.8).toFixed(1)}" height="10" fill="${COLORS.cached}"/></svg> ${fmtPct(r.hitRate)}</td><td class="turns">${r.turns}</td><td>${fmtInt(r.promptTokens)}</td><td>${fmtInt(r.cachedTokens)}</td><td>${fmtInt(r.computedTokens)}</td><td>${fmtInt(r.completionTokens)}</td><td class="l">${fmtTime(r.createdAt)}</td><td class="l">${fmtTime(r.lastTurnAt)}</td></tr>`;
}
