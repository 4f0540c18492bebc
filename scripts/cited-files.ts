import { posix } from "node:path";
import { lineAt, maskLiterals } from "./source-scan";

/**
 * The structure rule that a comment naming a `.ts` file names one that exists, so a comment does
 * not send its reader to a file that was renamed or never written.
 *
 * A name counts when it is a whole word ending in `.ts` (`kv-stream.ts`, `routing/placement.ts`,
 * `../protocol/messages.ts`); patterns and placeholders (`*.test.ts`, `<family>.ts`,
 * `${name}.ts`), names inside URLs and names under `node_modules/` do not. It exists when
 * (`citesKnownFile`):
 * - it starts with `./` or `../`: that path from the citing file's folder is a repo file;
 * - it has a folder: a repo file has that path from the root, from the citing file's folder, or
 *   ends with it (`routing/placement.ts` names `durable-objects/routing/placement.ts`);
 * - it is a bare name: some repo file has that name, in any folder.
 *
 * @example
 * citedFiles("// see turn-runner.ts and https://x.dev/a.ts\nconst a = 1;") // [{ name: "turn-runner.ts", line: 1 }]
 */

/** `from` (a repo path) names `name` in a comment on `line` (1-based). */
export interface Citation {
  from: string;
  name: string;
  line: number;
}

/** A URL, up to the next space, quote or closing bracket: its file names are another site's. */
const URL_RE = /\b[a-z][a-z0-9+.-]*:\/\/[^\s"'`<>)\]]*/gi;
/** A whole word ending in ".ts": not right after another name character, a glob star or a placeholder's bracket. */
const NAME_RE = /(?<![\w.*/<>{}$@-])(?:\.\.?\/)*(?:[\w-][\w.-]*\/)*[\w-][\w.-]*\.ts(?![\w/-])/g;

/** The `.ts` file names written in `text`'s comments, in order, with the line each is on. */
export function citedFiles(text: string): { name: string; line: number }[] {
  const out: { name: string; line: number }[] = [];
  for (const comment of maskLiterals(text).comments) {
    // Blank out URLs (same length, so offsets stay those of the comment).
    const words = comment.text.replace(URL_RE, (url) => " ".repeat(url.length));
    for (const m of words.matchAll(NAME_RE)) {
      if (m[0].split("/").includes("node_modules")) continue;
      out.push({ name: m[0], line: lineAt(text, comment.start + (m.index ?? 0)) });
    }
  }
  return out;
}

/** Whether `name`, cited in `from`, names a file of `known` (repo paths), by the rules above. */
export function citesKnownFile(from: string, name: string, known: ReadonlySet<string>): boolean {
  const here = posix.dirname(from);
  if (name.startsWith("./") || name.startsWith("../")) return known.has(posix.normalize(posix.join(here, name)));
  if (name.includes("/")) {
    if (known.has(name) || known.has(posix.normalize(posix.join(here, name)))) return true;
    for (const path of known) if (path.endsWith(`/${name}`)) return true;
    return false;
  }
  for (const path of known) if (posix.basename(path) === name) return true;
  return false;
}

/** The citations of `citations` that name no file of `known`. */
export function missingCitations(citations: readonly Citation[], known: ReadonlySet<string>): Citation[] {
  return citations.filter((c) => !citesKnownFile(c.from, c.name, known));
}
