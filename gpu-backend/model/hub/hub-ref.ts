/** A `--model hf:ORG/NAME[@REVISION][:FILE]` value, parsed. */
export interface HubRef {
  /** "ORG/NAME" (a legacy repo without an org, "gpt2", is accepted too). */
  repo: string;
  /** A branch, a tag or a commit hash (default "main"). */
  revision: string;
  /** One file of the repo (e.g. a GGUF, "model-Q4_K_M.gguf", or "sub/dir/file"); absent: the whole model. */
  file?: string;
}

const PREFIX = "hf:";
const REPO = /^(?:[A-Za-z0-9][\w.-]*\/)?[A-Za-z0-9][\w.-]*$/;

/** Whether a `--model` value names the Hugging Face hub ("hf:..."). */
export function isHubRef(value: string): boolean {
  return value.startsWith(PREFIX);
}

/**
 * Parses `hf:ORG/NAME[@REVISION][:FILE]`. A git ref holds no ":", so the first ":" after the
 * prefix starts FILE; the "@" before it starts REVISION.
 *
 * @throws Error naming the expected syntax for anything else
 * @example parseHubRef("hf:HuggingFaceTB/SmolLM2-135M-Instruct@main:model.safetensors");
 */
export function parseHubRef(value: string): HubRef {
  const syntax = `expected hf:ORG/NAME[@REVISION][:FILE], e.g. hf:HuggingFaceTB/SmolLM2-135M-Instruct or hf:ORG/NAME-GGUF:file.Q4_K_M.gguf`;
  if (!isHubRef(value)) throw new Error(`"${value}" does not name the Hugging Face hub: ${syntax}`);
  const rest = value.slice(PREFIX.length);
  const colon = rest.indexOf(":");
  const repoRev = colon < 0 ? rest : rest.slice(0, colon);
  const file = colon < 0 ? undefined : rest.slice(colon + 1);
  const at = repoRev.indexOf("@");
  const repo = at < 0 ? repoRev : repoRev.slice(0, at);
  const revision = at < 0 ? "main" : repoRev.slice(at + 1);
  if (!REPO.test(repo)) throw new Error(`bad hub repo "${repo}" in "${value}": ${syntax}`);
  if (revision === "" || /\.\.|^\/|\/$|\s/.test(revision)) throw new Error(`bad revision "${revision}" in "${value}": ${syntax}`);
  if (file !== undefined && (file === "" || file.startsWith("/") || file.split("/").some((p) => p === "" || p === "." || p === ".."))) {
    throw new Error(`bad file "${file}" in "${value}": ${syntax} (a path inside the repo, no "..")`);
  }
  return file === undefined ? { repo, revision } : { repo, revision, file };
}

/** The ref written back as `hf:...` (for messages). */
export function formatHubRef(ref: HubRef): string {
  return `hf:${ref.repo}${ref.revision === "main" ? "" : `@${ref.revision}`}${ref.file ? `:${ref.file}` : ""}`;
}
