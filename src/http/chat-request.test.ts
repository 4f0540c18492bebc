import { describe, expect, it } from "vitest";
import { ProtocolError } from "../../protocol";
import { parseChatBody } from "./chat-request";

const user = { role: "user", content: "hi" };

function refusal(body: unknown): string {
  try {
    parseChatBody(body, "chat");
  } catch (e) {
    expect(e).toBeInstanceOf(ProtocolError);
    expect((e as ProtocolError).code).toBe("invalid_request");
    return (e as ProtocolError).message;
  }
  throw new Error("the body was accepted");
}

describe("parseChatBody: output budget", () => {
  it("no budget: maxTokens absent (the backend's clamp); max_completion_tokens before max_tokens; as given", () => {
    expect(parseChatBody({ messages: [user] }, "chat").sampling.maxTokens).toBeUndefined();
    expect("maxTokens" in parseChatBody({ messages: [user], max_tokens: null }, "chat").sampling).toBe(false);
    expect(parseChatBody({ messages: [user], max_tokens: 32000 }, "chat").sampling.maxTokens).toBe(32000);
    expect(parseChatBody({ messages: [user], max_tokens: 5, max_completion_tokens: 7 }, "append").sampling.maxTokens).toBe(7);
  });
});

describe("parseChatBody: thinking", () => {
  it.each([
    [{}, undefined],
    [{ chat_template_kwargs: { enable_thinking: false } }, false],
    [{ chat_template_kwargs: { enable_thinking: true }, reasoning_effort: "none" }, true],
    [{ enable_thinking: true }, true],
    [{ thinking: { type: "enabled", budget_tokens: 2048 } }, true],
    [{ thinking: { type: "disabled" } }, false],
    [{ reasoning_effort: "high" }, true],
    [{ reasoning_effort: "none" }, false],
    [{ chat_template_kwargs: {} }, undefined],
  ])("%j -> %s", (fields, thinking) => {
    expect(parseChatBody({ messages: [user], ...fields }, "chat").thinking).toBe(thinking);
  });
});

describe("parseChatBody: what OpenCode (AI SDK) and Qwen Code send", () => {
  it("accepts extra fields, nulls for unset fields, content parts with cache_control, top_k", () => {
    const p = parseChatBody(
      {
        model: "qwen3-coder",
        messages: [
          { role: "system", content: [{ type: "text", text: "You are opencode.", cache_control: { type: "ephemeral" } }] },
          { role: "user", content: [{ type: "text", text: "fix it", cache_control: { type: "ephemeral" } }] },
          { role: "assistant", content: "", reasoning_content: "hm", tool_calls: [{ id: "call_1", type: "function", function: { name: "read", arguments: '{"p":1}' } }] },
          { role: "tool", tool_call_id: "call_1", content: [{ type: "text", text: "file" }] },
        ],
        tools: [{ type: "function", function: { name: "read", description: "Read", parameters: { type: "object", properties: {} }, strict: null } }],
        max_tokens: 32000,
        stream: true,
        stream_options: { include_usage: true },
        usage: { include: true },
        metadata: { session: "s1" },
        reasoning_effort: "medium",
        temperature: 0.55,
        top_p: 1,
        top_k: 20,
        presence_penalty: 0,
        frequency_penalty: 0,
        user: "u",
        seed: null,
        stop: null,
        tool_choice: "auto",
        parallel_tool_calls: null,
        response_format: null,
        prompt_cache_key: "ses_123",
        vl_high_resolution_images: true,
      },
      "chat",
    );
    expect(p.messages).toEqual([
      { role: "system", content: "You are opencode." },
      { role: "user", content: "fix it" },
      { role: "assistant", content: "", tool_calls: [{ id: "call_1", type: "function", function: { name: "read", arguments: '{"p":1}' } }] },
      { role: "tool", tool_call_id: "call_1", content: "file" },
    ]);
    expect(p.sampling).toEqual({ maxTokens: 32000, temperature: 0.55, topP: 1, topK: 20, stop: [], stopTokenIds: [] });
    expect(p.stream).toBe(true);
    expect(p.includeUsage).toBe(true);
    expect(p.thinking).toBe(true);
    expect(p.promptCacheKey).toBe("ses_123");
    expect(p.constraint).toEqual({ type: "tool_calls", choice: "auto", parallel: true });
  });

  it("keeps clear refusals for wrong shapes of fields it uses", () => {
    expect(refusal({ messages: [user], max_tokens: 0 })).toMatch(/^max_tokens: /);
    expect(refusal({ messages: [user], reasoning_effort: "max" })).toMatch(/^reasoning_effort: must be "none"/);
    expect(refusal({ messages: [user], chat_template_kwargs: { enable_thinking: "yes" } })).toMatch(/^chat_template_kwargs\.enable_thinking: /);
    expect(refusal({ messages: [user], thinking: { type: "on" } })).toMatch(/^thinking\.type: /);
    expect(refusal({ messages: [user], top_k: -1 })).toMatch(/^top_k: /);
    expect(refusal({ messages: [user], n: 2 })).toMatch(/^n: /);
    expect(refusal({ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:," } }] }] })).toBe(
      'messages[0].content: must be a string, null or an array of text parts ({type: "text", text}); images and other parts are not supported',
    );
  });
});
