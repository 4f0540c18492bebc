import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  collectImports,
  extractImports,
  findViolations,
  resolveImport,
  stronglyConnectedComponents,
  trackedTsFiles,
  type Violation,
} from "../scripts/check-structure";
import { citedFiles, citesKnownFile } from "../scripts/cited-files";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Writes `files` (repo path -> contents) under a fresh temp dir; returns the dir and the paths. */
function tree(files: Record<string, string>): { root: string; paths: string[] } {
  const root = mkdtempSync(join(tmpdir(), "check-structure-"));
  dirs.push(root);
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  return { root, paths: Object.keys(files).sort() };
}

function violationsOf(files: Record<string, string>): Violation[] {
  const { root, paths } = tree(files);
  return findViolations(collectImports(root, paths));
}

const rules = (vs: Violation[]) => vs.map((v) => v.rule);

describe("extractImports", () => {
  it("finds every kind of import, with its line", () => {
    const text = [
      'import { a } from "./a";', // 1
      'import type { B } from "./b";', // 2
      "import {", // 3
      "  c,",
      "  d,",
      '} from "./cd";', // 6
      'export { e } from "./e";', // 7
      'export * from "./f";', // 8
      'export type { G } from "./g";', // 9
      'import "./side-effect";', // 10
      'const h = await import("./h");', // 11
      'type I = import("./i").I;', // 12
      'let j: typeof import("../j");', // 13
      "import * as k from './k';", // 14
      'import l, { m } from "node:fs";', // 15
    ].join("\n");
    expect(extractImports(text)).toEqual([
      { specifier: "./a", line: 1 },
      { specifier: "./b", line: 2 },
      { specifier: "./cd", line: 6 },
      { specifier: "./e", line: 7 },
      { specifier: "./f", line: 8 },
      { specifier: "./g", line: 9 },
      { specifier: "./side-effect", line: 10 },
      { specifier: "./h", line: 11 },
      { specifier: "./i", line: 12 },
      { specifier: "../j", line: 13 },
      { specifier: "./k", line: 14 },
      { specifier: "node:fs", line: 15 },
    ]);
  });

  it("ignores imports in comments, strings and template literals, and keeps line numbers after them", () => {
    const text = [
      '// import { a } from "./commented";',
      "/* import { b } from \"./block\";",
      '   import "./block2"; */',
      'const s = "import { c } from \'./in-string\'";',
      'const t = `import("./in-template")\n${"x"}`;',
      'const u = "http://example.com"; const re = /["\']/g;',
      'import { real } from "./real";', // line 8 (the template spans two lines)
    ].join("\n");
    expect(extractImports(text)).toEqual([{ specifier: "./real", line: 8 }]);
  });

  it("finds a dynamic import inside a template literal's ${} expression", () => {
    expect(extractImports('const m = `${(await import("./inner")).name}`;').map((i) => i.specifier)).toEqual(["./inner"]);
  });
});

describe("resolveImport", () => {
  const known = new Set(["a/x.ts", "a/dir/index.ts", "a/types.d.ts", "b/y.ts"]);
  it("resolves x.ts, x/index.ts and x.d.ts, dropping a .js ending", () => {
    expect(resolveImport("a/m.ts", "./x", known)).toBe("a/x.ts");
    expect(resolveImport("a/m.ts", "./x.js", known)).toBe("a/x.ts");
    expect(resolveImport("a/m.ts", "./dir", known)).toBe("a/dir/index.ts");
    expect(resolveImport("a/m.ts", "./types", known)).toBe("a/types.d.ts");
    expect(resolveImport("a/dir/index.ts", "../../b/y", known)).toBe("b/y.ts");
  });
  it("returns undefined for a file that is not in the repo", () => {
    expect(resolveImport("a/m.ts", "./nope", known)).toBeUndefined();
  });
});

