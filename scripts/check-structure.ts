import { execFileSync } from "node:child_process";
import { readFileSync, realpathSync } from "node:fs";
import { posix } from "node:path";
import { fileURLToPath } from "node:url";
import { citedFiles, missingCitations, type Citation } from "./cited-files";
import { lineAt, maskLiterals } from "./source-scan";

/**
 * The repository's structure rules, checked over every tracked `.ts` file (tests included):
 * - no import cycle between files;
 * - no import cycle between folders (a file's folder is its directory);
 * - layers: `protocol/` imports nothing else of the repo; `gpu-backend/kv/` and
 *   `gpu-backend/scheduler/` import only `protocol/` and each other;
 * - no file over {@link MAX_LINES} lines;
 * - a comment that names a `.ts` file names one of the repo (cited-files.ts).
 *
 * An import is any of `import ... from "x"`, `import type ... from "x"`, `export ... from "x"`,
 * `import "x"`, `import("x")` (a dynamic import or an `import("x").T` type reference). Only
 * relative specifiers count (`./<name>` resolves to `<name>.ts`, `<name>/index.ts` or
 * `<name>.d.ts`; a `.js` ending is dropped); packages, `node:` and `cloudflare:` specifiers are
 * not part of the repo.
 *
 * `npx tsx scripts/check-structure.ts` (or `npm run check:structure`) prints the violations and
 * exits 1, or prints a one-line summary and exits 0.
 *
 * @example
 * const graph = collectImports("/path/to/repo");
 * const violations = findViolations(graph);
 */

export const MAX_LINES = 500;

/** One `.ts` file of the repo: its path from the root (posix separators) and its line count. */
export interface SourceFile {
  path: string;
  lines: number;
}

/** `from` imports `to` (both repo paths) with `specifier`, written on `line` (1-based) of `from`. */
export interface ImportEdge {
  from: string;
  to: string;
  specifier: string;
  line: number;
}

/** A relative specifier that names no file of the repo (reported, since it hides an edge). */
export interface UnresolvedImport {
  from: string;
  specifier: string;
  line: number;
}

export interface ImportGraph {
  files: SourceFile[];
  imports: ImportEdge[];
  unresolved: UnresolvedImport[];
  /** The `.ts` file names the files' comments cite. */
  citations: Citation[];
}

/** Files under any of `files` (folder prefixes ending in "/") may import only files under `mayImport`. */
export interface LayerRule {
  name: string;
  files: string[];
  mayImport: string[];
}

export const LAYER_RULES: LayerRule[] = [
  { name: "protocol imports nothing else of the repo", files: ["protocol/"], mayImport: ["protocol/"] },
  {
    name: "gpu-backend/kv and gpu-backend/scheduler import only protocol and each other",
    files: ["gpu-backend/kv/", "gpu-backend/scheduler/"],
    mayImport: ["protocol/", "gpu-backend/kv/", "gpu-backend/scheduler/"],
  },
];

export type ViolationRule = "file-cycle" | "folder-cycle" | "layer" | "file-length" | "unresolved-import" | "missing-cited-file";

export interface Violation {
  rule: ViolationRule;
  message: string;
}

/** The tracked `.ts` files under `root` (`git ls-files '*.ts'`), node_modules left out. */
export function trackedTsFiles(root: string): string[] {
  const out = execFileSync("git", ["ls-files", "-z", "--", "*.ts"], { cwd: root, encoding: "utf8", maxBuffer: 64 << 20 });
  return out
    .split("\0")
    .filter((p) => p !== "" && !p.split("/").includes("node_modules"))
    .sort();
}

/** Reads `paths` under `root` (default: the tracked `.ts` files) and returns their imports between each other and the files their comments cite. */
export function collectImports(root: string, paths: string[] = trackedTsFiles(root)): ImportGraph {
  const known = new Set(paths);
  const graph: ImportGraph = { files: [], imports: [], unresolved: [], citations: [] };
  for (const path of paths) {
    let text: string;
    try {
      text = readFileSync(posix.join(root, path), "utf8");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") continue; // tracked, deleted in the working tree
      throw e;
    }
    graph.files.push({ path, lines: countLines(text) });
    for (const { specifier, line } of extractImports(text)) {
      if (!isRelative(specifier)) continue;
      const to = resolveImport(path, specifier, known);
      if (to === undefined) graph.unresolved.push({ from: path, specifier, line });
      else graph.imports.push({ from: path, to, specifier, line });
    }
    for (const { name, line } of citedFiles(text)) graph.citations.push({ from: path, name, line });
  }
  return graph;
}

