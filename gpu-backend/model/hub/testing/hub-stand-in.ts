import { createHash } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join, relative } from "node:path";

/** A repo the stand-in serves: one commit, its files, which of them are LFS. */
export interface StandInRepo {
  commit: string;
  /** Branches and tags that resolve to the commit (default ["main"]). */
  refs?: string[];
  files: Map<string, Buffer>;
  /** Files served as LFS (302 to /cdn/<sha256>, listed with lfs.sha256); default: *.safetensors and *.gguf. */
  lfs?: (path: string) => boolean;
  /** A token the repo demands: without `Authorization: Bearer <token>`, 401 on its files (a gated repo; its file list stays public, as on the hub) or on everything (`private`). */
  token?: string;
  private?: boolean;
}

/** One request the stand-in saw. */
export interface SeenRequest {
  method: string;
  url: string;
  range?: string;
  authorization?: string;
}

export interface HubStandIn {
  /** http://127.0.0.1:<port> */
  url: string;
  requests: SeenRequest[];
  /** CDN paths (file names) whose next GET is cut after half its bytes (the socket destroyed). */
  cutNext: Set<string>;
  /** File names whose CDN bytes are served with their last byte flipped (a sha256 mismatch). */
  corrupt: Set<string>;
  close(): Promise<void>;
}

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");
const gitSha1 = (b: Buffer) => createHash("sha1").update(`blob ${b.length}\0`).update(b).digest("hex");

/** Reads a folder's files (recursively) as a repo's files. */
export function filesOf(dir: string): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else out.set(relative(dir, p), readFileSync(p));
    }
  };
  walk(dir);
  return out;
}

/**
 * A local stand-in for the Hugging Face hub on 127.0.0.1 (port 0) that speaks what
 * hub-download.ts uses: `GET /api/models/{repo}/revision/{rev}` (sha, siblings with size, blobId,
 * lfs.sha256), `GET /{repo}/resolve/{rev}/{file}` (small files: 200 with ETag = git sha1; LFS
 * files: 302 to a second origin's `/cdn/<sha256>/<file>` (the CDN, which refuses an Authorization header) with X-Linked-Etag, X-Linked-Size, X-Repo-Commit), the CDN
 * with `Range` (206, Content-Range); gated repos answer 401 without their token; a renamed repo
 * answers a relative 307 to its new name. Test helper.
 *
 * @example const hub = await startHubStandIn({ "org/tiny": { commit: "a".repeat(40), files: filesOf(dir) } });
 */