describe("file cycles", () => {
  const forms = {
    "import": 'import { b } from "./b";',
    "import type": 'import type { B } from "./b";',
    "export from": 'export { b } from "./b";',
    "side-effect import": 'import "./b";',
    "dynamic import": 'export const load = () => import("./b");',
    "import() type": 'export type B = import("./b").B;',
  };
  for (const [form, line] of Object.entries(forms)) {
    it(`fails on a cycle closed by ${form}`, () => {
      const vs = violationsOf({ "m/a.ts": `${line}\nexport const a = 1;\n`, "m/b.ts": 'import { a } from "./a";\nexport type B = 1;\n' });
      expect(rules(vs)).toEqual(["file-cycle"]);
      expect(vs[0]!.message).toContain("m/a.ts -> m/b.ts -> m/a.ts");
      expect(vs[0]!.message).toContain('m/b.ts:1 imports "./a"');
    });
  }

  it("reports a three-file cycle as one path, and a self-import", () => {
    const vs = violationsOf({
      "a.ts": 'import "./b";',
      "b.ts": 'import "./c";',
      "c.ts": 'import "./a";',
      "self.ts": 'import "./self";',
    });
    expect(vs.map((v) => v.message.split("\n")[0])).toEqual([
      "import cycle between files: a.ts -> b.ts -> c.ts -> a.ts",
      "import cycle between files: self.ts -> self.ts",
    ]);
  });

  it("passes an acyclic tree, and a commented-out import does not make a cycle", () => {
    const vs = violationsOf({
      "m/a.ts": 'import { b } from "./b";\n// import { c } from "./c";\n',
      "m/b.ts": 'import { c } from "./c";\nimport { readFileSync } from "node:fs";\n',
      "m/c.ts": '/* import { a } from "./a"; */\nexport const c = 1;\n',
    });
    expect(vs).toEqual([]);
  });
});

describe("folder cycles", () => {
  it("fails when two folders import each other without any file cycle, naming one import per edge", () => {
    const vs = violationsOf({
      "top/a.ts": 'import { b } from "./sub/b";\nexport const a = 1;\n',
      "top/c.ts": "export const c = 1;\n",
      "top/sub/b.ts": 'import { c } from "../c";\nexport const b = 1;\n',
    });
    expect(rules(vs)).toEqual(["folder-cycle"]);
    expect(vs[0]!.message).toContain("top -> top/sub -> top");
    expect(vs[0]!.message).toContain('top/a.ts:1 imports "./sub/b"');
    expect(vs[0]!.message).toContain('top/sub/b.ts:1 imports "../c"');
  });

  it("passes when imports between folders go one way", () => {
    const vs = violationsOf({
      "top/a.ts": 'import { b } from "./sub/b";\nimport { c } from "./c";\n',
      "top/c.ts": 'import { b } from "./sub/b";\n',
      "top/sub/b.ts": 'import { d } from "../../other/d";\n',
      "other/d.ts": "export const d = 1;\n",
    });
    expect(vs).toEqual([]);
  });
});

describe("layers", () => {
  it("fails when protocol/ (a source file or a test) imports another part of the repo", () => {
    const vs = violationsOf({
      "protocol/codec.ts": 'import { x } from "../src/x";\n',
      "protocol/codec.test.ts": 'import { helper } from "../test/support/helper";\n',
      "src/x.ts": "export const x = 1;\n",
      "test/support/helper.ts": "export const helper = 1;\n",
    });
    expect(rules(vs)).toEqual(["layer", "layer"]);
    expect(vs[0]!.message).toContain("protocol/codec.test.ts:1 imports test/support/helper.ts");
    expect(vs[1]!.message).toContain("protocol/codec.ts:1 imports src/x.ts");
  });

  it("passes protocol/ importing only protocol/ and packages", () => {
    const vs = violationsOf({
      "protocol/codec.ts": 'import { pack } from "msgpackr";\nimport { e } from "./errors";\n',
      "protocol/codec.test.ts": 'import { codec } from "./codec";\nimport { it } from "vitest";\n',
      "protocol/errors.ts": "export const e = 1;\n",
      "src/x.ts": 'import { e } from "../protocol/errors";\n',
    });
    expect(vs).toEqual([]);
  });

  it("fails when gpu-backend/kv or gpu-backend/scheduler imports outside protocol, kv and scheduler", () => {
    const vs = violationsOf({
      "gpu-backend/kv/pool.ts": 'import { m } from "../model/m";\n',
      "gpu-backend/scheduler/s.ts": 'import { e } from "../engine/e";\n',
      "gpu-backend/model/m.ts": "export const m = 1;\n",
      "gpu-backend/engine/e.ts": "export const e = 1;\n",
    });
    expect(rules(vs)).toEqual(["layer", "layer"]);
    expect(vs[0]!.message).toContain("gpu-backend/kv/pool.ts:1 imports gpu-backend/model/m.ts");
    expect(vs[1]!.message).toContain("gpu-backend/scheduler/s.ts:1 imports gpu-backend/engine/e.ts");
  });

  it("passes kv and scheduler importing protocol, each other and themselves", () => {
    const vs = violationsOf({
      "gpu-backend/kv/pool.ts": 'import { h } from "../../protocol/hash";\nimport { t } from "./types";\n',
      "gpu-backend/kv/types.ts": "export const t = 1;\n",
      "gpu-backend/scheduler/s.ts": 'import { pool } from "../kv/pool";\n',
      "gpu-backend/engine/e.ts": 'import { s } from "../scheduler/s";\n',
      "protocol/hash.ts": "export const h = 1;\n",
    });
    expect(vs).toEqual([]);
  });
});

