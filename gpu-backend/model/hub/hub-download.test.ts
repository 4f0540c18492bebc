import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { downloadFromHub } from "./hub-download";
import { parseHubRef } from "./hub-ref";
import { startHubStandIn, type HubStandIn } from "./testing/hub-stand-in";

const COMMIT = "0123456789abcdef0123456789abcdef01234567";
const GGUF_COMMIT = "fedcba9876543210fedcba9876543210fedcba98";
const GATED_COMMIT = "1111111111111111111111111111111111111111";

const shard1 = randomBytes(3 * 2 ** 20);
const shard2 = randomBytes(2 ** 20 + 17);
const gguf = randomBytes(2 * 2 ** 20 + 5);
const modelFiles = new Map<string, Buffer>([
  ["config.json", Buffer.from(JSON.stringify({ model_type: "llama" }))],
  ["generation_config.json", Buffer.from("{}")],
  ["tokenizer.json", Buffer.from('{"model":{}}')],
  ["tokenizer_config.json", Buffer.from("{}")],
  ["special_tokens_map.json", Buffer.from("{}")],
  ["model.safetensors.index.json", Buffer.from(JSON.stringify({ weight_map: { a: "model-00001-of-00002.safetensors", b: "model-00002-of-00002.safetensors" } }))],
  ["model-00001-of-00002.safetensors", shard1],
  ["model-00002-of-00002.safetensors", shard2],
  // Not part of a whole-model download: the index does not name it, README and subfolders are skipped.
  ["consolidated.safetensors", randomBytes(1000)],
  ["README.md", Buffer.from("# model")],
  ["original/params.json", Buffer.from("{}")],
]);

let hub: HubStandIn;
let root: string;
const lines: string[] = [];
const log = (line: string) => lines.push(line);
const env = () => ({ HF_ENDPOINT: hub.url });
const cacheFor = (name: string) => join(root, name);

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "agent-edge-hub-"));
  hub = await startHubStandIn({
    "org/tiny": { commit: COMMIT, files: modelFiles },
    "org/tiny-GGUF": { commit: GGUF_COMMIT, refs: ["main", "v1"], files: new Map([["tiny.Q4_0.gguf", gguf], ["README.md", Buffer.from("x")]]) },
    "org/gated": { commit: GATED_COMMIT, token: "hf_secret", files: new Map([["config.json", Buffer.from("{}")], ["model.safetensors", shard2]]) },
    "org/private": { commit: GATED_COMMIT, token: "hf_secret", private: true, files: new Map([["config.json", Buffer.from("{}")], ["model.safetensors", shard2]]) },
  }, { renamed: { "old/gated": "org/gated" } });
});
afterAll(async () => {
  await hub.close();
  rmSync(root, { recursive: true, force: true });
});