export async function startHubStandIn(repos: Record<string, StandInRepo>, options: { renamed?: Record<string, string> } = {}): Promise<HubStandIn> {
  const requests: SeenRequest[] = [];
  const cutNext = new Set<string>();
  const corrupt = new Set<string>();
  const isLfs = (r: StandInRepo, p: string) => (r.lfs ?? ((x: string) => /\.(safetensors|gguf)$/.test(x)))(p);
  const byRev = (repo: string, rev: string) => {
    const r = repos[repo];
    return r && (rev === r.commit || (r.refs ?? ["main"]).includes(rev)) ? r : undefined;
  };
  const authorized = (r: StandInRepo, req: IncomingMessage) => !r.token || req.headers.authorization === `Bearer ${r.token}`;
  const send = (res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}) => {
    res.writeHead(status, { "content-type": "application/json", ...headers });
    res.end(body);
  };

  let cdnOrigin = "";
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? "/", "http://x");
    requests.push({ method: req.method ?? "GET", url: url.pathname + url.search, range: req.headers.range, authorization: req.headers.authorization });
    const path = decodeURIComponent(url.pathname);
    // A renamed repo: a relative 307 to the same path under the new name (the hub's own origin).
    for (const [from, to] of Object.entries(options.renamed ?? {})) {
      for (const prefix of [`/api/models/${from}/`, `/${from}/resolve/`]) {
        if (url.pathname.startsWith(prefix)) {
          res.writeHead(307, { location: prefix.replace(from, to) + url.pathname.slice(prefix.length) + url.search });
          return res.end();
        }
      }
    }
    const api = /^\/api\/models\/(.+?)\/revision\/([^/]+)$/.exec(url.pathname);
    if (api) {
      const [repoName, rev] = [api[1]!, decodeURIComponent(api[2]!)];
      const r = byRev(repoName, rev);
      if (!r) return send(res, 404, JSON.stringify({ error: "Repository Not Found" }));
      if (r.private && !authorized(r, req)) return send(res, 401, JSON.stringify({ error: "Invalid credentials in Authorization header" }));
      const siblings = [...r.files].map(([p, b]) => ({ rfilename: p, size: b.length, blobId: gitSha1(b), ...(isLfs(r, p) ? { lfs: { sha256: sha256(b), size: b.length, pointerSize: 130 } } : {}) }));
      return send(res, 200, JSON.stringify({ id: repoName, sha: r.commit, siblings }));
    }
    const resolve = /^\/(.+?)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname);
    if (resolve) {
      const [repoName, rev, file] = [resolve[1]!, decodeURIComponent(resolve[2]!), resolve[3]!.split("/").map(decodeURIComponent).join("/")];
      const r = byRev(repoName, rev);
      const bytes = r?.files.get(file);
      if (!r || !bytes) return send(res, 404, JSON.stringify({ error: "Entry not found" }));
      if (!authorized(r, req)) return send(res, 401, JSON.stringify({ error: "Access to this model is restricted" }));
      if (isLfs(r, file)) {
        const sum = sha256(bytes);
        res.writeHead(302, { location: `${cdnOrigin}/cdn/${sum}/${file}?signature=stand-in`, "x-linked-etag": `"${sum}"`, "x-linked-size": String(bytes.length), "x-repo-commit": r.commit, etag: `"${gitSha1(Buffer.from(sum))}"` });
        return res.end();
      }
      res.writeHead(200, { "content-length": bytes.length, etag: `"${gitSha1(bytes)}"`, "x-repo-commit": r.commit });
      return res.end(bytes);
    }
    const cdn = /^\/cdn\/([0-9a-f]{64})\/(.+)$/.exec(path);
    if (cdn) {
      if (req.headers.authorization) return send(res, 400, JSON.stringify({ error: "the CDN takes no Authorization header" }));
      let bytes = [...Object.values(repos)].flatMap((r) => [...r.files.values()]).find((b) => sha256(b) === cdn[1]);
      const file = cdn[2]!;
      if (!bytes) return send(res, 404, "{}");
      if (corrupt.has(file)) {
        bytes = Buffer.from(bytes);
        bytes[bytes.length - 1] = bytes[bytes.length - 1]! ^ 0xff;
      }
      const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
      const start = m ? Number(m[1]) : 0;
      if (start >= bytes.length && bytes.length > 0) return send(res, 416, "{}", { "content-range": `bytes */${bytes.length}` });
      const body = bytes.subarray(start);
      res.writeHead(m ? 206 : 200, { "content-length": body.length, etag: `"${cdn[1]}"`, "accept-ranges": "bytes", ...(m ? { "content-range": `bytes ${start}-${bytes.length - 1}/${bytes.length}` } : {}) });
      if (cutNext.delete(file)) {
        res.write(body.subarray(0, Math.floor(body.length / 2)), () => setTimeout(() => res.destroy(), 20));
        return;
      }
      return res.end(body);
    }
    send(res, 404, JSON.stringify({ error: "not found" }));
  };
  // The hub and its CDN: two origins (two ports), as huggingface.co and its CDN are.
  const servers = [createServer(handler), createServer(handler)];
  for (const server of servers) await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const [port, cdnPort] = servers.map((s) => (s.address() as AddressInfo).port);
  cdnOrigin = `http://127.0.0.1:${cdnPort}`;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    cutNext,
    corrupt,
    close: async () => {
      for (const server of servers) {
        server.closeAllConnections();
        await new Promise<void>((r) => server.close(() => r()));
      }
    },
  };
}
