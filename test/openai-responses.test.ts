import { Agent, MaxTurnsExceededError, OpenAIResponsesModel, run, setTracingDisabled, tool as agentTool } from "@openai/agents";
import { Ajv } from "ajv";
import OpenAI, { NotFoundError } from "openai";
import type { FunctionTool, Response, ResponseInputItem, ResponseStreamEvent } from "openai/resources/responses/responses";
import { ResponsesWS } from "openai/resources/responses/ws";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { parseResponseId } from "../src/http/response-id";
import { sharedTestStack, type SharedStack } from "./support/stack-fixture";

/**
 * The Responses API end to end: a backend process and `wrangler dev`, driven by the official
 * `openai` client (`responses.create`, streaming and not, `retrieve`, `inputItems.list`,
 * `delete`) and the OpenAI Agents SDK with its default Responses model. The tiny random model
 * calls tools only because `tool_choice: "required"` constrains it to.
 */
const MODEL = "tiny-llama-random";
const API_KEY = "sk-local-dev";
const ajv = new Ajv({ strict: false });

const READ_FILE: FunctionTool = {
  type: "function",
  name: "read_file",
  description: "Read a file of the repository",
  parameters: { type: "object", properties: { path: { type: "string", enum: ["README.md", "src/index.ts", "package.json"] } }, required: ["path"], additionalProperties: false },
  strict: true,
};
const INSTRUCTIONS = "You are a coding agent. Read files with the tools before answering. Always call a tool.";

interface SessionState {
  turns: { turn: number; mode: string; cached_tokens: number; prompt_tokens: number }[];
  forks: { id: string; turn: number }[];
  parent: { id: string; turn: number } | null;
}

