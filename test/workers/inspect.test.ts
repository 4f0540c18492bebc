import { runInDurableObject } from "cloudflare:test";
import { exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { ChatMessage } from "../../protocol/messages";
import { call, chat, completion, createTrajectory, expectError, getState, replyOf, SMALL, stubOf, type TenantName, trajectoryPath, uid, uniqueSystem } from "./helpers";
import { TENANTS } from "./tenants";

/** The inspector's paths for a test tenant. */
function inspectPath(tenant: TenantName, id?: string, json = false): string {
  const suffix = json ? "inspect.json" : "inspect";
  return id === undefined ? `/v1/tenants/${TENANTS[tenant].name}/${suffix}` : `${trajectoryPath(tenant, id)}/${suffix}`;
}

/** Three turns: a first turn, a delta, then an edit of the first user message (a forced prefix break). */
async function threeTurnsWithBreak(id: string, firstUser = "Find the failing test."): Promise<void> {
  const headers = { "x-trajectory-id": id };
  const base: ChatMessage[] = [uniqueSystem(30), { role: "user", content: firstUser }];
  const c1 = await completion(await chat({ messages: base, ...SMALL }, { headers }));
  const c2 = await completion(await chat({ messages: [...base, replyOf(c1), { role: "user", content: "Fix it." }], ...SMALL }, { headers }));
  expect(c2.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
  await completion(await chat({ messages: [base[0]!, { role: "user", content: "Find the flaky test instead." }], ...SMALL }, { headers }));
}

/** The `rect.seg` elements of the token bars: turn, kind and tokens. */
function segments(page: string): { turn: number; kind: string; tokens: number }[] {
  return [...page.matchAll(/<rect class="seg (\w+)" data-turn="(\d+)" data-kind="(\w+)" data-tokens="(\d+)"/g)].map((m) => {
    expect(m[1]).toBe(m[3]);
    return { turn: Number(m[2]), kind: m[3]!, tokens: Number(m[4]) };
  });
}

async function text(res: Response, status = 200): Promise<string> {
  const body = await res.text();
  expect(res.status, body).toBe(status);
  return body;
}

/** Index notes are written after the answer (waitUntil): poll the list until `done` holds. */
async function listUntil(tenant: TenantName, done: (ids: string[]) => boolean): Promise<{ id: string; turns: number; promptTokens: number; cachedTokens: number; hitRate: number | null; inspectUrl: string }[]> {
  for (let i = 0; ; i++) {
    const body = JSON.parse(await text(await call(inspectPath(tenant, undefined, true), { tenant }))) as { data: Awaited<ReturnType<typeof listUntil>> };
    if (done(body.data.map((r) => r.id)) || i >= 50) return body.data;
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("trajectory inspector: auth", () => {
  it("needs a key or the inspector cookie; another tenant's pages are 404", async () => {
    const id = uid("insp-auth");
    await createTrajectory("a", id);
    for (const path of [inspectPath("a", id), inspectPath("a", id, true), inspectPath("a"), inspectPath("a", undefined, true)]) {
      await expectError(await call(path, { tenant: null }), 401, "unauthorized");
      await expectError(await call(path, { tenant: null, headers: { cookie: "agent_edge_inspect=tenant-a.99999999999.0000000000000000000000000000000000000000000000000000000000000000" } }), 401, "unauthorized");
      await expectError(await call(path, { tenant: "b" }), 404, "not_found");
      expect((await call(path, { tenant: "a" })).status).toBe(200);
    }
    await expectError(await call(inspectPath("a", uid("insp-missing")), { tenant: "a" }), 404, "not_found");
  });

  it("?key= sets an HttpOnly SameSite=Strict cookie for the tenant's paths and redirects without the key; the cookie works on inspector GETs only", async () => {
    const id = uid("insp-cookie");
    await createTrajectory("a", id);
    // redirect: "manual", or the Worker's fetch follows the 303 like a browser would.
    const res = await exports.default.fetch(new Request(`http://edge.test${inspectPath("a")}?limit=5&key=${TENANTS.a.key}`, { redirect: "manual" }));
    expect(res.status, await res.clone().text()).toBe(303);
    expect(res.headers.get("location")).toBe(`${inspectPath("a")}?limit=5`);
    const setCookie = res.headers.get("set-cookie")!;
    expect(setCookie).toMatch(/^agent_edge_inspect=tenant-a\.\d+\.[0-9a-f]{64}; /);
    expect(setCookie).toContain("Path=/v1/tenants/tenant-a;");
    expect(setCookie).toContain("HttpOnly");
    expect(setCookie).toContain("SameSite=Strict");
    expect(setCookie).not.toContain(TENANTS.a.key);
    const cookie = setCookie.split(";")[0]!;

    expect(await text(await call(inspectPath("a", id), { tenant: null, headers: { cookie } }))).toContain(id);
    expect((await call(`${inspectPath("a")}?limit=5`, { tenant: null, headers: { cookie } })).status).toBe(200);
    // Not an API credential: the state route, turns and deletes still need the bearer key.
    await expectError(await call(trajectoryPath("a", id), { tenant: null, headers: { cookie } }), 401, "unauthorized");
    await expectError(await call(trajectoryPath("a", id, "/turns"), { tenant: null, headers: { cookie }, body: { messages: [{ role: "user", content: "x" }] } }), 401, "unauthorized");
    await expectError(await call(trajectoryPath("a", id), { tenant: null, method: "DELETE", headers: { cookie } }), 401, "unauthorized");
    // Tenant A's cookie on tenant B's pages: authenticated as A, so 404 like any other tenant's URL.
    await expectError(await call(inspectPath("b"), { tenant: null, headers: { cookie } }), 404, "not_found");
    // A tampered token is refused.
    const tampered = cookie.replace(/.$/, (ch) => (ch === "0" ? "1" : "0"));
    await expectError(await call(inspectPath("a", id), { tenant: null, headers: { cookie: tampered } }), 401, "unauthorized");
    // A token signed for tenant A cannot be relabelled as tenant B.
    await expectError(await call(inspectPath("b"), { tenant: null, headers: { cookie: cookie.replace("tenant-a.", "tenant-b.") } }), 401, "unauthorized");
    // A wrong key in the URL is 401, and sets nothing.
    const bad = await exports.default.fetch(new Request(`http://edge.test${inspectPath("a")}?key=sk-wrong`, { redirect: "manual" }));
    expect(bad.headers.get("set-cookie")).toBeNull();
    await expectError(bad, 401, "unauthorized");
  });
});

describe("trajectory inspector: trajectory page", () => {
  it("draws one stacked bar per turn with the recorded numbers, and marks the forced break with its cause", async () => {
    const id = uid("insp-page");
    await threeTurnsWithBreak(id);
    const state = await getState("a", id);
    expect(state.turns.map((t) => t.full_reason)).toEqual(["first-turn", null, "diverged"]);

    const res = await call(inspectPath("a", id), { tenant: "a" });
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    expect(res.headers.get("content-security-policy")).toContain("default-src 'none'");
    const page = await text(res);
    expect(page).not.toMatch(/<script/i);
    expect(segments(page)).toEqual(
      state.turns.flatMap((t) => [
        { turn: t.turn, kind: "cached", tokens: t.cached_tokens },
        { turn: t.turn, kind: "computed", tokens: t.computed_tokens },
        { turn: t.turn, kind: "completion", tokens: t.completion_tokens },
      ]),
    );
    // Exactly one break marker, on turn 3, with its cause; the first turn is not a break.
    // The explainer names the edit of message 1 "other" (not a timestamp, id, JSON or system prompt).
    expect(state.turns[2]!.prefix_break).toMatchObject({ cause: "other", message: 1, field: "content", offset: 10 });
    expect([...page.matchAll(/<g class="break-marker" data-turn="(\d+)" data-cause="([^"]+)"/g)].map((m) => [m[1], m[2]])).toEqual([["3", "other"]]);
    expect(page).not.toContain('class="full-marker"');
    expect(page).toMatch(/<div class="break-detail break" data-turn="3" data-cause="other">/);
    // The first differing text, side by side.
    expect(page).toContain("Find the failing test.");
    expect(page).toContain("Find the flaky test instead.");
    // Timeline: three turn spans and two pauses between them.
    expect(page.match(/<g class="turn-span"/g)).toHaveLength(3);
    expect([...page.matchAll(/<g class="pause" data-before-turn="(\d+)"/g)].map((m) => m[1])).toEqual(["2", "3"]);

    // Totals, from the JSON twin.
    const view = JSON.parse(await text(await call(inspectPath("a", id, true), { tenant: "a" }))) as {
      totals: { promptTokens: number; cachedTokens: number; hitRate: number; tokensSaved: number; breaks: number; estTimeSavedMs: number | null; prefillTokensPerS: number | null };
      turns: { turn: number; marker: { kind: string; cause: string; source: string } | null; pauseBeforeMs: number | null }[];
    };
    const prompt = state.turns.reduce((s, t) => s + t.prompt_tokens, 0);
    const cached = state.turns.reduce((s, t) => s + t.cached_tokens, 0);
    expect(view.totals).toMatchObject({ promptTokens: prompt, cachedTokens: cached, tokensSaved: cached, breaks: 1 });
    expect(view.totals.hitRate).toBeCloseTo(cached / prompt, 10);
    expect(view.totals.prefillTokensPerS).toBeGreaterThan(0);
    expect(view.totals.estTimeSavedMs).toBeGreaterThan(0);
    expect(view.turns.map((t) => t.marker)).toEqual([null, null, expect.objectContaining({ kind: "break", cause: "other", source: "prefixBreak" })]);
    expect(view.turns[0]!.pauseBeforeMs).toBeNull();
    expect(page).toContain(`${((cached / prompt) * 100).toFixed(1)}%`);
    expect(page).toContain("time saved vs no cache (estimate)");
  });

  it("shows transcript text as text: a <script> in a message is escaped", async () => {
    const id = uid("insp-xss");
    const evil = `<script>alert("owned")</script><img src=x onerror=alert(1)> & 'quotes'`;
    await completion(await chat({ messages: [{ role: "user", content: evil }], ...SMALL }, { headers: { "x-trajectory-id": id } }));
    const page = await text(await call(inspectPath("a", id), { tenant: "a" }));
    expect(page).toContain("&lt;script&gt;alert(&quot;owned&quot;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt; &amp; &#39;quotes&#39;");
    expect(page).not.toMatch(/<script/i);
    expect(page).not.toContain("<img");
  });

  it("renders a recorded prefixBreak (cause, where, before/after side by side, escaped) and leases when the turn record has them", async () => {
    const id = uid("insp-pb");
    await threeTurnsWithBreak(id);
    // Records as the prefix-break explainer and leases will write them (fields this edge does not write yet).
    await runInDurableObject(stubOf("a", id), (_instance, state) => {
      const sql = state.storage.sql;
      const row = sql.exec<{ record: string }>(`SELECT record FROM turns WHERE turn = 3`).one();
      const record = { ...JSON.parse(row.record), prefixBreak: { cause: "timestamp", message: 1, field: "content", offset: 9, before: "Today is <2024-05-01>", after: "Today is <2024-05-02>", uncachedFromToken: 17 } };
      sql.exec(`UPDATE turns SET record = ? WHERE turn = 3`, JSON.stringify(record));
      const r2 = sql.exec<{ record: string }>(`SELECT record FROM turns WHERE turn = 2`).one();
      sql.exec(`UPDATE turns SET record = ? WHERE turn = 2`, JSON.stringify({ ...JSON.parse(r2.record), prefixBreak: { cause: "none" }, lease: { state: "hit", ttlMs: 30000 } }));
    });
    const page = await text(await call(inspectPath("a", id), { tenant: "a" }));
    expect([...page.matchAll(/<g class="break-marker" data-turn="(\d+)" data-cause="([^"]+)"/g)].map((m) => [m[1], m[2]])).toEqual([["3", "timestamp"]]);
    expect(page).toContain("a timestamp in the prompt changed");
    expect(page).toContain('<pre class="before">Today is &lt;2024-05-01&gt;</pre>');
    expect(page).toContain('<pre class="after">Today is &lt;2024-05-02&gt;</pre>');
    expect(page).toContain("message #1, field content, character 9, recomputed from prompt token 17");
    expect(page).toMatch(/<span class="lease lease-hit">hit · ttl 30\.0 s<\/span>/);
  });

  it("shows no lease column and no break section entries when there are none", async () => {
    const id = uid("insp-plain");
    await completion(await chat({ messages: [uniqueSystem(), { role: "user", content: "hi" }], ...SMALL }, { headers: { "x-trajectory-id": id } }));
    const page = await text(await call(inspectPath("a", id), { tenant: "a" }));
    expect(page).not.toContain("<th class=\"l\">lease</th>");
    expect(page).not.toContain('class="break-detail');
    expect(segments(page)).toHaveLength(3);
  });
});

describe("trajectory inspector: list page", () => {
  it("lists the tenant's trajectories most recently active first, with hit rates; deleted ones disappear", async () => {
    const older = uid("insp-list-old");
    const newer = uid("insp-list-new");
    const empty = uid("insp-list-empty");
    await threeTurnsWithBreak(older);
    await threeTurnsWithBreak(newer);
    await createTrajectory("a", empty);
    let rows = await listUntil("a", (ids) => ids.indexOf(empty) === 0 && ids.indexOf(newer) === 1 && ids.indexOf(older) === 2);
    expect(rows.slice(0, 3).map((r) => r.id)).toEqual([empty, newer, older]);
    const state = await getState("a", newer);
    const row = rows[1]!;
    expect(row.turns).toBe(3);
    expect(row.promptTokens).toBe(state.turns.reduce((s, t) => s + t.prompt_tokens, 0));
    expect(row.cachedTokens).toBe(state.turns.reduce((s, t) => s + t.cached_tokens, 0));
    expect(row.hitRate).toBeCloseTo(row.cachedTokens / row.promptTokens, 10);
    expect(rows[0]!.turns).toBe(0);
    expect(rows[0]!.hitRate).toBeNull();

    const page = await text(await call(inspectPath("a"), { tenant: "a" }));
    const order = [...page.matchAll(/<tr data-id="([^"]+)">/g)].map((m) => m[1]);
    expect(order.slice(0, 3)).toEqual([empty, newer, older]);
    expect(page).toContain(`href="${inspectPath("a", newer)}"`);
    expect(page).toContain(`${((row.cachedTokens / row.promptTokens) * 100).toFixed(1)}%`);

    // A turn on the oldest makes it the most recent; a deletion removes it from the list.
    const headers = { "x-trajectory-id": older };
    await completion(await chat({ messages: [{ role: "user", content: "again" }], ...SMALL }, { headers }));
    rows = await listUntil("a", (ids) => ids[0] === older);
    expect(rows[0]!.id).toBe(older);
    expect(rows[0]!.turns).toBe(4);
    expect((await call(trajectoryPath("a", newer), { tenant: "a", method: "DELETE" })).status).toBe(200);
    rows = await listUntil("a", (ids) => !ids.includes(newer));
    expect(rows.map((r) => r.id)).not.toContain(newer);

    // Tenant B sees none of tenant A's trajectories.
    const bRows = await listUntil("b", () => true);
    expect(bRows.map((r) => r.id)).not.toContain(older);
    await expectError(await call(`${inspectPath("a")}?limit=0`, { tenant: "a" }), 400, "invalid_request");
  });
});
