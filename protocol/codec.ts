import { C1, Packr, Unpackr, type Options } from "msgpackr";
import type { z } from "zod";
import { ProtocolError } from "./errors";
import type { Frame, GenerateRequest, Heartbeat, HeartbeatReply, KvFetchRequest, KvPullReport, KvPullRequest, KvStreamHeader, LeaseRequest, LeaseResponse, ReleaseLeaseRequest, ReleaseLeaseResponse, ReleaseStateRequest, TokenizeRequest, TokenizeResponse } from "./messages";
import {
  frameSchema,
  generateRequestSchema,
  heartbeatReplySchema,
  heartbeatSchema,
  kvPullRequestSchema,
  kvFetchRequestSchema,
  kvPullReportSchema,
  kvStreamHeaderSchema,
  leaseRequestSchema,
  leaseResponseSchema,
  releaseLeaseRequestSchema,
  releaseLeaseResponseSchema,
  releaseStateRequestSchema,
  tokenizeRequestSchema,
  tokenizeResponseSchema,
} from "./schemas";

/**
 * The one module that touches msgpackr: encoding, decoding with validation, and the streaming
 * frame decoder for `/v1/generate` answers.
 *
 * Encoding is plain, interoperable msgpack: maps with string keys (no msgpackr records), the
 * smallest map/int headers, 64-bit floats for non-integers, and properties whose value is
 * `undefined` left out (as `JSON.stringify` does), so any msgpack library can read it.
 * Decoding turns 64-bit integers into JS numbers, then validates with `schemas.ts`.
 */

/** The outcome of decoding one message: the validated value or the reason it was rejected. */
export type DecodeResult<T> = { ok: true; value: T } | { ok: false; error: ProtocolError };

/** Largest frame the {@link FrameDecoder} buffers by default (bytes). */
export const DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024;

/**
 * Encodes one protocol value (a request, a frame, or any plain data: maps with string keys,
 * arrays, strings, finite numbers, booleans, null) as msgpack. The result owns its buffer.
 *
 * @example
 * const body = encode(request); // POST with content-type application/msgpack
 * controller.enqueue(encode({ type: "token", tokenIds: [42], text: "hi" }));
 */
export function encode(value: unknown): Uint8Array {
  const bytes: Uint8Array = packr.pack(value);
  // msgpackr returns a view into its reusable output buffer, shared with later results. Copy, so
  // the result owns its ArrayBuffer (safe to transfer, e.g. to a byte stream) and is a plain
  // Uint8Array on Node as in workerd.
  return new Uint8Array(bytes);
}

/**
 * Decodes and validates a `/v1/generate` request body.
 *
 * @example
 * const decoded = decodeGenerateRequest(body);
 * if (!decoded.ok) return errorResponse(decoded.error); // malformed_msgpack or invalid_request
 * engine.submit(decoded.value);
 */
export function decodeGenerateRequest(bytes: Uint8Array): DecodeResult<GenerateRequest> {
  return decodeOne(bytes, generateRequestSchema, "request");
}

/**
 * Decodes and validates a `/v1/states/release` request body.
 *
 * @example
 * const decoded = decodeReleaseStateRequest(body);
 * if (decoded.ok) engine.releaseState(decoded.value.stateId);
 */
export function decodeReleaseStateRequest(bytes: Uint8Array): DecodeResult<ReleaseStateRequest> {
  return decodeOne(bytes, releaseStateRequestSchema, "request");
}

/**
 * Decodes and validates a `/v1/tokenize` request body.
 *
 * @example
 * const decoded = decodeTokenizeRequest(body);
 * if (decoded.ok) answer({ promptTokens: engine.countPromptTokens(decoded.value) });
 */
export function decodeTokenizeRequest(bytes: Uint8Array): DecodeResult<TokenizeRequest> {
  return decodeOne(bytes, tokenizeRequestSchema, "request");
}