describe("Responses API end to end (wrangler dev + backend + openai client + Agents SDK)", () => {
  let fixture: SharedStack | undefined;
  let stack: SharedStack;
  let client: OpenAI;
  const session = async (id: string): Promise<SessionState> => {
    const res = await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories/${id}`, { headers: { authorization: `Bearer ${API_KEY}` } });
    expect(res.status).toBe(200);
    return (await res.json()) as SessionState;
  };

  beforeAll(async () => {
    fixture = await sharedTestStack();
    stack = fixture;
    client = new OpenAI({ apiKey: API_KEY, baseURL: `${stack.edgeUrl}/v1`, maxRetries: 0 });
  });

  afterAll(() => fixture?.stop());

  it("a 10-turn chain of forced calls and their outputs over previous_response_id, streamed and not; a fork from turn 3; retrieve, list and delete", async () => {
    const chain: Response[] = [];
    let trajectory = "";
    let input: ResponseInputItem[] = [{ role: "user", content: "Find out what this repository does." }];
    for (let k = 1; k <= 10; k++) {
      const params = { model: MODEL, instructions: INSTRUCTIONS, input, tools: [READ_FILE], tool_choice: "required" as const, parallel_tool_calls: false, max_output_tokens: 64, temperature: 1, ...(k > 1 ? { previous_response_id: chain.at(-1)!.id } : {}) };
      let r: Response;
      if (k % 2 === 0) {
        const stream = client.responses.stream(params);
        const types: string[] = [];
        for await (const event of stream) types.push(event.type);
        r = await stream.finalResponse();
        expect(types[0]).toBe("response.created");
        expect(types.at(-1)).toBe("response.completed");
        expect(types).toEqual(expect.arrayContaining(["response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done"]));
      } else {
        const { data, response } = await client.responses.create(params).withResponse();
        r = data;
        trajectory = response.headers.get("x-trajectory-id")!;
      }
      expect(r.status, `turn ${k}`).toBe("completed");
      expect(r.previous_response_id).toBe(k > 1 ? chain.at(-1)!.id : null);
      const calls = r.output.filter((o) => o.type === "function_call");
      expect(calls.length, `turn ${k}`).toBeGreaterThan(0);
      for (const c of calls) expect(ajv.validate(READ_FILE.parameters!, JSON.parse(c.arguments)), c.arguments).toBe(true);
      chain.push(r);
      input = calls.map((c) => ({ type: "function_call_output" as const, call_id: c.call_id, output: `contents of ${(JSON.parse(c.arguments) as { path: string }).path}` }));
    }
    expect(trajectory).toMatch(/^resp_/);
    const state = await session(trajectory);
    expect(state.turns.map((t) => t.mode)).toEqual(["full", ...Array(9).fill("delta")]);
    const cached = chain.map((r) => r.usage!.input_tokens_details.cached_tokens);
    for (let k = 1; k < 10; k++) expect(cached[k], JSON.stringify(cached)).toBeGreaterThan(cached[k - 1]!);
    expect(state.turns.map((t) => t.cached_tokens)).toEqual(cached);

    // A fork from turn 3: a new trajectory on the parent's backend, reusing the prefix it shares by
    // block hash; the parent is untouched. The fork's first turn starts from the parent's token ids
    // (`forkOf`), the calls as the model wrote them (not their canonical JSON), so all of turn 3's
    // prompt and its call are shared: every full block of them cached (a call is over 16 tokens).
    const fork = await client.responses.create({ model: MODEL, instructions: INSTRUCTIONS, previous_response_id: chain[2]!.id, input: [{ role: "user", content: "Start over with package.json." }], tools: [READ_FILE], max_output_tokens: 8, temperature: 0 });
    expect(fork.usage!.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(chain[2]!.usage!.input_tokens);
    const after = await session(trajectory);
    expect(after.turns).toHaveLength(10);
    expect(after.forks.map((f) => f.turn)).toEqual([3]);
    expect((await session(after.forks[0]!.id)).parent).toEqual({ id: trajectory, turn: 3, relation: "fork" });

    // Retrieve, list input items, delete.
    const got = await client.responses.retrieve(chain[4]!.id);
    expect(got.output).toEqual(chain[4]!.output);
    expect(got.usage).toEqual(chain[4]!.usage);
    const items = [];
    for await (const item of client.responses.inputItems.list(chain[4]!.id, { order: "asc" })) items.push(item);
    expect(items.map((i) => i.type)).toEqual(chain[3]!.output.filter((o) => o.type === "function_call").map(() => "function_call_output"));
    await client.responses.delete(chain[0]!.id);
    await expect(client.responses.retrieve(chain[0]!.id)).rejects.toBeInstanceOf(NotFoundError);
    expect((await client.responses.retrieve(chain[1]!.id)).id).toBe(chain[1]!.id);
  }, 300_000);

  it("responses.stream streams a forced call's arguments piece by piece in OpenAI's event order; finalResponse() equals the non-streamed call", async () => {
    const params = { model: MODEL, instructions: INSTRUCTIONS, input: "Read the package manifest.", tools: [READ_FILE], tool_choice: "required" as const, parallel_tool_calls: false, max_output_tokens: 48, temperature: 0 };
    const created = await client.responses.create(params);
    const stream = client.responses.stream(params);
    const seen: string[] = [];
    stream.on("event", (e) => seen.push(e.type === "response.output_item.added" ? `added:${e.item.type}` : e.type));
    const final = await stream.finalResponse();
    // Item ids name each response; the call itself (canonical call_0 on each new trajectory) is the same.
    const calls = (r: Response) => r.output.filter((i) => i.type === "function_call").map(({ call_id, name, arguments: args, status }) => ({ call_id, name, arguments: args, status }));
    expect(calls(created).length).toBeGreaterThan(0);
    expect(calls(final)).toEqual(calls(created));
    const added = seen.indexOf("added:function_call");
    const done = seen.indexOf("response.function_call_arguments.done");
    expect(seen.slice(added + 1, done).filter((t) => t === "response.function_call_arguments.delta").length).toBeGreaterThan(1);
    expect(seen.slice(done, done + 2)).toEqual(["response.function_call_arguments.done", "response.output_item.done"]);
    expect(seen.at(-1)).toBe("response.completed");
  }, 120_000);

  it("the openai client's Responses WebSocket (ResponsesWS): two turns on one connection, the second only its new input over previous_response_id, a delta turn; the events of a streamed POST", async () => {
    const socket = new ResponsesWS(client);
    const events: ResponseStreamEvent[] = [];
    socket.on("event", (e) => events.push(e));
    socket.on("error", (e) => events.push({ type: "error", code: null, message: String(e), param: null, sequence_number: -1 }));
    const ended = async (n: number) => {
      const done = () => events.filter((e) => e.type === "response.completed" || e.type === "response.incomplete" || e.type === "error").length >= n;
      for (let waited = 0; !done(); waited += 50) {
        if (waited > 120_000) throw new Error(`timed out: ${events.map((e) => e.type).join(" ")}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      return events.splice(0);
    };
    const final = (e: ResponseStreamEvent[]): Response => {
      const last = e.at(-1)!;
      if (last.type !== "response.completed" && last.type !== "response.incomplete") throw new Error(JSON.stringify(last));
      return last.response;
    };
    const params = { model: MODEL, instructions: INSTRUCTIONS, max_output_tokens: 8, temperature: 0 };
    socket.send({ type: "response.create", ...params, input: "Say what this repository does." });
    const turn1 = await ended(1);
    const r1 = final(turn1);
    socket.send({ type: "response.create", ...params, previous_response_id: r1.id, input: [{ role: "user", content: "And in one word?" }] });
    const r2 = final(await ended(1));
    socket.close();
    // Both stored in the trajectory the connection opened (response ids name it): the second continued it as a delta.
    const trajectory = parseResponseId(r1.id).trajectoryId;
    expect(parseResponseId(r2.id).trajectoryId).toBe(trajectory);
    expect((await session(trajectory)).turns.map((t) => t.mode)).toEqual(["full", "delta"]);
    expect(r2.usage!.input_tokens_details.cached_tokens).toBeGreaterThan(0);
    expect((await client.responses.retrieve(r2.id)).output).toEqual(r2.output);
    // The same request as a streamed POST: the same event types, in the same order.
    const sse: string[] = [];
    for await (const e of await client.responses.create({ ...params, input: "Say what this repository does.", stream: true })) sse.push(e.type);
    const collapse = (types: string[]) => types.filter((t, i) => t !== types[i - 1]);
    expect(collapse(turn1.map((e) => e.type))).toEqual(collapse(sse));
  }, 300_000);

  it("the Agents SDK's default Responses model runs several tool round trips on one trajectory", async () => {
    setTracingDisabled(true);
    const trajectoryId = "agents-responses-1";
    const sdkClient = new OpenAI({ apiKey: API_KEY, baseURL: `${stack.edgeUrl}/v1`, maxRetries: 0, defaultHeaders: { "x-trajectory-id": trajectoryId } });
    const executed: string[] = [];
    const readFile = agentTool({
      name: "read_file",
      description: "Read a file of the repository",
      parameters: z.object({ path: z.enum(["README.md", "src/index.ts", "package.json"]) }),
      execute: ({ path }) => {
        executed.push(path);
        return `contents of ${path}`;
      },
    });
    const agent = new Agent({
      name: "coder",
      instructions: INSTRUCTIONS,
      model: new OpenAIResponsesModel(sdkClient, MODEL),
      tools: [readFile],
      modelSettings: { toolChoice: "required", maxTokens: 40, temperature: 1 },
      resetToolChoice: false,
    });
    const MAX_TURNS = 4;
    const error = await run(agent, "Find out what this repository does.", { maxTurns: MAX_TURNS }).then(
      (r) => new Error(`the run finished without MaxTurnsExceeded: ${JSON.stringify(r.finalOutput)}`),
      (e: unknown) => e,
    );
    expect(error, String(error)).toBeInstanceOf(MaxTurnsExceededError);
    expect(executed.length).toBeGreaterThanOrEqual(MAX_TURNS);
    const state = await session(trajectoryId);
    // The SDK resends the whole history as items: the edge sees the transcript grow, turn by turn.
    expect(state.turns.map((t) => t.mode)).toEqual(["full", ...Array(MAX_TURNS - 1).fill("delta")]);
    for (let k = 1; k < state.turns.length; k++) expect(state.turns[k]!.cached_tokens).toBeGreaterThan(state.turns[k - 1]!.cached_tokens);
  }, 300_000);

  it("prompt cache diagnostics: cache_hit when unchanged, cache_miss input_changed with missed tokens for new instructions (streamed), not found", async () => {
    type Diagnosed = Response & { prompt_cache_diagnostics?: { type: string; reason?: string; cache_missed_tokens?: number; comparison_reusable_tokens?: number } | null };
    const base = { model: MODEL, tools: [READ_FILE], tool_choice: "required" as const, parallel_tool_calls: false, max_output_tokens: 40, temperature: 1 };
    const outputs = (r: Response): ResponseInputItem[] =>
      r.output.filter((o) => o.type === "function_call").map((c) => ({ type: "function_call_output" as const, call_id: c.call_id, output: "contents" }));
    const first = (await client.responses.create({ ...base, instructions: INSTRUCTIONS, input: "Find out what this repository does." })) as Diagnosed;
    expect("prompt_cache_diagnostics" in first).toBe(false);
    const compare = (id: string) => ({ prompt_cache_options: { comparison_response_id: id } }) as object;
    const second = (await client.responses.create({ ...base, instructions: INSTRUCTIONS, previous_response_id: first.id, input: outputs(first), ...compare(first.id) })) as Diagnosed;
    expect(second.prompt_cache_diagnostics).toEqual({ type: "cache_hit" });
    // New instructions take the place of the old ones at the start: everything the second turn left is missed.
    const stream = client.responses.stream({ ...base, instructions: `Be brief. ${INSTRUCTIONS}`, previous_response_id: second.id, input: outputs(second), ...compare(second.id) });
    const third = (await stream.finalResponse()) as Diagnosed;
    const d = third.prompt_cache_diagnostics;
    expect(d?.type, JSON.stringify(d)).toBe("cache_miss");
    expect(d?.reason).toBe("input_changed");
    expect(d?.cache_missed_tokens).toBeGreaterThan(0);
    expect(d?.cache_missed_tokens).toBeLessThanOrEqual(d!.comparison_reusable_tokens!);
    expect(d!.comparison_reusable_tokens).toBe(second.usage!.input_tokens + second.usage!.output_tokens - 1);
    // An id not of ours, and one of this trajectory with a token it never stored.
    const made = `resp_${"0".repeat(32)}${third.id.slice(37)}`;
    let last: Response = third;
    for (const id of ["resp_nope", made]) {
      const r = (await client.responses.create({ ...base, instructions: `Be brief. ${INSTRUCTIONS}`, previous_response_id: last.id, input: outputs(last), ...compare(id) })) as Diagnosed;
      expect(r.prompt_cache_diagnostics, id).toEqual({ type: "comparison_response_not_found" });
      last = r;
    }
  }, 120_000);
});