describe("downloadFromHub against a stand-in hub", () => {
  it("downloads a whole model (config, tokenizer files, the index's shards) into snapshots/<commit>, and a second call stays offline", async () => {
    const cacheDir = cacheFor("full");
    lines.length = 0;
    const dir = await downloadFromHub(parseHubRef("hf:org/tiny"), { cacheDir, env: env(), log });
    expect(dir).toBe(join(cacheDir, "models--org--tiny", "snapshots", COMMIT));
    const got = readdirSync(dir).filter((f) => !f.startsWith(".")).sort();
    expect(got).toEqual([...modelFiles.keys()].filter((f) => !["consolidated.safetensors", "README.md", "original/params.json"].includes(f)).sort());
    for (const f of got) expect(readFileSync(join(dir, f)).equals(modelFiles.get(f)!)).toBe(true);
    expect(readFileSync(join(cacheDir, "models--org--tiny", "refs", "main"), "utf8")).toBe(COMMIT);
    // LFS files went through the 302 to the CDN; progress lines with percentages.
    expect(hub.requests.some((r) => r.url.startsWith("/cdn/"))).toBe(true);
    expect(lines.some((l) => /model-00001-of-00002\.safetensors: [\d.]+ \/ 3\.0 MiB \(\d+%\)/.test(l))).toBe(true);

    const before = hub.requests.length;
    lines.length = 0;
    expect(await downloadFromHub(parseHubRef("hf:org/tiny"), { cacheDir, env: env(), log })).toBe(dir);
    expect(hub.requests.length).toBe(before);
    expect(lines.join("\n")).toMatch(/cached at .* no download/);
    // Also with the hub gone (a closed port): the cache answers.
    expect(await downloadFromHub(parseHubRef("hf:org/tiny@main"), { cacheDir, env: { HF_ENDPOINT: await closedPortUrl() } })).toBe(dir);
  });

  it("downloads one FILE (a GGUF) by a tag, and refuses a whole-model download of a repo without config.json", async () => {
    const cacheDir = cacheFor("file");
    const path = await downloadFromHub(parseHubRef("hf:org/tiny-GGUF@v1:tiny.Q4_0.gguf"), { cacheDir, env: env(), log });
    expect(path).toBe(join(cacheDir, "models--org--tiny-GGUF", "snapshots", GGUF_COMMIT, "tiny.Q4_0.gguf"));
    expect(readFileSync(path).equals(gguf)).toBe(true);
    expect(readdirSync(join(cacheDir, "models--org--tiny-GGUF", "snapshots", GGUF_COMMIT))).toEqual(["tiny.Q4_0.gguf"]);
    const before = hub.requests.length;
    expect(await downloadFromHub(parseHubRef("hf:org/tiny-GGUF@v1:tiny.Q4_0.gguf"), { cacheDir, env: env() })).toBe(path);
    expect(hub.requests.length).toBe(before);
    await expect(downloadFromHub(parseHubRef("hf:org/tiny-GGUF"), { cacheDir, env: env() })).rejects.toThrow(/no config\.json.*hf:org\/tiny-GGUF:tiny\.Q4_0\.gguf/);
    await expect(downloadFromHub(parseHubRef("hf:org/tiny-GGUF:nope.gguf"), { cacheDir, env: env() })).rejects.toThrow(/has no file "nope\.gguf".*tiny\.Q4_0\.gguf/);
  });

  it("resumes with Range after the connection is cut mid-file, and resumes a partial file an earlier run left", async () => {
    const cacheDir = cacheFor("resume");
    hub.cutNext.add("model-00001-of-00002.safetensors");
    lines.length = 0;
    const start = hub.requests.length;
    const dir = await downloadFromHub(parseHubRef("hf:org/tiny"), { cacheDir, env: env(), log });
    expect(readFileSync(join(dir, "model-00001-of-00002.safetensors")).equals(shard1)).toBe(true);
    const cdn = hub.requests.slice(start).filter((r) => r.url.includes("model-00001-of-00002"));
    // The second request resumes where the bytes that arrived end: at most the half the stand-in
    // sent before cutting (a socket destroyed mid-body may lose the last bytes in flight).
    const ranges = cdn.filter((r) => r.url.startsWith("/cdn/")).map((r) => r.range);
    expect(ranges).toHaveLength(2);
    expect(ranges[0]).toBeUndefined();
    const from = Number(/^bytes=(\d+)-$/.exec(ranges[1] ?? "")?.[1]);
    expect(from).toBeGreaterThan(0);
    expect(from).toBeLessThanOrEqual(Math.floor(shard1.length / 2));
    expect(lines.some((l) => /connection lost at 1\.5 MiB.*resuming \(try 2\/5\)/.test(l))).toBe(true);

    // A partial file from an earlier run (killed mid-download) is resumed, not restarted.
    const cache2 = cacheFor("resume-2");
    const snap = join(cache2, "models--org--tiny-GGUF", "snapshots", GGUF_COMMIT);
    mkdirSync(snap, { recursive: true });
    writeFileSync(join(snap, "tiny.Q4_0.gguf.incomplete"), gguf.subarray(0, 1_000_000));
    const mark = hub.requests.length;
    const path = await downloadFromHub(parseHubRef("hf:org/tiny-GGUF:tiny.Q4_0.gguf"), { cacheDir: cache2, env: env(), log });
    expect(readFileSync(path).equals(gguf)).toBe(true);
    expect(hub.requests.slice(mark).find((r) => r.url.startsWith("/cdn/"))?.range).toBe("bytes=1000000-");
    expect(existsSync(`${path}.incomplete`)).toBe(false);

    // A partial file that holds every byte (stopped before its rename) is checked, not fetched again.
    const cache3 = cacheFor("resume-3");
    const snap3 = join(cache3, "models--org--tiny-GGUF", "snapshots", GGUF_COMMIT);
    mkdirSync(snap3, { recursive: true });
    writeFileSync(join(snap3, "tiny.Q4_0.gguf.incomplete"), gguf);
    const mark3 = hub.requests.length;
    expect(readFileSync(await downloadFromHub(parseHubRef("hf:org/tiny-GGUF:tiny.Q4_0.gguf"), { cacheDir: cache3, env: env() })).equals(gguf)).toBe(true);
    expect(hub.requests.slice(mark3).filter((r) => r.url.startsWith("/cdn/"))).toEqual([]);
  });

  it("refuses a file whose sha256 differs from the one the hub publishes, naming the file and both hashes, and deletes it", async () => {
    const cacheDir = cacheFor("corrupt");
    hub.corrupt.add("tiny.Q4_0.gguf");
    try {
      const want = createHash("sha256").update(gguf).digest("hex");
      const err = await downloadFromHub(parseHubRef("hf:org/tiny-GGUF:tiny.Q4_0.gguf"), { cacheDir, env: env() }).catch((e: Error) => e);
      expect(err).toBeInstanceOf(Error);
      expect((err as Error).message).toMatch(new RegExp(`org/tiny-GGUF/tiny\\.Q4_0\\.gguf: sha256 mismatch, the hub publishes ${want} but the downloaded file hashes to [0-9a-f]{64}`));
      const snap = join(cacheDir, "models--org--tiny-GGUF", "snapshots", GGUF_COMMIT);
      expect(existsSync(snap) ? readdirSync(snap) : []).toEqual([]);
    } finally {
      hub.corrupt.clear();
    }
  });

  it("a gated repo: 401 without a token names HF_TOKEN; with HF_TOKEN it downloads, and the token never goes to the CDN", async () => {
    const cacheDir = cacheFor("gated");
    await expect(downloadFromHub(parseHubRef("hf:org/gated"), { cacheDir, env: env() })).rejects.toThrow(/refused org\/gated\/config\.json \(401\).*set HF_TOKEN/);
    await expect(downloadFromHub(parseHubRef("hf:org/private"), { cacheDir, env: env() })).rejects.toThrow(/refused org\/private@main \(file list\) \(401\).*set HF_TOKEN/);
    await expect(downloadFromHub(parseHubRef("hf:org/gated"), { cacheDir, env: { ...env(), HF_TOKEN: "hf_wrong" } })).rejects.toThrow(/401\) with the token in HF_TOKEN/);
    const start = hub.requests.length;
    const dir = await downloadFromHub(parseHubRef("hf:org/gated"), { cacheDir, env: { ...env(), HF_TOKEN: "hf_secret" } });
    expect(readFileSync(join(dir, "model.safetensors")).equals(shard2)).toBe(true);
    expect(await downloadFromHub(parseHubRef("hf:org/private"), { cacheDir, env: { ...env(), HF_TOKEN: "hf_secret" } })).toMatch(/models--org--private/);
    const seen = hub.requests.slice(start);
    expect(seen.filter((r) => !r.url.startsWith("/cdn/")).every((r) => r.authorization === "Bearer hf_secret")).toBe(true);
    expect(seen.filter((r) => r.url.startsWith("/cdn/")).map((r) => r.authorization)).toEqual([undefined, undefined]);

    // A renamed repo: the relative redirect stays on the hub's origin, so the token goes along.
    const renamed = await downloadFromHub(parseHubRef("hf:old/gated"), { cacheDir: cacheFor("renamed"), env: { ...env(), HF_TOKEN: "hf_secret" } });
    expect(readFileSync(join(renamed, "model.safetensors")).equals(shard2)).toBe(true);
  });

  it("two processes' downloads into one cache at once: the second waits on the lock, each file is fetched once", async () => {
    const cacheDir = cacheFor("concurrent");
    const start = hub.requests.length;
    const [a, b] = await Promise.all([0, 1].map(() => downloadFromHub(parseHubRef("hf:org/tiny"), { cacheDir, env: env() })));
    expect(a).toBe(b);
    for (const f of ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]) expect(readFileSync(join(a!, f)).equals(modelFiles.get(f)!)).toBe(true);
    expect(hub.requests.slice(start).filter((r) => r.url.startsWith("/cdn/")).length).toBe(2);
    expect(readdirSync(a!).filter((f) => /\.(lock|incomplete)$/.test(f))).toEqual([]);
  });

  it("offline (a closed port): a clear error saying what to do", async () => {
    await expect(downloadFromHub(parseHubRef("hf:org/tiny"), { cacheDir: cacheFor("offline"), env: { HF_ENDPOINT: await closedPortUrl() } })).rejects.toThrow(
      /cannot reach the Hugging Face hub at http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\).*check the network .* or HF_ENDPOINT/,
    );
    await expect(downloadFromHub(parseHubRef("hf:org/missing"), { cacheDir: cacheFor("404"), env: env() })).rejects.toThrow(/not found on the hub \(404/);
    const start = hub.requests.length;
    await expect(downloadFromHub(parseHubRef("hf:org/tiny"), { cacheDir: cacheFor("offline"), env: { ...env(), HF_HUB_OFFLINE: "1" } })).rejects.toThrow(/not in the cache .* HF_HUB_OFFLINE is set/);
    expect(hub.requests.length).toBe(start);
  });
});

describe("parseHubRef", () => {
  it("reads ORG/NAME, @REVISION and :FILE", () => {
    expect(parseHubRef("hf:a/b")).toEqual({ repo: "a/b", revision: "main" });
    expect(parseHubRef("hf:a/b@v1.0:sub/f.gguf")).toEqual({ repo: "a/b", revision: "v1.0", file: "sub/f.gguf" });
    expect(parseHubRef("hf:a/b:f.gguf")).toEqual({ repo: "a/b", revision: "main", file: "f.gguf" });
    expect(() => parseHubRef("hf:a/b/c")).toThrow(/expected hf:ORG\/NAME/);
    expect(() => parseHubRef("hf:a/b:../x")).toThrow(/bad file/);
  });
});

/** A URL on a port nothing listens on. */
async function closedPortUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as { port: number };
  await new Promise<void>((r) => server.close(() => r()));
  return `http://127.0.0.1:${port}`;
}
