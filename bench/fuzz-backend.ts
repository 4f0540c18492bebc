import { encode } from "../protocol/codec";
import { MSGPACK_CONTENT_TYPE, SECRET_HEADER } from "../protocol/messages";
import { mulberry32 } from "../protocol/random";
import { ROUTES } from "../protocol/routes";
import { mutateValue, randomTree, runFuzz, type FuzzFindings, type ValueKind } from "./fuzz-common";

export type { FuzzFindings };

/**
 * Seeded fuzzing of a backend's routes (issue 19): each case is a request built from seed and
 * case number alone, so any failure replays with `fuzzCase(seed, i)`. A case is one of:
 * - a valid request for a msgpack route, with its decoded value mutated (a field replaced by a
 *   random value of another type or size, removed, or an unknown one added), re-encoded;
 * - a valid request's bytes mutated (bytes flipped, cut short, bytes inserted);
 * - random bytes, or a random msgpack value;
 * - any of these without the secret, or with a wrong one (then it must be 401).
 *
 * What counts is `FuzzFindings` (fuzz-common.ts: 5xx but 503, 503s apart, error answers without a
 * stable code, 2xx without the secret, a fetch that threw). A 200 stream (a mutated request that
 * was still valid) is read to its first chunk and cancelled.
 *
 * @example const f = await fuzzBackend({ fetch: (r) => app.fetch(r), secret: "s", seed: 1, cases: 1000 });
 */
export interface FuzzCase {
  method: "GET" | "POST";
  path: string;
  headers: Record<string, string>;
  body?: Uint8Array;
  /** Sent without the secret or with a wrong one: anything but 401 is a finding. */
  unauthenticated: boolean;
}

/** Valid requests per msgpack route (the seeds the mutations start from). */
function templates(): Record<string, () => unknown> {
  const sampling = { maxTokens: 2, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true };
  const messages = [{ role: "user", content: "List the files." }];
  const tokens = Array.from({ length: 40 }, (_, i) => 100 + i);
  return {
    [ROUTES.backend.generate]: () => ({ requestId: "fuzz", mode: "full", messages, sampling }),
    [ROUTES.backend.releaseState]: () => ({ stateId: "st_fuzz" }),
    [ROUTES.backend.tokenize]: () => ({ messages }),
    [ROUTES.backend.leases]: () => ({ stateId: "st_fuzz", ttlMs: 1000 }),
    [ROUTES.backend.releaseLease]: () => ({ stateId: "st_fuzz" }),
    [ROUTES.backend.kvPull]: () => ({ tokenIds: tokens, fromBlock: 0, format: "fuzz" }),
    // Only an unreachable source: a fuzzed url must not send the backend anywhere real.
    [ROUTES.backend.kvFetch]: () => ({ source: { url: "http://127.0.0.1:9" }, tokenIds: tokens }),
  };
}

const GETS = [ROUTES.backend.healthz, ROUTES.backend.models, ROUTES.backend.metrics, ROUTES.backend.leases, "/v1/nope"];

/** The request of case `index` under `seed` (deterministic). */
export function fuzzCase(seed: number, index: number, secret: string): FuzzCase {
  const rand = mulberry32((Math.imul(seed, 0x9e3779b1) ^ Math.imul(index + 1, 0x85ebca6b)) >>> 0);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const auth = rand();
  const unauthenticated = auth < 0.05;
  const headers: Record<string, string> = { "content-type": MSGPACK_CONTENT_TYPE };
  if (!unauthenticated) headers[SECRET_HEADER] = secret;
  else if (auth < 0.025) headers[SECRET_HEADER] = `${secret}x`;
  if (rand() < 0.05) {
    const path = pick(GETS);
    return { method: "GET", path, headers, unauthenticated: unauthenticated && path !== ROUTES.backend.healthz };
  }
  // Not `POST /v1/drain`: it would start draining the backend under test.
  const t = templates();
  const path = pick(Object.keys(t));
  const kind = rand();
  let body: Uint8Array;
  if (kind < 0.5) body = encode(mutateValue(MSGPACK, t[path]!(), rand));
  else if (kind < 0.8) body = mutateBytes(encode(t[path]!()), rand);
  else if (kind < 0.9) body = encode(randomTree(MSGPACK, rand, 3));
  else body = Uint8Array.from({ length: Math.floor(rand() * 300) }, () => Math.floor(rand() * 256));
  return { method: "POST", path, headers, body, unauthenticated };
}

/** Runs `cases` cases against `fetch` (an app's `fetch`, or a real server's). */
export async function fuzzBackend(p: { fetch: (req: Request) => Promise<Response>; secret: string; seed: number; cases: number; base?: string; onProgress?: (done: number) => void }): Promise<FuzzFindings> {
  return runFuzz({
    cases: p.cases,
    caseAt: (i) => {
      const c = fuzzCase(p.seed, i, p.secret);
      const request = new Request(`${p.base ?? "http://backend.fuzz"}${c.path}`, { method: c.method, headers: c.headers, ...(c.body ? { body: c.body } : {}) });
      return { path: c.path, request, unauthorized: c.unauthenticated && c.path !== ROUTES.backend.healthz };
    },
    fetch: p.fetch,
    // A still-valid request: a stream (generate) is read to its first chunk and cancelled.
    onAccepted: async (res) => {
      const reader = res.body?.getReader();
      await reader?.read();
      await reader?.cancel();
    },
    progressEvery: 1000,
    onProgress: p.onProgress,
  });
}

/** Msgpack values: numbers of every kind, strings, binary, arrays and maps. */
const MSGPACK: ValueKind = {
  scalars: [
    () => null,
    (rand) => rand() < 0.5,
    (rand) => Math.floor(rand() * 2 ** 31) * (rand() < 0.5 ? -1 : 1),
    (rand) => rand() * 1e308 * (rand() < 0.5 ? -1 : 1),
    (rand) => [0, -1, 1, 2 ** 53, -(2 ** 53), 2 ** 32, Number.NaN, Number.POSITIVE_INFINITY, 0.5][Math.floor(rand() * 9)],
    (rand) => "x".repeat(Math.floor(rand() * 40)),
    (rand) => String.fromCharCode(...Array.from({ length: Math.floor(rand() * 20) }, () => Math.floor(rand() * 0xd7ff))),
    (rand) => Uint8Array.from({ length: Math.floor(rand() * 16) }, () => Math.floor(rand() * 256)),
  ],
  keys: ["messages", "sampling", "stateId", "mode", "tokenIds", "source", "url", "maxTokens", "role", "content", "x", ""],
  extraKeys: ["unknownField", "__proto__"],
  isLeaf: (v) => v instanceof Uint8Array,
};

/** The bytes with a few flipped, cut short, or with random bytes inserted. */
function mutateBytes(b: Uint8Array, rand: () => number): Uint8Array {
  const out = Array.from(b);
  const op = rand();
  if (op < 0.4) {
    for (let n = 1 + Math.floor(rand() * 4); n > 0 && out.length > 0; n--) out[Math.floor(rand() * out.length)] = Math.floor(rand() * 256);
  } else if (op < 0.7) {
    out.length = Math.floor(rand() * out.length);
  } else {
    out.splice(Math.floor(rand() * (out.length + 1)), 0, ...Array.from({ length: 1 + Math.floor(rand() * 8) }, () => Math.floor(rand() * 256)));
  }
  return Uint8Array.from(out);
}
