import { createHash, type Hash } from "node:crypto";
import { createReadStream, createWriteStream, existsSync, statSync } from "node:fs";
import { mkdir, rename, rm, truncate } from "node:fs/promises";
import { dirname } from "node:path";
import { bareEtag, hubGet, isUnreachable, type HubConfig } from "./hub-http";
import { lockDownload, type DownloadLock } from "./hub-lock";

/** What a downloaded file must hash to: an LFS file's sha256, or a small file's git blob sha1. */
export type FileCheck = { kind: "sha256"; hex: string } | { kind: "git-sha1"; hex: string };

export interface FileDownload {
  url: string;
  /** Where the file ends up; bytes arrive in `<dest>.incomplete` first. */
  dest: string;
  /** For messages: "ORG/NAME/file". */
  what: string;
  /** Size the hub lists, for progress and for the git blob header. */
  size?: number;
  check?: FileCheck;
  log: (line: string) => void;
  /** Tries on a connection cut mid-file, each resuming with Range (default 5). */
  attempts?: number;
}

const MiB = 2 ** 20;
const mib = (n: number) => (n / MiB).toFixed(1);

/**
 * Downloads one hub file to `dest`: GET with redirects (hubGet), into `<dest>.incomplete`, resumed
 * with `Range: bytes=N-` (206) from what an earlier try or an earlier run left there; a 200 to a
 * Range restarts from zero. Progress lines every 10% (and at least every 2 s). A cut connection is
 * retried with Range up to `attempts` times. The bytes are hashed as they arrive (the kept part
 * first) and checked against `check` (else the response's X-Linked-Etag when it is a sha256): on
 * a mismatch the partial file is deleted and the error names the file and both hashes. Under
 * `<dest>.lock` (hub-lock.ts): a second process waits for the first, then finds the file there.
 *
 * @example await downloadHubFile(config, { url, dest, what: "org/name/model.safetensors", size, check: { kind: "sha256", hex }, log });
 */
export async function downloadHubFile(config: HubConfig, d: FileDownload): Promise<void> {
  await mkdir(dirname(d.dest), { recursive: true });
  const lock = await lockDownload(d.dest, d.log, d.what);
  if (!lock) return;
  try {
    await download(config, d, lock);
  } finally {
    await lock.release();
  }
}

async function download(config: HubConfig, d: FileDownload, lock: DownloadLock): Promise<void> {
  const partial = `${d.dest}.incomplete`;
  const attempts = d.attempts ?? 5;
  for (let attempt = 1; ; attempt += 1) {
    const have = existsSync(partial) ? statSync(partial).size : 0;
    if (have > 0 && d.size !== undefined && have > d.size) await truncate(partial, 0);
    try {
      const done = await fetchInto(config, d, partial, existsSync(partial) ? statSync(partial).size : 0, attempt, lock);
      await verify(d, partial, done);
      await rename(partial, d.dest);
      return;
    } catch (e) {
      if (e instanceof ChecksumError || isUnreachable(e) || !isCut(e) || attempt >= attempts) throw e;
      const kept = existsSync(partial) ? statSync(partial).size : 0;
      d.log(`${d.what}: connection lost at ${mib(kept)} MiB (${(e as Error).message}); resuming (try ${attempt + 1}/${attempts})`);
      await new Promise((r) => setTimeout(r, 100 * attempt));
    }
  }
}

class ChecksumError extends Error {}

/** A failure while the body streams (a reset, a cut socket), as opposed to an HTTP error answer. */
function isCut(e: unknown): boolean {
  if (!(e instanceof Error)) return false;
  return e.message === "terminated" || e.name === "TypeError" || /socket|ECONNRESET|EPIPE|aborted|premature|closed/i.test(`${e.message} ${String((e as { cause?: unknown }).cause ?? "")}`);
}

interface Fetched {
  hash: Hash;
  /** The sha256 the response's headers publish (X-Linked-Etag), if they do. */
  headerSha256?: string;
}

/** One GET into the partial file, from `have` bytes on; returns the running hash over the whole file. */
async function fetchInto(config: HubConfig, d: FileDownload, partial: string, have: number, attempt: number, lock: DownloadLock): Promise<Fetched> {
  if (have > 0 && have === d.size) {
    // Every byte arrived before (a run stopped between the last byte and the rename): check it as it is.
    const hash = startHash(d);
    for await (const chunk of createReadStream(partial)) hash.update(chunk as Buffer);
    return { hash };
  }
  const headers: Record<string, string> = have > 0 ? { range: `bytes=${have}-` } : {};
  if (have > 0 && attempt === 1) d.log(`${d.what}: resuming a partial download at ${mib(have)} MiB`);
  const { response, etag } = await hubGet(config, d.url, d.what, headers);
  let start = have;
  if (have > 0 && response.status !== 206) {
    d.log(`${d.what}: the server ignored the Range request (${response.status}); restarting from zero`);
    start = 0;
  }
  const hash = startHash(d);
  if (start > 0) for await (const chunk of createReadStream(partial, { end: start - 1 })) hash.update(chunk as Buffer);
  else await truncate(partial, 0).catch(() => undefined);
  const total = d.size ?? (Number(response.headers.get("content-length")) || 0) + start;
  const out = createWriteStream(partial, { flags: start > 0 ? "a" : "w" });
  const closed = new Promise<void>((resolve, reject) => {
    out.on("close", resolve);
    out.on("error", reject);
  });
  let received = start;
  let nextPercent = total > 0 ? Math.floor((start / total) * 10) * 10 + 10 : 0;
  let lastLog = performance.now();
  try {
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      hash.update(chunk);
      received += chunk.byteLength;
      if (!out.write(chunk)) await new Promise((r) => out.once("drain", r));
      const percent = total > 0 ? (received / total) * 100 : 0;
      if ((total > 0 && percent >= nextPercent && received < total) || performance.now() - lastLog > 2000) {
        d.log(`${d.what}: ${mib(received)} / ${total > 0 ? mib(total) : "?"} MiB${total > 0 ? ` (${Math.floor(percent)}%)` : ""}`);
        nextPercent = Math.floor(percent / 10) * 10 + 10;
        lastLog = performance.now();
        await lock.touch();
      }
    }
  } finally {
    out.end();
    await closed;
  }
  if (d.size !== undefined && received < d.size) {
    throw Object.assign(new Error(`premature end of body at ${received} of ${d.size} bytes`), { name: "TypeError" });
  }
  d.log(`${d.what}: ${mib(received)} MiB downloaded`);
  const linked = bareEtag(etag);
  return { hash, headerSha256: linked && /^[0-9a-f]{64}$/.test(linked) ? linked : undefined };
}

function startHash(d: FileDownload): Hash {
  if (d.check?.kind === "git-sha1") {
    const h = createHash("sha1");
    h.update(`blob ${d.size ?? 0}\0`);
    return h;
  }
  return createHash("sha256");
}

/** Checks the hash; on a mismatch deletes the partial file and throws naming both hashes. */
async function verify(d: FileDownload, partial: string, fetched: Fetched): Promise<void> {
  const check: FileCheck | undefined = d.check ?? (fetched.headerSha256 ? { kind: "sha256", hex: fetched.headerSha256 } : undefined);
  if (!check) return;
  const got = fetched.hash.digest("hex");
  if (got === check.hex) return;
  await rm(partial, { force: true });
  throw new ChecksumError(
    `${d.what}: ${check.kind} mismatch, the hub publishes ${check.hex} but the downloaded file hashes to ${got}; refused and deleted (a corrupted transfer or a changed file: retry)`,
  );
}
