import { appendFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, startStack, type Stack, type StackOptions } from "../scripts/stack";

/**
 * The stack a reliability benchmark runs on: N backends (one thread each) and `wrangler dev`
 * (no devtools, its Durable Object storage in a temp folder), on free ports, every child's output
 * appended to `<outDir>/<name>-stack.log`. `close` stops it and deletes the folder.
 *
 * @example const { stack, logPath, close } = await startBenchStack({ name: "soak", backends: 2, outDir, options: { vars } });
 */
export async function startBenchStack(p: { name: string; backends: number; outDir: string; options?: StackOptions }): Promise<{ stack: Stack; logPath: string; inspectorPort: number; close: () => Promise<void> }> {
  mkdirSync(p.outDir, { recursive: true });
  const logPath = join(p.outDir, `${p.name}-stack.log`);
  writeFileSync(logPath, "");
  const dir = mkdtempSync(join(tmpdir(), `agent-edge-${p.name}-`));
  const backendPorts: number[] = [];
  for (let i = 0; i < p.backends; i++) backendPorts.push(await freePort());
  const inspectorPort = p.options?.inspectorPort ?? (await freePort());
  try {
    const stack = await startStack({
      backendPorts,
      edgePort: await freePort(),
      inspectorPort,
      devtools: false,
      threads: 1,
      persistTo: join(dir, "edge"),
      onLine: (line) => appendFileSync(logPath, `${new Date().toISOString()} ${line}\n`),
      ...p.options,
    });
    return {
      stack,
      logPath,
      inspectorPort,
      close: async () => {
        await stack.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}
