import { existsSync, readFileSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { modelCacheDir } from "../checkpoint/demo-model";
import { downloadHubFile, type FileCheck } from "./hub-file";
import { hubConfig, hubGet, type HubConfig } from "./hub-http";
import { formatHubRef, type HubRef } from "./hub-ref";

/** One file of a repo revision as the hub lists it (`/api/models/{repo}/revision/{rev}?blobs=true`). */
export interface HubSibling {
  rfilename: string;
  size?: number;
  /** The git blob sha1 (small files). */
  blobId?: string;
  /** Present for LFS files: the sha256 and size of the real content. */
  lfs?: { sha256: string; size: number };
}

export interface HubDownloadOptions {
  /** Default: `<modelCacheDir>/hub`. */
  cacheDir?: string;
  /** HF_ENDPOINT and HF_TOKEN from here (default process.env). */
  env?: NodeJS.ProcessEnv;
  log?: (line: string) => void;
}

/** Written into a snapshot folder once every file of a whole-model download is there. */
const COMPLETE = ".agent-edge-complete.json";

/** Files of a transformers model besides its weights (those absent are skipped). */
const MODEL_FILES = new Set([
  "config.json",
  "generation_config.json",
  "tokenizer.json",
  "tokenizer_config.json",
  "special_tokens_map.json",
  "added_tokens.json",
  "tokenizer.model",
  "vocab.json",
  "merges.txt",
  "chat_template.json",
  "chat_template.jinja",
  "model.safetensors.index.json",
]);

/**
 * Fetches a model from the Hugging Face hub into the cache and returns its local path: the
 * snapshot folder (config, generation config, tokenizer files and safetensors weights: the shards
 * model.safetensors.index.json names, else every top-level *.safetensors) or, with `ref.file`,
 * that one file. Protocol: the revision's file list with sizes and LFS sha256
 * (`GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true`, whose `sha` is the commit), then
 * each file from `{endpoint}/{repo}/resolve/{commit}/{file}` (302 to the CDN for LFS files),
 * resumed and verified by downloadHubFile (hub-file.ts).
 *
 * Cache: `<cacheDir>/models--ORG--NAME/refs/<revision>` holds the commit a branch or tag resolved
 * to; files are in `snapshots/<commit>/`. A call whose revision resolves (through refs/, or a
 * commit hash) to a snapshot that has the file, or is complete, returns without the network: a
 * branch is not re-checked for new commits (delete its refs/ file, or pin a commit, to move).
 * With `HF_HUB_OFFLINE=1` a cache miss is an error instead of a download.
 *
 * @throws Error on an unreachable hub, a refusal (HF_TOKEN), a missing repo or file, a checksum mismatch
 * @example const dir = await downloadFromHub(parseHubRef("hf:HuggingFaceTB/SmolLM2-135M-Instruct"), { log: console.log });
 */
export async function downloadFromHub(ref: HubRef, options: HubDownloadOptions = {}): Promise<string> {
  const log = options.log ?? (() => {});
  const config = hubConfig(options.env);
  const repoDir = join(options.cacheDir ?? join(modelCacheDir(), "hub"), `models--${ref.repo.replace(/\//g, "--")}`);
  const refFile = join(repoDir, "refs", encodeURIComponent(ref.revision));
  const cachedCommit = /^[0-9a-f]{40}$/.test(ref.revision) ? ref.revision : existsSync(refFile) ? readFileSync(refFile, "utf8").trim() : undefined;
  if (cachedCommit) {
    const hit = cachedPath(join(repoDir, "snapshots", cachedCommit), ref);
    if (hit) {
      log(`${formatHubRef(ref)}: cached at ${hit} (commit ${cachedCommit.slice(0, 12)}), no download`);
      return hit;
    }
  }

  if (/^(1|true|yes|on)$/i.test((options.env ?? process.env).HF_HUB_OFFLINE ?? "")) {
    throw new Error(`${formatHubRef(ref)} is not in the cache (${repoDir}) and HF_HUB_OFFLINE is set: unset it to download, or copy the model there`);
  }
  const listing = await listRevision(config, ref);
  const commit = listing.sha;
  const snapshot = join(repoDir, "snapshots", commit);
  const wanted = ref.file ? [siblingOf(listing.siblings, ref)] : await modelFiles(config, ref, commit, listing.siblings, snapshot, log);
  const bytes = wanted.reduce((s, f) => s + (f.lfs?.size ?? f.size ?? 0), 0);
  log(`${formatHubRef(ref)}: commit ${commit.slice(0, 12)}, ${wanted.length} file(s), ${(bytes / 2 ** 20).toFixed(1)} MiB, into ${snapshot}`);
  for (const f of wanted) {
    const dest = join(snapshot, f.rfilename);
    if (existsSync(dest)) continue;
    await downloadHubFile(config, {
      url: resolveUrl(config, ref.repo, commit, f.rfilename),
      dest,
      what: `${ref.repo}/${f.rfilename}`,
      size: f.lfs?.size ?? f.size,
      check: checkOf(f),
      log,
    });
  }
  if (!ref.file) await writeFile(join(snapshot, COMPLETE), JSON.stringify({ repo: ref.repo, commit, files: wanted.map((f) => f.rfilename) }, null, 2));
  if (commit !== ref.revision) {
    await mkdir(join(repoDir, "refs"), { recursive: true });
    await writeFile(refFile, commit);
  }
  return ref.file ? join(snapshot, ref.file) : snapshot;
}

/** The cached path a ref asks for in a snapshot folder, if it is all there. */
function cachedPath(snapshot: string, ref: HubRef): string | undefined {
  if (ref.file) return existsSync(join(snapshot, ref.file)) ? join(snapshot, ref.file) : undefined;
  const marker = join(snapshot, COMPLETE);
  if (!existsSync(marker)) return undefined;
  const { files } = JSON.parse(readFileSync(marker, "utf8")) as { files: string[] };
  return files.every((f) => existsSync(join(snapshot, f))) ? snapshot : undefined;
}

function resolveUrl(config: HubConfig, repo: string, revision: string, file: string): string {
  return `${config.endpoint}/${repo}/resolve/${encodeURIComponent(revision)}/${file.split("/").map(encodeURIComponent).join("/")}`;
}

async function listRevision(config: HubConfig, ref: HubRef): Promise<{ sha: string; siblings: HubSibling[] }> {
  const url = `${config.endpoint}/api/models/${ref.repo}/revision/${encodeURIComponent(ref.revision)}?blobs=true`;
  const { response } = await hubGet(config, url, `${ref.repo}@${ref.revision} (file list)`);
  const info = (await response.json()) as { sha?: unknown; siblings?: unknown };
  if (typeof info.sha !== "string" || !/^[0-9a-f]{40}$/.test(info.sha) || !Array.isArray(info.siblings)) {
    throw new Error(`${ref.repo}@${ref.revision}: the hub's file list has no commit sha or no siblings (${url})`);
  }
  return { sha: info.sha, siblings: info.siblings as HubSibling[] };
}

function siblingOf(siblings: HubSibling[], ref: HubRef): HubSibling {
  const f = siblings.find((s) => s.rfilename === ref.file);
  if (f) return f;
  const near = siblings.filter((s) => /\.(gguf|safetensors)$/.test(s.rfilename)).map((s) => s.rfilename).slice(0, 12);
  throw new Error(`${ref.repo}@${ref.revision} has no file "${ref.file}"${near.length ? ` (its model files: ${near.join(", ")})` : ""}`);
}

/** The files of a whole-model download: config, tokenizer files, weights (the index's shards, else every top-level *.safetensors). */
async function modelFiles(config: HubConfig, ref: HubRef, commit: string, siblings: HubSibling[], snapshot: string, log: (line: string) => void): Promise<HubSibling[]> {
  const top = siblings.filter((s) => !s.rfilename.includes("/"));
  if (!top.some((s) => s.rfilename === "config.json")) {
    const gguf = top.filter((s) => s.rfilename.endsWith(".gguf")).map((s) => s.rfilename);
    throw new Error(
      `${ref.repo}@${ref.revision} has no config.json, so it is no transformers model folder` +
        (gguf.length ? `; name one file: ${gguf.slice(0, 4).map((g) => formatHubRef({ ...ref, file: g })).join(", ")}` : `; name one file with hf:${ref.repo}:FILE`),
    );
  }
  const index = top.find((s) => s.rfilename === "model.safetensors.index.json");
  let weights: HubSibling[];
  if (index) {
    const indexPath = join(snapshot, index.rfilename);
    if (!existsSync(indexPath)) {
      await downloadHubFile(config, { url: resolveUrl(config, ref.repo, commit, index.rfilename), dest: indexPath, what: `${ref.repo}/${index.rfilename}`, size: index.lfs?.size ?? index.size, check: checkOf(index), log });
    }
    const shards = new Set(Object.values((JSON.parse(readFileSync(indexPath, "utf8")) as { weight_map: Record<string, string> }).weight_map));
    weights = top.filter((s) => shards.has(s.rfilename));
    const missing = [...shards].filter((s) => !weights.some((w) => w.rfilename === s));
    if (missing.length) throw new Error(`${ref.repo}@${ref.revision}: model.safetensors.index.json names shards the repo lacks: ${missing.join(", ")}`);
  } else {
    weights = top.filter((s) => s.rfilename.endsWith(".safetensors"));
  }
  if (weights.length === 0) throw new Error(`${ref.repo}@${ref.revision} has no *.safetensors weights (only safetensors are loaded; a GGUF repo: name its file, hf:${ref.repo}:FILE.gguf)`);
  return [...top.filter((s) => MODEL_FILES.has(s.rfilename)), ...weights];
}

/** What a listed file must hash to: the LFS sha256, else the git blob sha1 when its size is listed. */
function checkOf(f: HubSibling): FileCheck | undefined {
  if (f.lfs?.sha256) return { kind: "sha256", hex: f.lfs.sha256 };
  if (f.blobId && f.size !== undefined) return { kind: "git-sha1", hex: f.blobId };
  return undefined;
}