/** Every rule's violations over `graph`, in the order: cycles, layers, file lengths, unresolved imports, missing cited files. */
export function findViolations(graph: ImportGraph, layers: LayerRule[] = LAYER_RULES, maxLines = MAX_LINES): Violation[] {
  return [
    ...fileCycles(graph),
    ...folderCycles(graph),
    ...layerViolations(graph, layers),
    ...longFiles(graph, maxLines),
    ...graph.unresolved.map((u): Violation => ({
      rule: "unresolved-import",
      message: `unresolved import: ${u.from}:${u.line} imports "${u.specifier}", which is no .ts file of the repo`,
    })),
    ...missingCitations(graph.citations, new Set(graph.files.map((f) => f.path))).map((c): Violation => ({
      rule: "missing-cited-file",
      message: `missing cited file: a comment at ${c.from}:${c.line} names "${c.name}", which is no .ts file of the repo`,
    })),
  ];
}

export function fileCycles(graph: ImportGraph): Violation[] {
  const edges = graph.imports.map((e) => ({ from: e.from, to: e.to, example: `${e.from}:${e.line} imports "${e.specifier}"` }));
  return cycles(edges).map((c) => ({ rule: "file-cycle", message: `import cycle between files: ${describeCycle(c)}` }));
}

export function folderCycles(graph: ImportGraph): Violation[] {
  const edges = graph.imports
    .map((e) => ({ from: folderOf(e.from), to: folderOf(e.to), example: `${e.from}:${e.line} imports "${e.specifier}"` }))
    .filter((e) => e.from !== e.to);
  return cycles(edges).map((c) => ({ rule: "folder-cycle", message: `import cycle between folders: ${describeCycle(c)}` }));
}

export function layerViolations(graph: ImportGraph, layers: LayerRule[] = LAYER_RULES): Violation[] {
  const out: Violation[] = [];
  for (const layer of layers) {
    for (const e of graph.imports) {
      if (!layer.files.some((f) => e.from.startsWith(f))) continue;
      if (layer.mayImport.some((m) => e.to.startsWith(m))) continue;
      out.push({ rule: "layer", message: `layer (${layer.name}): ${e.from}:${e.line} imports ${e.to}` });
    }
  }
  return out;
}

export function longFiles(graph: ImportGraph, maxLines = MAX_LINES): Violation[] {
  return graph.files
    .filter((f) => f.lines > maxLines)
    .map((f) => ({ rule: "file-length", message: `file over ${maxLines} lines: ${f.path} (${f.lines})` }));
}

/** A file's folder: its directory, "." for a file at the root. */
export function folderOf(path: string): string {
  return posix.dirname(path);
}

export function isRelative(specifier: string): boolean {
  return specifier === "." || specifier === ".." || specifier.startsWith("./") || specifier.startsWith("../");
}

/** The repo file that relative `specifier`, written in `from`, names, among `known`; undefined if none. */
export function resolveImport(from: string, specifier: string, known: ReadonlySet<string>): string | undefined {
  let base = posix.normalize(posix.join(posix.dirname(from), specifier));
  if (base.endsWith("/")) base = base.slice(0, -1);
  for (const ext of [".js", ".mjs", ".ts"]) {
    if (base.endsWith(ext)) {
      base = base.slice(0, -ext.length);
      break;
    }
  }
  return [`${base}.ts`, `${base}/index.ts`, `${base}.d.ts`].find((c) => known.has(c));
}

/** Newline-terminated lines, plus a last line without a newline (what editors show). */
export function countLines(text: string): number {
  if (text === "") return 0;
  const newlines = text.split("\n").length - 1;
  return text.endsWith("\n") ? newlines : newlines + 1;
}

/**
 * The module specifiers `text` imports, with their 1-based lines. Comments do not count, nor does
 * text inside string or template literals (a test that writes source code in a string imports
 * nothing by it).
 */
export function extractImports(text: string): { specifier: string; line: number }[] {
  const { code, strings } = maskLiterals(text);
  const str = `(["'])#(\\d+)\\1`; // a masked string literal: quote, #index, same quote
  const patterns = [
    // import x from "a"; import { a,\n b } from "a"; import type ...; export { a } from "a"; export * from "a"
    new RegExp(`(?<![\\w$.])(?:import|export)(?![\\w$])[^;"'\`()]*?(?<![\\w$.])from\\s*${str}`, "g"),
    // import "a"
    new RegExp(`(?<![\\w$.])import\\s*${str}`, "g"),
    // import("a"), typeof import("a"), import("a").T
    new RegExp(`(?<![\\w$.])import\\s*\\(\\s*${str}\\s*[,)]`, "g"),
  ];
  const found: { specifier: string; line: number; index: number }[] = [];
  for (const re of patterns) {
    for (const m of code.matchAll(re)) {
      const specifier = strings[Number(m[2])];
      if (specifier === undefined) continue;
      const index = m.index ?? 0;
      found.push({ specifier, index, line: lineAt(code, index + m[0].length) });
    }
  }
  return found.sort((a, b) => a.index - b.index).map(({ specifier, line }) => ({ specifier, line }));
}

interface LabelledEdge {
  from: string;
  to: string;
  example: string;
}

