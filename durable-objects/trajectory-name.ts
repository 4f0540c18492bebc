/**
 * The one rule naming a trajectory: `<tenant>/<trajectory id>`. It is the name of the
 * trajectory's Durable Object (so the same id under two tenants is two objects), and the
 * `trajectoryId` (and a fork's `forkOf`) the backend keeps its states under.
 *
 * @example trajectoryName("acme", "t1") // "acme/t1"
 */
export function trajectoryName(tenant: string, trajectoryId: string): string {
  return `${tenant}/${trajectoryId}`;
}
