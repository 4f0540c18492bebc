import { ResponsesSockets } from "../durable-objects/trajectory/responses-socket";
import { TrajectoryDO as TrajectoryObject } from "../durable-objects/trajectory/trajectory-do";
import { socketResponder } from "./routes/responses-socket";

/**
 * The trajectory object the Worker binds (`TRAJECTORY`): durable-objects/'s `TrajectoryDO` (its
 * turns, transcript and storage) plus the Responses API's WebSocket transport, whose sockets it
 * holds with the hibernation API (`ResponsesSockets`). The sockets' turns run through the
 * Worker's own Responses route (`socketResponder`), which durable-objects/ cannot import: this
 * subclass is where the Worker lends it.
 *
 * @example export { TrajectoryDO } from "./trajectory-do"; // src/index.ts
 */
export class TrajectoryDO extends TrajectoryObject {
  private readonly sockets = new ResponsesSockets(this.ctx, socketResponder(this.env, this.ctx));

  /** A WebSocket upgrade the Worker forwarded (`socketUpgrade`); nothing else comes by fetch. */
  override async fetch(request: Request): Promise<Response> {
    return this.sockets.accept(request);
  }

  override async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    await this.sockets.message(ws, message);
  }

  override async webSocketClose(ws: WebSocket): Promise<void> {
    await this.sockets.closed(ws);
  }

  override async webSocketError(ws: WebSocket): Promise<void> {
    await this.sockets.closed(ws);
  }
}
