import { describe, expect, it } from "vitest";
import { call, expectError, getState, stored, trajectoryPath, uniqueSystem } from "./helpers";

/** The Responses API on the real Worker, trajectory objects and backend (tiny random model). */

interface OutputItem {
  type: string;
  id: string;
  role?: string;
  content?: { type: string; text: string }[];
  call_id?: string;
  name?: string;
  arguments?: string;
}

interface ResponseJson {
  id: string;
  object: string;
  status: string;
  model: string;
  instructions: string | null;
  previous_response_id: string | null;
  output: OutputItem[];
  usage: { input_tokens: number; input_tokens_details: { cached_tokens: number }; output_tokens: number; total_tokens: number };
  metadata: Record<string, string>;
  store: boolean;
}

const TOOLS = [
  { type: "function", name: "read_file", description: "Read a file.", parameters: { type: "object", properties: { path: { type: "string", maxLength: 12 } }, required: ["path"], additionalProperties: false } },
];

const SMALL = { max_output_tokens: 3, temperature: 0 };

function create(body: Record<string, unknown>, options: { tenant?: "a" | "b"; headers?: Record<string, string> } = {}): Promise<Response> {
  return call("/v1/responses", { method: "POST", body, ...options });
}

async function ok(res: Response): Promise<ResponseJson> {
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return JSON.parse(text) as ResponseJson;
}

/** The trajectory a stored response lives in (the `x-trajectory-id` header). */
function trajectoryOf(res: Response): string {
  const id = res.headers.get("x-trajectory-id");
  expect(id).toBeTruthy();
  return id!;
}