/** One cycle per strongly connected component with a cycle: its nodes in order, with the edge into each next one. */
function cycles(edges: LabelledEdge[]): { members: string[]; path: LabelledEdge[] }[] {
  const adjacency = new Map<string, Map<string, LabelledEdge>>();
  for (const e of edges) {
    const out = adjacency.get(e.from) ?? new Map<string, LabelledEdge>();
    if (!out.has(e.to)) out.set(e.to, e); // the first import seen is the example
    adjacency.set(e.from, out);
  }
  const nodes = [...new Set(edges.flatMap((e) => [e.from, e.to]))].sort();
  const result: { members: string[]; path: LabelledEdge[] }[] = [];
  for (const scc of stronglyConnectedComponents(nodes, (v) => [...(adjacency.get(v)?.keys() ?? [])].sort())) {
    const members = [...scc].sort();
    const start = members[0]!;
    const selfLoop = adjacency.get(start)?.get(start);
    if (members.length === 1 && !selfLoop) continue;
    result.push({ members, path: selfLoop ? [selfLoop] : shortestCycle(start, new Set(members), adjacency) });
  }
  return result.sort((a, b) => (a.members[0]! < b.members[0]! ? -1 : 1));
}

/** The shortest path start -> ... -> start inside `within` (breadth-first). */
function shortestCycle(start: string, within: Set<string>, adjacency: Map<string, Map<string, LabelledEdge>>): LabelledEdge[] {
  const via = new Map<string, LabelledEdge>();
  const queue = [start];
  for (let k = 0; k < queue.length; k++) {
    const v = queue[k]!;
    for (const [w, e] of [...(adjacency.get(v) ?? [])].sort(([a], [b]) => (a < b ? -1 : 1))) {
      if (!within.has(w)) continue;
      if (w === start) {
        const path = [e];
        for (let u = v; u !== start; ) {
          const back = via.get(u)!;
          path.unshift(back);
          u = back.from;
        }
        return path;
      }
      if (!via.has(w)) {
        via.set(w, e);
        queue.push(w);
      }
    }
  }
  throw new Error(`no cycle through ${start}`); // unreachable: start is in a strongly connected component
}

function describeCycle({ members, path }: { members: string[]; path: LabelledEdge[] }): string {
  const lines = [[path[0]!.from, ...path.map((e) => e.to)].join(" -> ")];
  for (const e of path) lines.push(`    ${e.from} -> ${e.to}: ${e.example}`);
  if (members.length > path.length) lines.push(`    (${members.length} in this cycle's component: ${members.join(", ")})`);
  return lines.join("\n");
}

/** Tarjan's algorithm, iterative: the strongly connected components of the graph, each as its nodes. */
export function stronglyConnectedComponents(nodes: string[], successors: (v: string) => string[]): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const components: string[][] = [];
  let counter = 0;
  for (const root of nodes) {
    if (index.has(root)) continue;
    const work: { v: string; next: string[]; k: number }[] = [];
    const visit = (v: string) => {
      index.set(v, counter);
      low.set(v, counter);
      counter++;
      stack.push(v);
      onStack.add(v);
      work.push({ v, next: successors(v), k: 0 });
    };
    visit(root);
    while (work.length > 0) {
      const frame = work[work.length - 1]!;
      if (frame.k < frame.next.length) {
        const w = frame.next[frame.k++]!;
        if (!index.has(w)) visit(w);
        else if (onStack.has(w)) low.set(frame.v, Math.min(low.get(frame.v)!, index.get(w)!));
        continue;
      }
      work.pop();
      const parent = work[work.length - 1];
      if (parent) low.set(parent.v, Math.min(low.get(parent.v)!, low.get(frame.v)!));
      if (low.get(frame.v) === index.get(frame.v)) {
        const component: string[] = [];
        let w: string;
        do {
          w = stack.pop()!;
          onStack.delete(w);
          component.push(w);
        } while (w !== frame.v);
        components.push(component);
      }
    }
  }
  return components;
}

/** Checks the repository containing this script; prints the violations (exit 1) or a summary (exit 0). */
function main(): void {
  const root = posix.normalize(fileURLToPath(new URL("..", import.meta.url)));
  const graph = collectImports(root);
  const violations = findViolations(graph);
  const summary = `${graph.files.length} .ts files, ${graph.imports.length} imports between them`;
  if (violations.length === 0) {
    console.log(`check-structure: OK (${summary}; no cycles, layers kept, no file over ${MAX_LINES} lines, the ${graph.citations.length} .ts file names in comments all name repo files)`);
    return;
  }
  console.error(`check-structure: ${violations.length} violation(s) (${summary}):`);
  for (const v of violations) console.error(`- ${v.message}`);
  process.exitCode = 1;
}

/** True when this file is the program being run (not imported, e.g. by its test). */
const isMain = process.argv[1] !== undefined && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url));
if (isMain) main();
