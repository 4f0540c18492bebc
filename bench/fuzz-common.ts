import { decodeFrame } from "../protocol/codec";
import { ERROR_CODES } from "../protocol/errors";

/**
 * What the fuzzers share (fuzz-backend.ts: msgpack requests to a backend; fuzz-edge.ts: JSON
 * requests to the edge): a random value tree from a kind's scalars and keys, a valid value with
 * one field changed, and the run that sends the cases and counts what comes back.
 */
export interface ValueKind {
  /** Makes one random scalar. */
  scalars: readonly ((rand: () => number) => unknown)[];
  /** Keys random maps use (the fields the routes know, and some they do not). */
  keys: readonly string[];
  /** Keys a mutation may add to a map (an own `__proto__` among them). */
  extraKeys: readonly string[];
  /** Leaves that are scalars to the mutation (e.g. binary), not maps to walk into. */
  isLeaf?: (v: object) => boolean;
}

/** A random value: a scalar, or an array or map of random values, `depth` levels at most. */
export function randomTree(kind: ValueKind, rand: () => number, depth: number): unknown {
  const r = rand();
  if (depth <= 0 || r < 0.5) return kind.scalars[Math.floor(rand() * kind.scalars.length)]!(rand);
  if (r < 0.75) return Array.from({ length: Math.floor(rand() * 5) }, () => randomTree(kind, rand, depth - 1));
  return Object.fromEntries(Array.from({ length: Math.floor(rand() * 5) }, () => [kind.keys[Math.floor(rand() * kind.keys.length)]!, randomTree(kind, rand, depth - 1)]));
}

/** `v` with a field somewhere replaced by a random value, removed, or an unknown one added. */
export function mutateValue(kind: ValueKind, v: unknown, rand: () => number): unknown {
  if (v === null || typeof v !== "object" || kind.isLeaf?.(v)) return rand() < 0.7 ? randomTree(kind, rand, 2) : v;
  const copy: Record<string, unknown> | unknown[] = Array.isArray(v) ? [...v] : { ...(v as Record<string, unknown>) };
  const keys = Object.keys(copy);
  const op = rand();
  if (keys.length === 0 || op < 0.1) {
    // An own `__proto__` key (as a decoder makes it), not the object's prototype.
    const extra = kind.extraKeys[Math.floor(rand() * kind.extraKeys.length)]!;
    Object.defineProperty(copy, extra, { value: randomTree(kind, rand, 2), enumerable: true, writable: true, configurable: true });
    return copy;
  }
  const k = keys[Math.floor(rand() * keys.length)]!;
  const rec = copy as Record<string, unknown>;
  if (op < 0.25) delete rec[k];
  else if (op < 0.6) rec[k] = randomTree(kind, rand, 2);
  else rec[k] = mutateValue(kind, rec[k], rand);
  return copy;
}

/** What a fuzzing run found (backend or edge). */
export interface FuzzFindings {
  cases: number;
  byStatus: Record<string, number>;
  /** The server's fetch threw. */
  crashes: number;
  /** Answers of 500 or more but 503. */
  serverErrors: number;
  /** 503s (a backend away or overloaded), counted apart. */
  unavailable: number;
  /** Error answers without a stable error code. */
  uncoded: number;
  /** 2xx answers to a request without a valid key or secret for its route. */
  unauthorized2xx: number;
  /** The first 20 failing cases, replayable from the seed and `index`. */
  failures: { index: number; path: string; status: number; detail: string }[];
}

/** One case as `runFuzz` sends it. */
export interface SentCase {
  path: string;
  request: Request;
  /** Sent without a valid key or secret for its route: a 2xx is a finding. */
  unauthorized: boolean;
}

/**
 * Sends `cases` cases one after another and counts what comes back (`FuzzFindings`). An accepted
 * answer goes to `onAccepted` (which reads it); a refusal with a stable code to `onRefused`, whose
 * returned text, if any, is a further finding it counts itself.
 */
export async function runFuzz<C extends SentCase>(p: {
  cases: number;
  caseAt: (index: number) => C;
  fetch: (req: Request) => Promise<Response>;
  onAccepted: (res: Response, c: C) => Promise<void>;
  onRefused?: (c: C) => Promise<string | undefined>;
  progressEvery: number;
  onProgress?: (done: number) => void;
}): Promise<FuzzFindings> {
  const f: FuzzFindings = { cases: 0, byStatus: {}, crashes: 0, serverErrors: 0, unavailable: 0, uncoded: 0, unauthorized2xx: 0, failures: [] };
  const note = (index: number, path: string, status: number, detail: string) => {
    if (f.failures.length < 20) f.failures.push({ index, path, status, detail });
  };
  for (let i = 0; i < p.cases; i++) {
    const c = p.caseAt(i);
    let res: Response;
    try {
      res = await p.fetch(c.request);
    } catch (e) {
      f.crashes++;
      note(i, c.path, 0, `threw: ${(e as Error).message}`);
      continue;
    }
    f.cases++;
    f.byStatus[res.status] = (f.byStatus[res.status] ?? 0) + 1;
    if (res.status === 503) f.unavailable++;
    else if (res.status >= 500) {
      f.serverErrors++;
      note(i, c.path, res.status, (await errorOf(res)).text);
      continue;
    }
    if (c.unauthorized && res.status < 300) {
      f.unauthorized2xx++;
      note(i, c.path, res.status, "answered without a valid key or secret for it");
    }
    if (res.status >= 400) {
      const { code, text } = await errorOf(res);
      if (code === undefined) {
        f.uncoded++;
        note(i, c.path, res.status, `no stable error code: ${text}`);
      }
      const more = await p.onRefused?.(c);
      if (more !== undefined) note(i, c.path, res.status, more);
    } else await p.onAccepted(res, c);
    if ((i + 1) % p.progressEvery === 0) p.onProgress?.(i + 1);
  }
  return f;
}

/** An error answer's stable code (a msgpack error frame, or JSON `{ error: { code } }`) and its first 200 characters. */
async function errorOf(res: Response): Promise<{ code: string | undefined; text: string }> {
  const bytes = new Uint8Array(await res.arrayBuffer());
  let code: unknown;
  let text: string;
  if (res.headers.get("content-type")?.includes("json")) {
    text = new TextDecoder().decode(bytes);
    try {
      code = (JSON.parse(text) as { error?: { code?: unknown } }).error?.code;
    } catch {
      code = undefined;
    }
  } else {
    const frame = decodeFrame(bytes);
    code = frame.ok && frame.value.type === "error" ? frame.value.code : undefined;
    text = frame.ok ? JSON.stringify(frame.value) : new TextDecoder().decode(bytes);
  }
  return { code: typeof code === "string" && (ERROR_CODES as readonly string[]).includes(code) ? code : undefined, text: text.slice(0, 200) };
}
