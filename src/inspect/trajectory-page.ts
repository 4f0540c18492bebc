import { timeline, tokenBars } from "./charts";
import { html, type Html } from "./html";
import { COLORS, fmtInt, fmtMs, fmtPct, fmtTime, inspectPaths, page, swatch } from "./layout";
import type { InspectTurn, InspectView } from "./view";

/**
 * The trajectory page: its links (the parent it forked from or is a subagent of, its forks, its
 * subagents with each one's first-turn reuse), totals (hit rate, tokens saved, estimated time
 * saved), the per-turn token bars, the timeline with tool pauses, the turn table (fits a 1280 px
 * window with typical figures, scrolls sideways in its panel otherwise), every prefix break with
 * its cause and the first differing text side by side, and the transcript.
 *
 * @example return c.html(trajectoryPage(inspectView(state, messages)).text, 200, PAGE_HEADERS);
 */
export function trajectoryPage(view: InspectView): Html {
  const paths = inspectPaths(view.tenant, view.id);
  const t = view.totals;
  const hasLeases = view.turns.some((x) => x.lease !== null);
  const hasDrafts = view.turns.some((x) => x.speculation !== null);
  const markedTurns = view.turns.filter((x) => x.marker !== null);
  const body = html`
<p><a href="${paths.list}">← ${view.tenant}'s trajectories</a> · <a href="${paths.trajectoryJson}">JSON</a></p>
<h1>Trajectory <code>${view.id}</code></h1>
<div class="meta"><span>tenant <b>${view.tenant}</b></span><span>created ${fmtTime(view.createdAt)} UTC</span><span>${fmtInt(view.messageCount)} messages</span><span>pinned backend ${view.backend ?? "none"}</span>${view.parent ? html`<span id="parent">${view.parent.relation === "subagent" ? "subagent of" : "forked from"} <a href="${inspectPaths(view.tenant, view.parent.id).trajectory}">${view.parent.id}</a>${view.parent.turn === null ? "" : html` at turn ${view.parent.turn}`}</span>` : ""}</div>
${view.children.length > 0 ? childrenLine(view) : ""}
${view.forks.length > 0 ? html`<div class="meta" id="forks"><span>${view.forks.length} fork${view.forks.length === 1 ? "" : "s"}:</span>${view.forks.map((f) => html`<span><a href="${inspectPaths(view.tenant, f.id).trajectory}">${f.id}</a> from turn ${f.turn}</span>`)}</div>` : ""}
<div class="cards">
  <div class="card" id="hit-rate"><small>cache hit rate</small><b>${fmtPct(t.hitRate)}</b><small>${fmtInt(t.cachedTokens)} of ${fmtInt(t.promptTokens)} prompt tokens</small></div>
  <div class="card" id="tokens-saved"><small>tokens saved</small><b>${fmtInt(t.tokensSaved)}</b><small>prompt tokens not recomputed</small></div>
  <div class="card" id="time-saved"><small>time saved vs no cache (estimate)</small><b>${t.estTimeSavedMs === null ? "–" : `≈ ${fmtMs(t.estTimeSavedMs)}`}</b><small>${t.prefillTokensPerS === null ? "no prefill measured" : `at the measured prefill rate, ${fmtInt(t.prefillTokensPerS)} tokens/s`}</small></div>
  <div class="card"><small>turns</small><b>${t.turns}</b><small>${fmtInt(t.completionTokens)} completion tokens</small></div>
  <div class="card" id="breaks"><small>prefix breaks</small><b>${t.breaks}</b><small>${markedTurns.length - t.breaks} other full resends</small></div>
  <div class="card"><small>time in turns / tool pauses</small><b>${fmtMs(t.turnMs)}</b><small>${fmtMs(t.toolPauseMs)} paused, ${fmtMs(t.wallMs)} wall</small></div>
</div>

<h2>Prompt and completion tokens per turn</h2>
<div class="legend">${swatch(COLORS.cached)}<span>cached (reused)</span>${swatch(COLORS.computed)}<span>computed (prefilled)</span>${swatch(COLORS.completion)}<span>completion</span><span class="marker break">▲ prefix break</span><span class="marker full">▲ full resend</span></div>
<div class="panel">${view.turns.length > 0 ? tokenBars(view.turns) : html`<p class="note">No turns yet.</p>`}</div>

<h2>Timeline</h2>
<div class="legend">${swatch(COLORS.ttft)}<span>until the first token</span>${swatch(COLORS.completion)}<span>rest of the turn</span>${swatch(COLORS.pause)}<span>client pause (tools) between turns</span><span class="marker break">| prefix break</span></div>
<div class="panel">${timeline(view.turns)}</div>

<h2>Turns</h2>
<div class="panel"><table class="turns">
<thead><tr><th>turn</th><th>start</th><th class="l">mode</th><th class="l">break / reason</th><th>prompt</th><th>cached</th><th>computed</th><th>completion</th><th>prefix lost</th><th>TTFT</th><th title="time to first token inside the backend">backend</th><th>total</th><th>pause</th><th>saved (est.)</th><th class="l">backend</th>${hasDrafts ? html`<th title="speculative decoding: draft tokens accepted / drafted">drafts</th>` : ""}${hasLeases ? html`<th class="l">lease</th>` : ""}</tr></thead>
<tbody>${view.turns.map((x) => turnRow(x, hasLeases, hasDrafts))}</tbody>
</table>
<p class="note">start: since the first turn began (hover for the time). TTFT: time to first token at the trajectory object, then inside the backend. pause: the client's pause before the turn (its tools). prefix lost: tokens of the previous turn's prompt and reply that this turn computed again, and why (hover for the detail): prefix-break, transfer-failed, placed-away (with the route), shorter-than-a-block (a full turn reuses whole KV blocks only) or evicted. saved (est.): cached tokens at the measured prefill rate.</p></div>

<h2>Prefix breaks and full resends</h2>
${markedTurns.length === 0 ? html`<p class="note">None: every turn after the first extended the cached prefix.</p>` : markedTurns.map(breakDetail)}

<h2>Transcript</h2>
<details class="panel transcript"><summary>${fmtInt(view.messageCount)} messages${view.messagesOmitted > 0 ? ` (the last ${view.messages.length} shown)` : ""}</summary>
${view.messages.map((m) => html`<div class="msg" data-index="${m.index}"><span class="role">#${m.index} ${m.role}</span>${m.truncated ? html` <span class="note">(first ${fmtInt(m.text.length)} of ${fmtInt(m.chars)} characters)</span>` : ""}${m.text.trim() === "" && m.text.length > 0 ? html` <span class="note">(whitespace only, ${fmtInt(m.chars)} characters)</span>` : html`<pre>${m.text}</pre>`}</div>`)}
</details>`;
  return page({ title: `${view.id} · trajectory inspector`, body });
}

function turnRow(x: InspectTurn, hasLeases: boolean, hasDrafts: boolean): Html {
  const marker = x.marker ? html`<span class="marker ${x.marker.kind}" title="${x.marker.label}">${x.marker.kind === "break" ? "⚠" : "↻"} ${x.marker.cause}</span>` : x.fullReason ?? "";
  return html`<tr data-turn="${x.turn}"><td>${x.turn}</td><td title="${fmtTime(x.startedAt)} UTC">+${fmtMs(x.startOffsetMs)}</td><td class="l">${x.mode}</td><td class="l wrap">${marker}</td><td>${fmtInt(x.promptTokens)}</td><td>${fmtInt(x.cachedTokens)}</td><td>${fmtInt(x.computedTokens)}</td><td>${fmtInt(x.completionTokens)}</td><td>${x.prefixLostTokens === null ? "–" : fmtInt(x.prefixLostTokens)}${x.miss ? html` <span class="miss" data-reason="${x.miss.reason}" title="${fmtInt(x.miss.tokens)} of ${fmtInt(x.miss.possibleTokens)} reusable tokens computed${x.miss.detail ? `: ${x.miss.detail}` : ""}">${x.miss.reason}</span>` : ""}</td><td>${fmtMs(x.ttftMs)}</td><td>${fmtMs(x.backendTtftMs)}</td><td>${fmtMs(x.totalMs)}</td><td>${x.pauseBeforeMs === null ? "–" : fmtMs(x.pauseBeforeMs)}</td><td>${x.estSavedMs === null ? "–" : `≈ ${fmtMs(x.estSavedMs)}`}</td><td class="l" title="${x.backend}">${backendHost(x.backend)}</td>${hasDrafts ? html`<td class="drafts">${x.speculation ? `${fmtInt(x.speculation.accepted)}/${fmtInt(x.speculation.drafted)}` : "–"}</td>` : ""}${hasLeases ? html`<td class="l">${x.lease ? html`<span class="lease lease-${x.lease.state}"${x.lease.tokens !== undefined ? html` title="${fmtInt(x.lease.tokens)} tokens leased"` : ""}>${x.lease.state}${x.lease.ttlMs !== undefined ? ` · ttl ${fmtMs(x.lease.ttlMs)}` : ""}</span>` : ""}</td>` : ""}</tr>`;
}

/**
 * A backend as the turn table shows it: a URL as its host and port (the whole value is the cell's
 * title), so the table fits a 1280 px window; a backend id (what turn records hold) as it is.
 *
 * @example backendHost("http://10.0.0.2:8080") // "10.0.0.2:8080"
 */
export function backendHost(url: string): string {
  try {
    return new URL(url).host || url;
  } catch {
    return url;
  }
}

/** The subagents line: each child linked, with its first turn's reuse (cached of prompt tokens) and where it ran. */
function childrenLine(view: InspectView): Html {
  const n = view.children.length;
  return html`<div class="meta" id="children"><span>${n} subagent${n === 1 ? "" : "s"}:</span>${view.children.map(
    (ch) =>
      html`<span class="child" data-id="${ch.id}"><a href="${inspectPaths(view.tenant, ch.id).trajectory}">${ch.id}</a> ${
        ch.firstTurn
          ? html`<span class="reuse" title="first turn on ${ch.firstTurn.backend}${ch.firstTurn.route ? `, route ${ch.firstTurn.route}` : ""}">first turn ${fmtInt(ch.firstTurn.cachedTokens)} of ${fmtInt(ch.firstTurn.promptTokens)} prompt tokens cached (${fmtPct(ch.firstTurn.promptTokens > 0 ? ch.firstTurn.cachedTokens / ch.firstTurn.promptTokens : null)})${ch.firstTurn.route ? `, ${ch.firstTurn.route}` : ""}</span>`
          : html`<span class="reuse">no turn done yet</span>`
      }</span>`,
  )}</div>`;
}

function breakDetail(x: InspectTurn): Html {
  const m = x.marker!;
  const d = m.detail;
  const where = d
    ? [
        d.message !== undefined ? `message #${d.message}` : "",
        d.field ? `field ${d.field}` : "",
        d.offset !== undefined ? `character ${fmtInt(d.offset)}` : "",
        d.uncachedFromToken !== undefined ? `recomputed from prompt token ${fmtInt(d.uncachedFromToken)}` : "",
      ].filter((s) => s !== "")
    : [];
  const sideBySide =
    d && (d.before !== undefined || d.after !== undefined)
      ? html`<div class="diff"><div><h4>before (cached)</h4><pre class="before">${d.before ?? ""}</pre></div><div><h4>now (sent this turn)</h4><pre class="after">${d.after ?? ""}</pre></div></div>`
      : m.source === "fullReason" && m.kind === "break"
        ? html`<p class="note">The turn record has no prefixBreak detail, so the first differing text is not known; the recorded reason is <code>${m.cause}</code>.</p>`
        : "";
  return html`<div class="break-detail ${m.kind}" data-turn="${x.turn}" data-cause="${m.cause}"><p><b>Turn ${x.turn}</b>: <span class="marker ${m.kind}">${m.kind === "break" ? "prefix break" : "full resend"}: ${m.cause}</span> · ${m.label}. ${fmtInt(x.computedTokens)} prompt tokens computed, ${fmtInt(x.cachedTokens)} cached${x.prefixLostTokens ? `, ${fmtInt(x.prefixLostTokens)} of the previous prefix lost` : ""}.${where.length > 0 ? ` (${where.join(", ")})` : ""}</p>${sideBySide}</div>`;
}
