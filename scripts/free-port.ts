import { createServer } from "node:net";

/** Ports this process was already handed: the OS may offer a just-closed port again. */
const handedOut = new Set<number>();

/**
 * A TCP port that is free on `host` right now (the OS picks it), never one this process was
 * already given (so `[await freePort(), await freePort()]` are distinct). Another process may take
 * it before you bind it; good enough for tests and local tools.
 *
 * @example
 * const port = await freePort();
 */
export async function freePort(host = "127.0.0.1"): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = await osPort(host);
    if (!handedOut.has(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error("no fresh free port after 50 attempts");
}

function osPort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, host, () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Whether `port` can be bound on `host` right now.
 *
 * @example
 * if (!(await isPortFree(8787))) throw new Error("port 8787 is in use");
 */
export function isPortFree(port: number, host = "127.0.0.1"): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once("error", () => resolve(false));
    srv.listen(port, host, () => srv.close(() => resolve(true)));
  });
}