/**
 * Decodes and validates the answer of `/v1/tokenize` (edge side).
 *
 * @example
 * const r = decodeTokenizeResponse(new Uint8Array(await res.arrayBuffer())); // r.value.promptTokens
 */
export function decodeTokenizeResponse(bytes: Uint8Array): DecodeResult<TokenizeResponse> {
  return decodeOne(bytes, tokenizeResponseSchema, "response");
}

/**
 * Decodes and validates a `/v1/leases` request body.
 *
 * @example
 * const decoded = decodeLeaseRequest(body);
 * if (decoded.ok) engine.leases.lease(decoded.value.stateId, decoded.value.ttlMs);
 */
export function decodeLeaseRequest(bytes: Uint8Array): DecodeResult<LeaseRequest> {
  return decodeOne(bytes, leaseRequestSchema, "request");
}

/**
 * Decodes and validates a `/v1/kv/pull` request body (backend to backend).
 *
 * @example
 * const decoded = decodeKvPullRequest(body);
 * if (decoded.ok) serveBlocks(decoded.value);
 */
export function decodeKvPullRequest(bytes: Uint8Array): DecodeResult<KvPullRequest> {
  return decodeOne(bytes, kvPullRequestSchema, "request");
}

/**
 * Decodes and validates a `/v1/kv/fetch` request body (a draining backend to a peer).
 *
 * @example
 * const decoded = decodeKvFetchRequest(body);
 * if (decoded.ok) await engine.fetchBlocks(decoded.value);
 */
export function decodeKvFetchRequest(bytes: Uint8Array): DecodeResult<KvFetchRequest> {
  return decodeOne(bytes, kvFetchRequestSchema, "request");
}

/** The answer of `/v1/kv/fetch`. @example decodeKvPullReport(bytes) // { ok: true, value: { outcome: "pulled", ... } } */
export function decodeKvPullReport(bytes: Uint8Array): DecodeResult<KvPullReport> {
  return decodeOne(bytes, kvPullReportSchema, "response");
}

/**
 * Decodes and validates the header of a `/v1/kv/pull` answer's block stream.
 *
 * @example const h = decodeKvStreamHeader(headerBytes); if (h.ok && h.value.format === io.format) readBlocks(h.value.blocks);
 */
export function decodeKvStreamHeader(bytes: Uint8Array): DecodeResult<KvStreamHeader> {
  return decodeOne(bytes, kvStreamHeaderSchema, "response");
}

/**
 * Decodes and validates a `/v1/leases/release` request body.
 *
 * @example
 * const decoded = decodeReleaseLeaseRequest(body);
 * if (decoded.ok) engine.leases.release(decoded.value.stateId, decoded.value.expired ?? false);
 */
export function decodeReleaseLeaseRequest(bytes: Uint8Array): DecodeResult<ReleaseLeaseRequest> {
  return decodeOne(bytes, releaseLeaseRequestSchema, "request");
}

/**
 * Decodes and validates the answers of `/v1/leases` and `/v1/leases/release` (edge side).
 *
 * @example
 * const r = decodeLeaseResponse(new Uint8Array(await res.arrayBuffer()));
 * if (r.ok && r.value.leased) scheduleAlarm(r.value.expiresAt);
 */
export function decodeLeaseResponse(bytes: Uint8Array): DecodeResult<LeaseResponse> {
  return decodeOne(bytes, leaseResponseSchema, "response");
}

/** See {@link decodeLeaseResponse}. @example decodeReleaseLeaseResponse(bytes) // { ok: true, value: { released: true } } */
export function decodeReleaseLeaseResponse(bytes: Uint8Array): DecodeResult<ReleaseLeaseResponse> {
  return decodeOne(bytes, releaseLeaseResponseSchema, "response");
}

/**
 * Decodes and validates exactly one frame (for a stream of frames use {@link FrameDecoder}).
 *
 * @example
 * const decoded = decodeFrame(encode(frame)); // { ok: true, value: frame }
 */
export function decodeFrame(bytes: Uint8Array): DecodeResult<Frame> {
  return decodeOne(bytes, frameSchema, "frame");
}

