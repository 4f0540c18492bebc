import type { ChatMessage } from "../protocol/messages";
import { loadavg } from "node:os";
import { commonPrefixLength } from "../protocol/common-prefix";
import type { RoutingPolicyName } from "../durable-objects/routing/routing-policy";
import { loadModel, type LoadedModel } from "../gpu-backend/engine/load-model";
import { BLOCK_SIZE } from "./kit/engine";
import { note } from "./kit/progress";
import { countBy, round, sum, table, writeOut } from "./kit/report";
import { startBenchStack, type BenchStack } from "./kit/stack";
import { trajectoryState, type TurnRecordView } from "./kit/trajectory-view";
import { sendAgentTurn } from "./kit/turn-client";
import { makeWorkload, WORDS, type WorkloadTrajectory } from "./kit/workload";
import { warmUp, workloadSizes } from "./routing-bench";

/**
 * `npm run bench -- routing --subagents [--backends N] [--trajectories F] [--turns T] [--quick] [--json]`
 *
 * Subagents placed with their parent (issue 36) against the same workload placed as independent
 * trajectories. F families (default 4), each a parent trajectory and 4 children: the parent runs
 * its first turn (the turn that starts the subagents), then its children run T turns each,
 * concurrently with each other and with the parent's remaining turns; the families start together
 * over N backends (default 4). A family has its own system prompt and tools (a session's own
 * context); its children send the parent's system prompt and tools with their own task.
 *
 * Every run goes through OpenCode's session headers (`x-session-id`); `linked` adds
 * `x-parent-session-id` on the children's requests, `independent` leaves it out (nothing else
 * differs). Two workloads: `same-system` (the child's system prompt is the parent's, so its
 * prefix key is the parent's too) and `suffixed` (the parent's system prompt plus one line for
 * the subagent, as agent CLIs add: the same leading blocks, another prefix key). Each run starts
 * its own edge with its own cache salt on the same backends (nothing is reused across runs).
 *
 * Reported per run: the children's prompt tokens computed (prefilled) on their first turn and in
 * all, their first turns' routes, and the ratio linked / independent.
 */
export interface SubagentBenchOptions {
  quick: boolean;
  backends?: number;
  families?: number;
  turns?: number;
  model?: string;
  outDir: string;
  /** Each case runs once per policy (`ROUTING_POLICY` of its edge; default affinity only). */
  policies?: RoutingPolicyName[];
}

const CHILDREN = 4;
type Link = "linked" | "independent";
type SystemShape = "same-system" | "suffixed";

export interface SubagentRun {
  policy: RoutingPolicyName;
  workload: SystemShape;
  link: Link;
  childFirstPrompt: number;
  childFirstComputed: number;
  /**
   * The oracle's (ideal placement's) first-turn computed tokens: each child reuses the longest
   * whole-block prefix it shares with its parent's first prompt or an earlier sibling's.
   */
  childFirstOracle: number;
  childAllComputed: number;
  childAllPrompt: number;
  parentComputed: number;
  firstRoutes: Record<string, number>;
  /** The children's first turns by KV pull outcome (`none`: no pull). */
  firstPulls: Record<string, number>;
  /** Each child's first turn: its route, whether it ran with its parent, prompt and computed tokens, pull outcome. */
  firstTurns: { route: string | null; withParent: boolean; prompt: number; computed: number; pull: string | null }[];
  /** Children whose first turn ran on their parent's backend. */
  withParent: number;
  children: number;
  wallS: number;
}

type Ratios = Record<SystemShape, { first: number; all: number }>;

