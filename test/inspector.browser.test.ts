import { mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chromiumExecutable, DEFAULT_CHROMIUM } from "../scripts/chromium";
import { repoRoot, type Stack } from "../scripts/stack";
import { startTestStack, type TestStack } from "./support/stack-fixture";

/**
 * The trajectory inspector in real headless Chromium (Debian's, through playwright-core; no
 * browser download) against the local stack (`wrangler dev` + a backend on the tiny model): a
 * 3-turn trajectory whose third turn edits an earlier message, then the page as a person opens
 * it (`?key=` once, then the cookie). Screenshots: test/artifacts/inspector.png and
 * test/artifacts/inspector-list.png.
 */
const MODEL = "tiny-llama-random";
const ARTIFACTS = join(repoRoot, "test", "artifacts");

interface StateTurn {
  turn: number;
  full_reason: string | null;
  prefix_break: { cause: string; message?: number; field?: string; offset?: number } | null;
  prompt_tokens: number;
  cached_tokens: number;
  computed_tokens: number;
  completion_tokens: number;
}

describe("trajectory inspector in headless Chromium", () => {
  let fixture: TestStack | undefined;
  let stack: Stack;
  let browser: Browser;
  let client: OpenAI;

  beforeAll(async () => {
    const executablePath = chromiumExecutable();
    if (!executablePath) {
      throw new Error(
        `Chromium not found at ${process.env.CHROMIUM_PATH || DEFAULT_CHROMIUM}: the inspector's browser test needs Debian's chromium. Run \`sudo bash scripts/install-chromium.sh\` (or set CHROMIUM_PATH); .ci/run does.`,
      );
    }
    [fixture, browser] = await Promise.all([startTestStack({ name: "inspector", kvMemory: "64MiB", threads: 1, backendArgs: ["--speculative", "lookup"] }), chromium.launch({ executablePath, headless: true })]);
    ({ stack } = fixture);
    client = new OpenAI({ apiKey: "sk-local-dev", baseURL: `${stack.edgeUrl}/v1`, maxRetries: 0 });
  });

  afterAll(async () => {
    await browser?.close();
    await fixture?.stop();
  });

  it("shows the per-turn bars, the forced prefix break and its cause, and the list page", async () => {
    const id = `inspector-${Date.now()}`;
    const headers = { "x-trajectory-id": id };
    const system = `You are a coding agent working in a repository. ${"Read the files before editing them. ".repeat(24)}`;
    const messages: ChatCompletionMessageParam[] = [
      { role: "system", content: system },
      { role: "user", content: "The tests fail. Find out why." },
    ];
    const turn = async () => {
      const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 0 }, { headers });
      messages.push({ role: "assistant", content: r.choices[0]!.message.content ?? "" });
      // The agent's tool runs before the next turn: a visible pause on the timeline.
      await new Promise((resolve) => setTimeout(resolve, 400));
      return r;
    };
    await turn();
    messages.push({ role: "user", content: `Tool output: <script>alert('x')</script> ${"FAIL src/parser.test.ts line 42 ".repeat(6)}` });
    const r2 = await turn();
    expect(r2.usage!.prompt_tokens_details?.cached_tokens).toBeGreaterThan(0);
    // Turn 3: the client edits its first user message, which breaks the cached prefix there.
    messages[1] = { role: "user", content: "The tests fail on CI only. Find out why." };
    messages.push({ role: "user", content: "Now fix it." });
    await turn();

    const state = (await (await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories/${id}`, { headers: { authorization: "Bearer sk-local-dev" } })).json()) as { turns: StateTurn[] };
    expect(state.turns.map((t) => t.full_reason)).toEqual(["first-turn", null, "diverged"]);
    // The explainer: an edit of message 1's text that is no timestamp, id or JSON is "other".
    expect(state.turns[2]!.prefix_break).toMatchObject({ cause: "other", message: 1, field: "content", offset: "The tests fail".length });

    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    const dialogs: string[] = [];
    page.on("dialog", (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    // The key once in the URL; the edge answers with the cookie and a redirect without it.
    const res = await page.goto(`${stack.edgeUrl}/v1/tenants/local/trajectories/${id}/inspect?key=sk-local-dev`);
    expect(res!.status()).toBe(200);
    expect(page.url()).toBe(`${stack.edgeUrl}/v1/tenants/local/trajectories/${id}/inspect`);
    expect((await context.cookies()).map((c) => [c.name, c.httpOnly, c.sameSite, c.path])).toEqual([["agent_edge_inspect", true, "Strict", "/v1/tenants/local"]]);

    // At 1280 px the turn table fits its panel (the last column's header inside it), or the panel scrolls sideways.
    const fit = await page.locator("table.turns").evaluate((table) => {
      const panel = table.parentElement!;
      const last = table.querySelector("thead th:last-child")!.getBoundingClientRect();
      const box = panel.getBoundingClientRect();
      return { lastInside: last.right <= box.right + 0.5 && last.left >= box.left, scrolls: panel.scrollWidth > panel.clientWidth && (panel.ownerDocument.defaultView as unknown as { getComputedStyle(e: unknown): { overflowX: string } }).getComputedStyle(panel).overflowX === "auto", lastHeader: table.querySelector("thead th:last-child")!.textContent };
    });
    expect(fit.lastInside || fit.scrolls, JSON.stringify(fit)).toBe(true);
    // This trajectory's figures are typical: its table fits without scrolling, the drafts column
    // (the backend speculates: accepted/drafted per turn) included.
    expect(fit.lastInside, JSON.stringify(fit)).toBe(true);
    const drafts = await page.locator("table.turns td.drafts").allTextContents();
    expect(drafts).toHaveLength(3);
    for (const d of drafts) expect(d).toMatch(/^\d+\/\d+$/);

    // Bars: three segments per turn carrying the recorded numbers, drawn with width.
    const segs = page.locator("svg.token-bars rect.seg");
    await expect.poll(() => segs.count()).toBe(9);
    for (const t of state.turns) {
      for (const [kind, tokens] of [["cached", t.cached_tokens], ["computed", t.computed_tokens], ["completion", t.completion_tokens]] as const) {
        const rect = page.locator(`svg.token-bars rect.seg[data-turn="${t.turn}"][data-kind="${kind}"]`);
        expect(Number(await rect.getAttribute("data-tokens"))).toBe(tokens);
        expect(await rect.locator("title").textContent()).toContain(`turn ${t.turn}: ${tokens.toLocaleString("en-US")} ${kind}`);
        const box = await rect.boundingBox();
        if (tokens > 0) expect(box!.width, `turn ${t.turn} ${kind}`).toBeGreaterThan(0);
      }
    }
    // The break marker on turn 3, with its cause, on the bars, the timeline and in the details.
    const marker = page.locator('svg.token-bars g.break-marker[data-turn="3"]');
    await expect.poll(() => marker.isVisible()).toBe(true);
    expect(await marker.textContent()).toContain("other");
    expect(await page.locator("svg.token-bars g.break-marker").count()).toBe(1);
    expect(await page.locator('svg.timeline line.break-tick[data-turn="3"]').count()).toBe(1);
    expect(await page.locator("svg.timeline g.pause").count()).toBe(2);
    const detail = page.locator('.break-detail[data-turn="3"]');
    // The first differing text, side by side: as stored and as sent.
    expect(await detail.textContent()).toContain("The tests fail. Find out why.");
    expect(await detail.textContent()).toContain("The tests fail on CI only. Find out why.");
    expect(await page.locator("#hit-rate b").textContent()).toMatch(/^\d+\.\d%$/);
    expect(await page.locator("#time-saved").textContent()).toContain("estimate");
    // User text is text: the <script> in the tool output shows as such and never ran.
    await page.locator("details.transcript summary").click();
    expect(await page.locator('.msg[data-index="1"] pre').textContent()).toBe("The tests fail on CI only. Find out why.");
    expect(await page.locator('.msg[data-index="3"] pre').textContent()).toContain("Tool output: <script>alert('x')</script> FAIL");
    expect(dialogs).toEqual([]);

    mkdirSync(ARTIFACTS, { recursive: true });
    const shot = join(ARTIFACTS, "inspector.png");
    await page.screenshot({ path: shot, fullPage: true });
    expect(statSync(shot).size).toBeGreaterThan(10_000);

    // The list page, through the same cookie (scoped to the tenant's paths).
    await page.locator(`a[href="/v1/tenants/local/inspect"]`).click();
    await page.waitForURL(`${stack.edgeUrl}/v1/tenants/local/inspect`);
    const row = page.locator(`tr[data-id="${id}"]`);
    // The index is written after each answer: reload until the last turn's note is in.
    await expect
      .poll(
        async () => {
          await page.reload();
          return (await row.count()) > 0 ? Number(await row.locator("td.turns").textContent()) : 0;
        },
        { timeout: 15_000, interval: 250 },
      )
      .toBe(3);
    const cached = state.turns.reduce((s, t) => s + t.cached_tokens, 0);
    const prompt = state.turns.reduce((s, t) => s + t.prompt_tokens, 0);
    expect(await row.locator("td.hit-rate").textContent()).toContain(`${((cached / prompt) * 100).toFixed(1)}%`);
    await page.screenshot({ path: join(ARTIFACTS, "inspector-list.png"), fullPage: true });
    await context.close();
  });
});