describe("file length", () => {
  it("fails on a file over 500 lines and passes one of exactly 500", () => {
    const vs = violationsOf({ "long.ts": "const x = 1;\n".repeat(501), "ok.ts": "const x = 1;\n".repeat(500) });
    expect(vs.map((v) => v.message)).toEqual(["file over 500 lines: long.ts (501)"]);
  });
});

describe("unresolved relative imports", () => {
  it("are reported, since they would hide an edge", () => {
    expect(rules(violationsOf({ "a.ts": 'import { b } from "./missing";\n' }))).toEqual(["unresolved-import"]);
  });
});

describe("cited files", () => {
  it("finds .ts names in line and block comments, with their lines, and not in code, strings, URLs, patterns or node_modules", () => {
    const text = [
      "// see turn-runner.ts and `routing/placement.ts`.", // 1
      'const a = "strings.ts"; const b = `template.ts`;', // 2
      "/**", // 3
      " * ../protocol/messages.ts, https://github.com/x/y/blob/main/remote.ts, *.test.ts,", // 4
      " * <family>.ts, ${name}.ts, .d.ts, node_modules/pkg/index.ts, a.tsx, worker-configuration.d.ts", // 5
      " */", // 6
      "const c = 1; // kv-stream.ts:12", // 7
    ].join("\n");
    expect(citedFiles(text)).toEqual([
      { name: "turn-runner.ts", line: 1 },
      { name: "routing/placement.ts", line: 1 },
      { name: "../protocol/messages.ts", line: 4 },
      { name: "worker-configuration.d.ts", line: 5 },
      { name: "kv-stream.ts", line: 7 },
    ]);
  });

  it("resolves a name from the citing file's folder, from the root, as a path's tail, or as a bare file name", () => {
    const known = new Set(["durable-objects/routing/placement.ts", "durable-objects/turn/turn-runner.ts", "protocol/messages.ts"]);
    const cites = (from: string, name: string) => citesKnownFile(from, name, known);
    expect(cites("durable-objects/pool/pool-do.ts", "../routing/placement.ts")).toBe(true);
    expect(cites("durable-objects/pool/pool-do.ts", "./placement.ts")).toBe(false);
    expect(cites("src/index.ts", "protocol/messages.ts")).toBe(true);
    expect(cites("durable-objects/pool/pool-do.ts", "routing/placement.ts")).toBe(true);
    expect(cites("src/index.ts", "turn-runner.ts")).toBe(true);
    expect(cites("src/index.ts", "durable-objects/turn-runner.ts")).toBe(false);
    expect(cites("src/index.ts", "runner.ts")).toBe(false);
  });

  it("fails on a comment naming a missing file and passes one naming a file of the repo", () => {
    const vs = violationsOf({
      "a/one.ts": "// Parsed by b/two.ts, as three.ts says.\nexport const x = 1;\n",
      "b/two.ts": "/** Like one.ts, not like gone.ts. */\nexport const y = 2;\n",
    });
    expect(vs.map((v) => [v.rule, v.message])).toEqual([
      ["missing-cited-file", 'missing cited file: a comment at a/one.ts:1 names "three.ts", which is no .ts file of the repo'],
      ["missing-cited-file", 'missing cited file: a comment at b/two.ts:1 names "gone.ts", which is no .ts file of the repo'],
    ]);
  });
});

describe("trackedTsFiles", () => {
  it("lists the tracked .ts files only, without node_modules", () => {
    const { root } = tree({
      "a.ts": "",
      "dir/b.ts": "",
      "readme.md": "",
      "untracked.ts": "",
      "node_modules/pkg/index.ts": "",
    });
    execFileSync("git", ["init", "-q"], { cwd: root });
    execFileSync("git", ["add", "-f", "a.ts", "dir/b.ts", "readme.md", "node_modules/pkg/index.ts"], { cwd: root });
    expect(trackedTsFiles(root)).toEqual(["a.ts", "dir/b.ts"]);
  });
});

describe("stronglyConnectedComponents", () => {
  it("groups nodes that reach each other", () => {
    const edges: Record<string, string[]> = { a: ["b"], b: ["c", "d"], c: ["a"], d: ["e"], e: ["d"], f: [] };
    const sccs = stronglyConnectedComponents(Object.keys(edges), (v) => edges[v] ?? []).map((c) => c.sort().join(""));
    expect(sccs.sort()).toEqual(["abc", "de", "f"]);
  });
});

describe("the script as a module", () => {
  it("does not run its check when imported", () => {
    expect(process.exitCode).toBeUndefined();
  });
});
