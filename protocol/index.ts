/**
 * Public API of `protocol/`: the wire contract shared by the edge and the GPU backends.
 *
 * @example
 * import { encode, decodeGenerateRequest, FrameDecoder, ProtocolError, hashBlocks } from "./";
 */
export * from "./messages";
export * from "./errors";
export { encode, validateHeartbeat, validateHeartbeatReply, decodeGenerateRequest, decodeReleaseStateRequest, decodeLeaseRequest, decodeReleaseLeaseRequest, decodeFrame, FrameDecoder, DEFAULT_MAX_FRAME_BYTES } from "./codec";
export type { DecodeResult } from "./codec";
export * from "./block-hash";
export * from "./routes";