describe("Responses API", () => {
  it("creates, chains with previous_response_id as delta turns, retrieves, lists input items and deletes", async () => {
    const instructions = uniqueSystem().content!;
    const r1res = await create({ instructions, input: "List the files.", metadata: { task: "t1" }, ...SMALL });
    const r1 = await ok(r1res);
    const trajectory = trajectoryOf(r1res);
    expect(r1.object).toBe("response");
    expect(r1.id).toMatch(/^resp_[0-9a-f]{32}/);
    expect(r1.status === "completed" || r1.status === "incomplete").toBe(true);
    expect(r1.instructions).toBe(instructions);
    expect(r1.metadata).toEqual({ task: "t1" });
    expect(r1.previous_response_id).toBeNull();
    expect(r1.output[0]!.type).toBe("message");
    expect(r1.usage.input_tokens).toBeGreaterThan(20);
    expect(r1.usage.input_tokens_details.cached_tokens).toBe(0);

    let previous = r1;
    for (let k = 2; k <= 4; k++) {
      const res = await create({ instructions, previous_response_id: previous.id, input: [{ role: "user", content: `Now step ${k}.` }], ...SMALL });
      const r = await ok(res);
      expect(res.headers.get("x-agent-edge-mode"), `turn ${k}`).toBe("delta");
      expect(trajectoryOf(res)).toBe(trajectory);
      expect(r.previous_response_id).toBe(previous.id);
      // Everything before the new input was prefilled already (block granularity aside).
      expect(r.usage.input_tokens_details.cached_tokens).toBeGreaterThan(previous.usage.input_tokens_details.cached_tokens);
      previous = r;
    }
    const s = await stored("a", trajectory);
    expect(s.turns).toHaveLength(4);
    expect(s.messages[0]).toEqual({ role: "system", content: instructions });
    expect(s.messages.filter((m) => m.role === "user").map((m) => m.content)).toEqual(["List the files.", "Now step 2.", "Now step 3.", "Now step 4."]);

    const got = await ok(await call(`/v1/responses/${previous.id}`));
    expect(got).toEqual(previous);
    const items = (await (await call(`/v1/responses/${previous.id}/input_items?order=asc`)).json()) as { object: string; data: OutputItem[]; has_more: boolean };
    expect(items.object).toBe("list");
    expect(items.data.map((i) => [i.type, i.role, i.content?.[0]?.text])).toEqual([["message", "user", "Now step 4."]]);
    const first = (await (await call(`/v1/responses/${r1.id}/input_items`)).json()) as { data: OutputItem[] };
    expect(first.data.map((i) => i.content?.[0]?.text)).toEqual(["List the files."]);

    // Another tenant's key finds nothing, for reads, deletes and continuations alike.
    await expectError(await call(`/v1/responses/${r1.id}`, { tenant: "b" }), 404, "not_found");
    await expectError(await call(`/v1/responses/${r1.id}`, { tenant: "b", method: "DELETE" }), 404, "not_found");
    await expectError(await create({ previous_response_id: r1.id, input: "hi", ...SMALL }, { tenant: "b" }), 404, "not_found");
    await expectError(await call(`/v1/responses/resp_${"0".repeat(32)}dHJhal8x`), 404, "not_found");
    await expectError(await call(`/v1/responses/not-an-id`), 404, "not_found");

    const del = await call(`/v1/responses/${r1.id}`, { method: "DELETE" });
    expect(await del.json()).toEqual({ id: r1.id, object: "response", deleted: true });
    await expectError(await call(`/v1/responses/${r1.id}`), 404, "not_found");
    await expectError(await create({ previous_response_id: r1.id, input: "hi", ...SMALL }), 404, "not_found");
    // The transcript stays: later responses are built on it.
    expect((await stored("a", trajectory)).messages).toEqual(s.messages);
  });

  it("chaining from an older response forks: a new trajectory sharing the parent's blocks, the parent chain unaffected", async () => {
    const instructions = uniqueSystem(40).content!;
    const chain: ResponseJson[] = [];
    let trajectory = "";
    for (let k = 1; k <= 3; k++) {
      const res = await create({ instructions, input: `Step ${k}.`, ...SMALL, ...(k > 1 ? { previous_response_id: chain.at(-1)!.id } : {}) });
      chain.push(await ok(res));
      trajectory = trajectoryOf(res);
    }
    const parentBefore = await stored("a", trajectory);

    const forkRes = await create({ instructions, previous_response_id: chain[0]!.id, input: "A different step 2.", ...SMALL });
    const fork = await ok(forkRes);
    const forkId = trajectoryOf(forkRes);
    expect(forkId).not.toBe(trajectory);
    expect(fork.previous_response_id).toBe(chain[0]!.id);
    // Placed on the parent's backend: the shared prefix (instructions, step 1, its reply) is cached.
    expect(fork.usage.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(64);
    const forkStored = await stored("a", forkId);
    expect(forkStored.messages.slice(0, 3)).toEqual(parentBefore.messages.slice(0, 3));
    expect(forkStored.messages[3]).toEqual({ role: "user", content: "A different step 2." });
    expect(forkStored.messages).toHaveLength(5);

    const parent = await getState("a", trajectory);
    expect(parent.forks.map((f) => [f.id, f.turn])).toEqual([[forkId, 1]]);
    expect((await getState("a", forkId)).parent).toEqual({ id: trajectory, turn: 1, relation: "fork" });
    expect((await stored("a", trajectory)).messages).toEqual(parentBefore.messages);
    // The inspector shows both ends of the fork.
    const inspected = (await (await call(trajectoryPath("a", trajectory, "/inspect.json"))).json()) as { forks: { id: string; turn: number }[] };
    expect(inspected.forks.map((f) => [f.id, f.turn])).toEqual([[forkId, 1]]);
    const forkPage = await (await call(trajectoryPath("a", forkId, "/inspect"))).text();
    expect(forkPage).toContain(`forked from <a href="/v1/tenants/tenant-a/trajectories/${trajectory}/inspect">${trajectory}</a> at turn 1`);

    // The fork's own responses chain on the fork; the parent's latest still chains as a delta.
    const forkNext = await create({ instructions, previous_response_id: fork.id, input: "Go on.", ...SMALL });
    await ok(forkNext);
    expect(trajectoryOf(forkNext)).toBe(forkId);
    expect(forkNext.headers.get("x-agent-edge-mode")).toBe("delta");
    const parentNext = await create({ instructions, previous_response_id: chain[2]!.id, input: "Step 4.", ...SMALL });
    await ok(parentNext);
    expect(trajectoryOf(parentNext)).toBe(trajectory);
    expect(parentNext.headers.get("x-agent-edge-mode")).toBe("delta");
    // A retrieved fork response names its own trajectory.
    expect((await ok(await call(`/v1/responses/${fork.id}`))).id).toBe(fork.id);

    // A fork of turn 1 with turn 2's own input starts from the parent's token ids: the same
    // prompt as turn 2 had (not the reply re-tokenized), every full block of it cached.
    const sameRes = await create({ instructions, previous_response_id: chain[0]!.id, input: "Step 2.", ...SMALL });
    const same = await ok(sameRes);
    const sameTurn = (await getState("a", trajectoryOf(sameRes))).turns[0]!;
    console.log(`fork of turn 1 with turn 2's input: prompt ${same.usage.input_tokens} (turn 2: ${chain[1]!.usage.input_tokens}), cached ${same.usage.input_tokens_details.cached_tokens}, mode ${sameTurn.mode}`);
    expect(sameTurn.mode).toBe("full");
    expect(same.usage.input_tokens).toBe(chain[1]!.usage.input_tokens);
    const BLOCK = 16; // the backend's default --block-size
    expect(same.usage.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(Math.floor((same.usage.input_tokens - 1) / BLOCK) * BLOCK);
  });

  it("function calls: a forced call is a function_call item; its output continues the chain; an unknown call_id is a 400", async () => {
    const instructions = uniqueSystem().content!;
    const r1res = await create({ instructions, input: "Read the README.", tools: TOOLS, tool_choice: "required", max_output_tokens: 48, temperature: 0 });
    const r1 = await ok(r1res);
    const calls = r1.output.filter((i) => i.type === "function_call");
    expect(calls.length).toBeGreaterThan(0);
    expect(calls[0]!.name).toBe("read_file");
    expect(typeof (JSON.parse(calls[0]!.arguments!) as { path: unknown }).path).toBe("string");
    const trajectory = trajectoryOf(r1res);
    const before = await stored("a", trajectory);

    await expectError(await create({ instructions, previous_response_id: r1.id, tools: TOOLS, input: [{ type: "function_call_output", call_id: "call_nope", output: "x" }], ...SMALL }), 400, "invalid_request");
    expect(await stored("a", trajectory)).toEqual(before);

    const outputs = calls.map((c) => ({ type: "function_call_output", call_id: c.call_id, output: "# README\nhello" }));
    const r2res = await create({ instructions, previous_response_id: r1.id, tools: TOOLS, input: outputs, ...SMALL });
    await ok(r2res);
    expect(r2res.headers.get("x-agent-edge-mode")).toBe("delta");

    // The same conversation resent whole (no previous_response_id, items as the API returned them) is the same transcript.
    const whole = [{ role: "user", content: "Read the README." }, ...r1.output, ...outputs];
    const r3res = await create({ instructions, input: whole, tools: TOOLS, ...SMALL, store: false }, { headers: { "x-trajectory-id": trajectory } });
    const r3 = await ok(r3res);
    expect(r3res.headers.get("x-prefix-break")).toMatch(/^regenerate/);
    expect(r3.usage.input_tokens_details.cached_tokens).toBeGreaterThan(0);
  });

  it("streams the documented events in order, ending with response.completed holding the whole response", async () => {
    const res = await create({ instructions: uniqueSystem().content!, input: "Say hi.", stream: true, max_output_tokens: 6, temperature: 0 });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/text\/event-stream/);
    const text = await res.text();
    const events = text
      .trim()
      .split("\n\n")
      .map((block) => {
        const [eventLine, dataLine] = block.split("\n");
        const type = eventLine!.slice("event: ".length);
        const data = JSON.parse(dataLine!.slice("data: ".length)) as { type: string; sequence_number: number; response?: ResponseJson; delta?: string; text?: string };
        expect(data.type).toBe(type);
        return data;
      });
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const types = events.map((e) => e.type);
    expect(types.slice(0, 2)).toEqual(["response.created", "response.in_progress"]);
    const last = events.at(-1)!;
    expect(["response.completed", "response.incomplete"]).toContain(last.type);
    const final = last.response!;
    expect(events[0]!.response!.id).toBe(final.id);
    const message = final.output.find((i) => i.type === "message");
    if (message) {
      const deltas = events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
      expect(deltas.trim()).toBe(message.content![0]!.text.trim());
      expect(types).toEqual(expect.arrayContaining(["response.output_item.added", "response.content_part.added", "response.output_text.done", "response.content_part.done", "response.output_item.done"]));
    }
    expect(await ok(await call(`/v1/responses/${final.id}`))).toEqual(final);
  });

  it("an Idempotency-Key replay answers the same response (same id, retrievable) and stores nothing more", async () => {
    const body = { instructions: uniqueSystem().content!, input: "Say hi.", ...SMALL };
    const key = crypto.randomUUID();
    const firstRes = await create(body, { headers: { "idempotency-key": key } });
    const first = await ok(firstRes);
    const again = await create(body, { headers: { "idempotency-key": key } });
    expect(again.headers.get("x-agent-edge-replayed")).toBe("true");
    const replayed = await ok(again);
    expect(replayed.id).toBe(first.id);
    expect(replayed.output).toEqual(first.output);
    expect((await ok(await call(`/v1/responses/${replayed.id}`))).id).toBe(first.id);
    expect((await stored("a", trajectoryOf(firstRes))).turns).toHaveLength(1);
  });

  it("refuses what it does not serve, naming the field, and stores nothing", async () => {
    await expectError(await create({ input: [{ type: "input_image", image_url: "x" }] }), 400, "invalid_request");
    await expectError(await create({ input: [{ role: "user", content: [{ type: "input_image", image_url: "x" }] }] }), 400, "invalid_request");
    // (A hosted tool such as web_search is dropped with a warning for a tenant that is not strict: src/http/responses-tools.ts.)
    await expectError(await create({ input: "hi", tools: [{ type: "namespace", name: "n", tools: [{ type: "web_search" }] }] }), 400, "invalid_request");
    await expectError(await create({ input: "hi", background: true }), 400, "invalid_request");
    await expectError(await create({ input: 3 }), 400, "invalid_request");
  });
});
