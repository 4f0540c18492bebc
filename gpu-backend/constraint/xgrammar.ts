import Module, { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import type * as XGrammar from "@mlc-ai/web-xgrammar";

/**
 * xgrammar (the grammar engine of vLLM and SGLang) compiled to WebAssembly, as
 * `@mlc-ai/web-xgrammar` ships it: one UMD bundle with the wasm inlined. The package says
 * `"type": "module"`, but the bundle is CommonJS-or-global code that calls `require` and
 * `__filename` when no browser globals exist, so an ES import fails in Node ("require is not
 * defined in ES module scope"). It is compiled here as the CommonJS module it is; that is the
 * whole workaround, and the one place it lives.
 *
 * @example const { GrammarCompiler } = xgrammar();
 */
export type XGrammarModule = typeof XGrammar;

let loaded: XGrammarModule | undefined;

export function xgrammar(): XGrammarModule {
  if (!loaded) {
    const path = createRequire(import.meta.url).resolve("@mlc-ai/web-xgrammar");
    const mod = new Module(path) as Module & { _compile(source: string, filename: string): void };
    mod.filename = path;
    mod.paths = (Module as unknown as { _nodeModulePaths(from: string): string[] })._nodeModulePaths(path);
    mod._compile(readFileSync(path, "utf8"), path);
    loaded = mod.exports as XGrammarModule;
  }
  return loaded;
}