export async function runSubagentBench(o: SubagentBenchOptions): Promise<{ runs: SubagentRun[]; ratios: Ratios; byPolicy: Partial<Record<RoutingPolicyName, Ratios>> }> {
  const policies = o.policies ?? ["affinity"];
  const numBackends = o.backends ?? 4;
  const families = o.families ?? 4;
  const turns = o.turns ?? (o.quick ? 3 : 5);
  const model = await loadModel({ dir: o.model, log: () => {} });
  const modelId = model.spec.modelId;
  const sizes = workloadSizes(o.quick);
  // One group per family; its first trajectory is the parent, the others its children.
  const workload = makeWorkload({
    trajectories: families * (1 + CHILDREN),
    turns,
    groupShares: Array.from({ length: families }, () => 1),
    systemTokens: sizes.systemTokens,
    tools: { count: sizes.tools, descriptionWords: 24, args: 3, argWords: 8 },
    taskTokens: 40,
    observationTokens: sizes.observationTokens,
    replyTokens: sizes.replyTokens,
    pauseMs: [50, 300],
    vocabulary: WORDS.slice(0, 56),
    seed: 23,
    countTokens: (t) => model.codec.encode(t).length,
  });
  note("subagents", `${modelId}, ${numBackends} backends, ${families} families x (1 parent + ${CHILDREN} children) x ${turns} turns; policies ${policies.join(", ")}; load average ${round(loadavg()[0]!, 2)}`);
  const oracle = { "same-system": firstTurnOracle(model, workload, families, "same-system"), suffixed: firstTurnOracle(model, workload, families, "suffixed") };
  const stack = await startBenchStack({ name: "subagents", backends: numBackends, outDir: o.outDir, ...(o.model ? { model: o.model } : {}), backend: { kvMemory: "1GiB", threads: 1 }, edge: false });
  const runs: SubagentRun[] = [];
  try {
    await warmUp(stack, modelId);
    for (const policy of policies) {
      for (const shape of ["same-system", "suffixed"] as const) {
        for (const link of ["linked", "independent"] as const) runs.push({ ...(await runOnce(stack, modelId, workload, families, shape, link, policy)), childFirstOracle: oracle[shape] });
      }
    }
  } finally {
    await stack.close();
  }
  const ratio = (a: number, b: number) => (b > 0 ? round(a / b, 3) : 0);
  const ratiosOf = (p: RoutingPolicyName): Ratios => {
    const get = (w: SystemShape, l: Link) => runs.find((r) => r.policy === p && r.workload === w && r.link === l)!;
    return Object.fromEntries(
      (["same-system", "suffixed"] as const).map((w) => [w, { first: ratio(get(w, "linked").childFirstComputed, get(w, "independent").childFirstComputed), all: ratio(get(w, "linked").childAllComputed, get(w, "independent").childAllComputed) }]),
    ) as Ratios;
  };
  const byPolicy = Object.fromEntries(policies.map((p) => [p, ratiosOf(p)])) as Partial<Record<RoutingPolicyName, Ratios>>;
  const ratios = byPolicy[policies[0]!]!;
  process.stderr.write(
    `\n${table(
      ["policy", "workload", "link", "children", "first-turn prompt", "first-turn computed", "oracle's first-turn computed", "all computed / prompt", "with parent", "first-turn routes", "first-turn pulls", "parents computed", "wall s"],
      runs.map((r) => [r.policy, r.workload, r.link, r.children, r.childFirstPrompt, r.childFirstComputed, r.childFirstOracle, `${r.childAllComputed} / ${r.childAllPrompt}`, r.withParent, JSON.stringify(r.firstRoutes), JSON.stringify(r.firstPulls), r.parentComputed, r.wallS]),
    )}\nchildren's computed prompt tokens, linked / independent: ${JSON.stringify(byPolicy)}\n`,
  );
  writeOut(o.outDir, "routing-subagents.json", `${JSON.stringify({ numBackends, families, children: CHILDREN, turns, modelId, runs, ratios, byPolicy })}\n`);
  return { runs, ratios, byPolicy };
}

