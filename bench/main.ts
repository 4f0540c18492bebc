import { parseArgs } from "node:util";
import { runAgentBench } from "./agent-bench";
import { runEdgeBench } from "./edge-bench";
import { runTraceBench } from "./trace-replay";

/**
 * `npm run bench -- <name> [flags]`
 *
 *   agent    synthetic agent trajectories, prefix cache on vs off, decode batch 1 vs 8
 *            flags: --quick, --json, --trajectories N, --turns N, --model DIR, --out DIR
 *   edge     per-turn latency client -> Worker -> DO -> backend vs client -> backend, and bytes
 *            sent to the backend per delta turn vs the transcript; flags: --quick, --json, --turns N
 *   trace    replay a Mooncake trace through the block pool: trace FILE --capacity N --policy P
 *            [--json], or --sweep (every policy and capacity, plot)
 *
 * Progress goes to stderr; with --json the last stdout line is one JSON object.
 */
const [name, ...rest] = process.argv.slice(2);
const { values } = parseArgs({
  args: name === "trace" ? [] : rest, // trace parses its own flags (a FILE and --capacity/--policy/--sweep)
  options: {
    quick: { type: "boolean", default: false },
    json: { type: "boolean", default: false },
    trajectories: { type: "string" },
    turns: { type: "string" },
    model: { type: "string" },
    out: { type: "string", default: "bench/out" },
  },
  strict: true,
});

switch (name) {
  case "agent": {
    const summary = await runAgentBench({
      quick: values.quick!,
      json: values.json!,
      trajectories: values.trajectories ? Number(values.trajectories) : undefined,
      turns: values.turns ? Number(values.turns) : undefined,
      model: values.model,
      outDir: values.out!,
    });
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify(summary, null, 2));
    break;
  }
  case "edge": {
    const summary = await runEdgeBench({ quick: values.quick!, turns: values.turns ? Number(values.turns) : undefined, model: values.model });
    console.log(values.json ? JSON.stringify(summary) : JSON.stringify(summary, null, 2));
    break;
  }
  case "trace":
    await runTraceBench(rest);
    break;
  default:
    console.error(`unknown benchmark ${JSON.stringify(name ?? "")}; available: agent, edge, trace`);
    process.exit(2);
}