/**
 * Splits a byte stream of back-to-back msgpack frames into validated frames, whatever the chunk
 * boundaries: an incomplete trailing frame stays buffered until the bytes that complete it come.
 *
 * "Incomplete" and "corrupt" are told apart by msgpackr itself: it marks an error `incomplete`
 * when decoding ran past the end of the buffer (and, from a length header, says how many bytes
 * are missing at least, so the decoder does not retry before they came). Anything else is corrupt.
 * Corrupt bytes (`malformed_msgpack`), a frame that fails validation (`invalid_request`), or a
 * frame longer than `maxFrameBytes` (`malformed_msgpack`) make `push` throw a
 * {@link ProtocolError}; the decoder then stays failed and throws the same error on every call.
 *
 * @example
 * const decoder = new FrameDecoder();
 * for await (const chunk of response.body) for (const frame of decoder.push(chunk)) handle(frame);
 * decoder.end(); // throws if the stream stopped inside a frame
 */
export class FrameDecoder {
  readonly #maxFrameBytes: number;
  /** Bytes not yet decoded, as received (joined only when a decode attempt can make progress). */
  #parts: Uint8Array[] = [];
  #buffered = 0;
  /** Buffered size at which decoding again can make progress (from msgpackr's missing-bytes hint). */
  #retryAt = 0;
  #failed: ProtocolError | null = null;

  constructor(options: { maxFrameBytes?: number } = {}) {
    this.#maxFrameBytes = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
  }

  /** Bytes of an incomplete frame held until more arrive. */
  get bufferedBytes(): number {
    return this.#buffered;
  }

  /**
   * Adds the next chunk of the stream and returns every frame it completes, in order.
   *
   * @example decoder.push(chunk) // [] while a frame is still incomplete
   */
  push(chunk: Uint8Array): Frame[] {
    if (this.#failed) throw this.#failed;
    if (chunk.length === 0) return [];
    this.#parts.push(chunk.slice());
    this.#buffered += chunk.length;
    if (this.#buffered < this.#retryAt) return [];

    const bytes = this.#parts.length === 1 ? this.#parts[0]! : concat(this.#parts, this.#buffered);
    const values: unknown[] = [];
    let consumed = 0;
    let missingBytes = 0;
    try {
      unpackr.unpackMultiple(bytes, (value: unknown, _start?: number, end?: number) => {
        values.push(value);
        consumed = end ?? bytes.length;
      });
    } catch (e) {
      if (!isIncomplete(e)) throw this.#fail(malformed("frame stream", e));
      missingBytes = missingBytesOf(e);
    }

    const frames: Frame[] = [];
    for (const value of values) {
      const result = validate(value, frameSchema, "frame");
      if (!result.ok) throw this.#fail(result.error);
      frames.push(result.value);
    }

    const rest = bytes.subarray(consumed);
    this.#parts = rest.length === 0 ? [] : [rest];
    this.#buffered = rest.length;
    this.#retryAt = rest.length === 0 ? 0 : rest.length + missingBytes;
    if (this.#retryAt > this.#maxFrameBytes) {
      throw this.#fail(
        new ProtocolError(
          "malformed_msgpack",
          `frame stream: a frame of at least ${this.#retryAt} bytes exceeds the limit of ${this.#maxFrameBytes}`,
        ),
      );
    }
    return frames;
  }

  /**
   * Declares the end of the stream: throws `malformed_msgpack` when it stopped inside a frame
   * (or rethrows the error that failed the decoder).
   *
   * @example decoder.end()
   */
  end(): void {
    if (this.#failed) throw this.#failed;
    if (this.#buffered > 0) {
      throw this.#fail(
        new ProtocolError("malformed_msgpack", `frame stream: the stream ended inside a frame (${this.#buffered} bytes left over)`),
      );
    }
  }

  #fail(error: ProtocolError): ProtocolError {
    this.#failed = error;
    this.#parts = [];
    this.#buffered = 0;
    return error;
  }
}