/** One run: a fresh edge (its own cache salt), every family at once, then the turn records. */
async function runOnce(stack: BenchStack, modelId: string, workload: WorkloadTrajectory[], families: number, shape: SystemShape, link: Link, policy: RoutingPolicyName): Promise<Omit<SubagentRun, "childFirstOracle">> {
  const tag = `${policy}-${shape}-${link}-${Date.now().toString(36)}`;
  await stack.startEdge({ vars: { ROUTING_POLICY: policy, CACHE_SALT_SECRET: `subagents-${tag}` }, state: tag });
  try {
    const start = performance.now();
    const ids: { id: string; role: "parent" | "child"; family: number }[] = [];
    await Promise.all(
      Array.from({ length: families }, async (_, f) => {
        const [parent, ...children] = workload.filter((t) => t.group === f);
        const parentId = `${tag}-p${f}`;
        ids.push({ id: parentId, role: "parent", family: f });
        const parentTranscript: ChatMessage[] = [];
        const send = (t: WorkloadTrajectory, id: string, k: number, transcript: ChatMessage[], headers: Record<string, string>) =>
          sendAgentTurn({ edgeUrl: stack.edgeUrl, modelId, tools: t.tools, turn: k === 0 ? firstTurn(t, shape, id === parentId) : t.turns[k]!, transcript, headers }, (e) => stack.onLine(`[subagents] retrying ${id} turn ${k + 1}: ${e.message}`));
        // The parent's first turn is the one that starts the subagents.
        await send(parent!, parentId, 0, parentTranscript, { "x-session-id": parentId });
        const rest = (async () => {
          for (let k = 1; k < parent!.turns.length; k++) await send(parent!, parentId, k, parentTranscript, { "x-session-id": parentId });
        })();
        await Promise.all(
          children.map(async (child, c) => {
            const id = `${tag}-p${f}-c${c}`;
            ids.push({ id, role: "child", family: f });
            const headers = { "x-session-id": id, ...(link === "linked" ? { "x-parent-session-id": parentId } : {}) };
            const transcript: ChatMessage[] = [];
            for (let k = 0; k < child.turns.length; k++) await send(child, id, k, transcript, headers);
          }),
        );
        await rest;
      }),
    );
    const wallS = round((performance.now() - start) / 1000, 1);
    const states = new Map<string, TurnRecordView[]>();
    for (const { id } of ids) states.set(id, (await trajectoryState(stack.edgeUrl, id)).turns);
    const children = ids.filter((x) => x.role === "child");
    const parentBackend = new Map(ids.filter((x) => x.role === "parent").map((x) => [x.family, states.get(x.id)![0]!.backend]));
    const firsts = children.map((x) => ({ ...states.get(x.id)![0]!, family: x.family }));
    const all = children.flatMap((x) => states.get(x.id)!);
    const run: Omit<SubagentRun, "childFirstOracle"> = {
      policy,
      workload: shape,
      link,
      childFirstPrompt: sum(firsts.map((t) => t.prompt_tokens)),
      childFirstComputed: sum(firsts.map((t) => t.computed_tokens)),
      childAllComputed: sum(all.map((t) => t.computed_tokens)),
      childAllPrompt: sum(all.map((t) => t.prompt_tokens)),
      parentComputed: sum(ids.filter((x) => x.role === "parent").flatMap((x) => states.get(x.id)!.map((t) => t.computed_tokens))),
      firstRoutes: countBy(firsts.map((t) => t.route ?? "none")),
      firstPulls: countBy(firsts.map((t) => t.kv_pull?.outcome ?? "none")),
      firstTurns: firsts.map((t) => ({ route: t.route, withParent: t.backend === parentBackend.get(t.family), prompt: t.prompt_tokens, computed: t.computed_tokens, pull: t.kv_pull?.outcome ?? null })),
      withParent: firsts.filter((t) => t.backend === parentBackend.get(t.family)).length,
      children: children.length,
      wallS,
    };
    note("subagents", `${policy} ${shape} ${link}: children's first turns computed ${run.childFirstComputed} of ${run.childFirstPrompt} prompt tokens; routes ${JSON.stringify(run.firstRoutes)}; ${run.withParent}/${run.children} on their parent's backend`);
    return run;
  } finally {
    await stack.stopEdge();
  }
}

/** A trajectory's first turn; a child's system prompt in the `suffixed` workload gains a subagent line. */
function firstTurn(t: WorkloadTrajectory, shape: SystemShape, isParent: boolean): WorkloadTrajectory["turns"][number] {
  const first = t.turns[0]!;
  if (isParent || shape === "same-system") return first;
  const [system, ...rest] = first.newMessages;
  return { ...first, newMessages: [{ ...system!, content: `${system!.content}\nYou are a subagent: answer the task below and report back.` }, ...rest] };
}

/**
 * Prompt tokens the children's first turns compute under the oracle (ideal placement): per
 * family, each child reuses the longest prefix its first prompt shares with its parent's or an
 * earlier sibling's (the siblings start together, so one of them computes what they share past
 * the parent's), in whole blocks and at most prompt - 1 tokens.
 */
function firstTurnOracle(model: LoadedModel, workload: readonly WorkloadTrajectory[], families: number, shape: SystemShape): number {
  const { codec } = model;
  const ids = (t: WorkloadTrajectory, isParent: boolean) => codec.encode(codec.render({ messages: firstTurn(t, shape, isParent).newMessages, tools: t.tools, addGenerationPrompt: true }));
  let computed = 0;
  for (let f = 0; f < families; f++) {
    const [parent, ...children] = workload.filter((t) => t.group === f);
    const parentIds = ids(parent!, true);
    const earlier: number[][] = [parentIds];
    for (const child of children) {
      const own = ids(child, false);
      const reusable = Math.min(own.length - 1, Math.max(...earlier.map((e) => commonPrefixLength(own, e))));
      computed += own.length - Math.floor(reusable / BLOCK_SIZE) * BLOCK_SIZE;
      earlier.push(own);
    }
  }
  return computed;
}
