import WebSocket from "ws";

/** The Worker isolate's JS heap, read through `wrangler dev`'s inspector (Chrome DevTools protocol). */
export interface WorkerHeap {
  /** Forces a full GC, then answers the heap's used size in MiB. */
  usedAfterGcMiB(): Promise<number>;
  close(): void;
}

/**
 * Connects to the Worker's inspector target at `inspectorPort` (`wrangler dev --inspector-port`,
 * devtools on). What the Worker's own code holds shows here; workerd's native memory (sockets,
 * SQLite, the runtime) does not, which tells a leak in the Worker from memory the runtime keeps.
 *
 * @example const heap = await openWorkerHeap(port); await heap.usedAfterGcMiB(); // 7.6
 */
export async function openWorkerHeap(inspectorPort: number): Promise<WorkerHeap> {
  const targets = (await (await fetch(`http://127.0.0.1:${inspectorPort}/json`)).json()) as { webSocketDebuggerUrl: string }[];
  const url = targets[0]?.webSocketDebuggerUrl;
  if (!url) throw new Error(`no inspector target at port ${inspectorPort}`);
  const ws = new WebSocket(url);
  await new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("error", reject);
  });
  let nextId = 0;
  const pending = new Map<number, (result: Record<string, unknown>) => void>();
  ws.on("message", (data: Buffer) => {
    const msg = JSON.parse(data.toString()) as { id?: number; result?: Record<string, unknown> };
    if (msg.id !== undefined) pending.get(msg.id)?.(msg.result ?? {});
    if (msg.id !== undefined) pending.delete(msg.id);
  });
  const call = (method: string) =>
    new Promise<Record<string, unknown>>((resolve) => {
      const id = ++nextId;
      pending.set(id, resolve);
      ws.send(JSON.stringify({ id, method, params: {} }));
    });
  return {
    usedAfterGcMiB: async () => {
      await call("HeapProfiler.collectGarbage");
      const usage = await call("Runtime.getHeapUsage");
      return Math.round((Number(usage.usedSize) / 2 ** 20) * 10) / 10;
    },
    close: () => ws.close(),
  };
}