// ---------------------------------------------------------------------------------------------
// Internals
// ---------------------------------------------------------------------------------------------

const packr = new Packr({
  useRecords: false,
  variableMapSize: true,
  // Not in msgpackr's typings: properties whose value is listed are not written at all.
  skipValues: [undefined],
} as Options & { skipValues: unknown[] });

const unpackr = new Unpackr({ useRecords: false, mapsAsObjects: true, int64AsType: "number" });

/**
 * Validates a heartbeat parsed from JSON (the edge's `POST /v1/pool/heartbeat`): same rules and
 * error messages as the msgpack decoders ("running must be an integer >= 0").
 *
 * @example const h = validateHeartbeat(await c.req.json()); if (!h.ok) throw h.error;
 */
export function validateHeartbeat(value: unknown): DecodeResult<Heartbeat> {
  return validate(value, heartbeatSchema, "heartbeat");
}

/** Validates the pool's JSON answer to a heartbeat (the backend's side). */
export function validateHeartbeatReply(value: unknown): DecodeResult<HeartbeatReply> {
  return validate(value, heartbeatReplySchema, "heartbeat reply");
}

function decodeOne<T>(bytes: Uint8Array, schema: z.ZodType<T>, what: string): DecodeResult<T> {
  let value: unknown;
  try {
    value = unpackr.unpack(bytes);
  } catch (e) {
    return { ok: false, error: malformed(what, e) };
  }
  return validate(value, schema, what);
}

function validate<T>(value: unknown, schema: z.ZodType<T>, what: string): DecodeResult<T> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return { ok: true, value: parsed.data };
  // 0xc1 is never used in msgpack; msgpackr decodes it to a marker instead of failing.
  if (containsC1(value)) return { ok: false, error: new ProtocolError("malformed_msgpack", `${what}: the reserved byte 0xc1 is not msgpack`) };
  const issues = parsed.error.issues;
  const shown = issues.slice(0, MAX_ISSUES_SHOWN).map((issue) => `${formatPath(issue.path, what)} ${issue.message}`);
  if (issues.length > MAX_ISSUES_SHOWN) shown.push(`(and ${issues.length - MAX_ISSUES_SHOWN} more)`);
  return { ok: false, error: new ProtocolError("invalid_request", shown.join("; ")) };
}

const MAX_ISSUES_SHOWN = 5;

/** `["messages", 2, "role"]` → `messages[2].role`; the empty path names the whole value. */
function formatPath(path: readonly PropertyKey[], what: string): string {
  let out = "";
  for (const key of path) {
    if (typeof key === "number") out += `[${key}]`;
    else out += out === "" ? String(key) : `.${String(key)}`;
  }
  return out === "" ? what : out;
}

function containsC1(value: unknown, depth = 0): boolean {
  if (value === C1) return true;
  if (depth > 64 || typeof value !== "object" || value === null) return false;
  return Object.values(value).some((v) => containsC1(v, depth + 1));
}

function malformed(what: string, e: unknown): ProtocolError {
  const reason = e instanceof Error ? e.message : String(e);
  return new ProtocolError("malformed_msgpack", `${what} is not valid msgpack: ${reason}`, { cause: e });
}

/** msgpackr sets `incomplete: true` on an error from reading past the end of the buffer. */
function isIncomplete(e: unknown): boolean {
  return typeof e === "object" && e !== null && "incomplete" in e && e.incomplete === true;
}

/** At least this many more bytes are needed (msgpackr's `missingBytes` hint, else 1). */
function missingBytesOf(e: unknown): number {
  if (typeof e === "object" && e !== null && "missingBytes" in e) {
    const n = e.missingBytes;
    if (typeof n === "number" && Number.isSafeInteger(n) && n > 0) return n;
  }
  return 1;
}

function concat(parts: readonly Uint8Array[], length: number): Uint8Array {
  const out = new Uint8Array(length);
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}
