/**
 * Volatile blocks that agents place early in their prompts, each a prefix-break cause of its own
 * when the difference between two turns lies inside one (prefix-break.ts checks these before
 * `timestamp` and `random-id`):
 *
 *   git-status  inside Claude Code's git status section (`gitStatus:` or a `# gitStatus` heading:
 *               branch, status lines, recent commits)
 *   cwd         on a working-directory line (`Working directory: ...`, ` - Primary working directory:`,
 *               `cwd: ...`, Qwen Code's `I'm currently working in the directory: ...`) or inside a
 *               `<cwd>...</cwd>` tag (Codex's environment_context)
 *   date        a calendar date without a time of day (`Today's date: 2026-12-06`, `Dec 6, 2026`,
 *               `12/06/2026`); a change that includes a time stays `timestamp`
 *   env         elsewhere inside an `<env>...</env>` or `<environment_context>...</environment_context>`
 *               block, or a `# Environment` section (Claude Code 2.1: platform, shell, OS version)
 *
 * The changed span (first difference to the common suffix) must lie inside the block in both texts.
 */

export type VolatileCause = "git-status" | "cwd" | "date" | "env";

/** The section headings inside Claude Code's gitStatus block (a blank line before any other ends it). */
const GIT_HEADINGS = /^(Current branch|Main branch|Status|Recent commits|Git user)\b/;
const CWD_LINE = /^\s*(?:[-*]\s+)?(Primary working directory|Current working directory|Working directory|Additional working directories|cwd|I'm currently working in the directory)\s*:/i;
const DATE_ONLY = [
  /\b\d{4}-\d{2}-\d{2}\b(?![T ]\d)/,
  /\b\d{1,2}\/\d{1,2}\/\d{2,4}\b(?!,?\s*\d{1,2}:)/,
  /\b((Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,?\s+)?(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?\s+\d{1,2}(,\s*\d{4})?\b(?!,?\s*\d{1,2}:)/,
  /\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,?\s+\d{1,2}\s+(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*(\s+\d{4})?\b(?!\s*\d{1,2}:)/,
];
const ENV_BLOCKS: [open: string, close: string][] = [
  ["<env>", "</env>"],
  ["<environment_context>", "</environment_context>"],
];

/**
 * The volatile block both texts differ inside, if any. `offset`: the first difference; `endA` /
 * `endB`: where the changed span ends in each text.
 *
 * @example volatileCause("cwd: /a\nhi", "cwd: /b\nhi", 6, 7, 7) // "cwd"
 */
export function volatileCause(a: string, b: string, offset: number, endA: number, endB: number): VolatileCause | undefined {
  const both = (inside: (s: string, end: number) => boolean) => inside(a, endA) && inside(b, endB);
  if (both((s, end) => inGitStatus(s, offset, end))) return "git-status";
  if (both((s, end) => onCwdLine(s, offset, end))) return "cwd";
  if (both((s, end) => coveredBy(DATE_ONLY, s, offset, end))) return "date";
  if (both((s, end) => ENV_BLOCKS.some(([open, close]) => inBlock(s, offset, end, open, close)) || inEnvironmentSection(s, offset, end))) return "env";
  return undefined;
}

/**
 * Whether [offset, end) lies inside a git status section: from `gitStatus:` or a `# gitStatus`
 * heading to the first blank line not followed by one of its headings, the next `# ` heading or
 * the end of the `<system-reminder>` holding it.
 */
function inGitStatus(s: string, offset: number, end: number): boolean {
  const start = Math.max(s.lastIndexOf("gitStatus:", offset), s.lastIndexOf("# gitStatus", offset));
  if (start < 0) return false;
  let stop = sectionEnd(s, start);
  for (let at = s.indexOf("\n\n", start); at >= 0 && at < stop; at = s.indexOf("\n\n", at + 2)) {
    const next = s.slice(at + 2).replace(/^\n+/, "");
    if (!GIT_HEADINGS.test(next)) {
      stop = at;
      break;
    }
  }
  return offset > start && end <= stop;
}

/** Where a section that starts at `start` ends: the next `# ` heading, `</system-reminder>`, or the end. */
function sectionEnd(s: string, start: number): number {
  const ends = [s.indexOf("\n# ", start + 1), s.indexOf("</system-reminder>", start)].filter((i) => i >= 0);
  return ends.length > 0 ? Math.min(...ends) : s.length;
}

/** Whether [offset, end) lies inside a `# Environment` section. */
function inEnvironmentSection(s: string, offset: number, end: number): boolean {
  const start = s.lastIndexOf("# Environment", offset);
  return start >= 0 && (start === 0 || s[start - 1] === "\n") && offset > start && end <= sectionEnd(s, start);
}

/** Whether [offset, end) lies on one working-directory line, or inside a `<cwd>` tag. */
function onCwdLine(s: string, offset: number, end: number): boolean {
  const lineStart = s.lastIndexOf("\n", offset - 1) + 1;
  const newline = s.indexOf("\n", offset);
  const lineEnd = newline < 0 ? s.length : newline;
  if (end > lineEnd) return false;
  return CWD_LINE.test(s.slice(lineStart, lineEnd)) || inBlock(s, offset, end, "<cwd>", "</cwd>");
}

/** Whether [offset, end) lies between an `open` tag before it and its `close` after it. */
function inBlock(s: string, offset: number, end: number, open: string, close: string): boolean {
  const start = s.lastIndexOf(open, offset);
  if (start < 0 || s.lastIndexOf(close, offset) > start) return false;
  const stop = s.indexOf(close, start);
  return stop >= 0 && end <= stop;
}

/** Whether one match of a pattern covers [offset, max(end, offset + 1)) in `s`. */
export function coveredBy(patterns: readonly RegExp[], s: string, offset: number, end: number, window = 40): boolean {
  const from = Math.max(0, offset - window);
  const text = s.slice(from, Math.min(s.length, Math.max(end, offset + 1) + window));
  return patterns.some((p) => {
    for (const m of text.matchAll(new RegExp(p.source, p.flags.includes("g") ? p.flags : p.flags + "g"))) {
      const start = from + m.index!;
      if (start <= offset && start + m[0].length >= Math.max(end, offset + 1)) return true;
    }
    return false;
  });
}
