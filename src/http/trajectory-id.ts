import { ProtocolError } from "../../protocol";

const TRAJECTORY_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Trajectory ids are 1-128 characters of [A-Za-z0-9._:-]. */
export function checkTrajectoryId(id: string): void {
  if (!TRAJECTORY_ID.test(id)) throw new ProtocolError("invalid_request", "trajectory id must be 1-128 characters of A-Z a-z 0-9 . _ : -");
}
