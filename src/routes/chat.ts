import { Hono } from "hono";
import { ROUTES } from "../../protocol/routes";
import type { AuthVariables } from "../http/auth";
import { readJson } from "../http/body";
import { parseChatBody } from "../http/chat-request";
import { chatAnswer } from "../http/respond";
import { dispatchTurn } from "../http/turn-dispatch";

/**
 * `POST /v1/chat/completions`, OpenAI-compatible: parsed (`parseChatBody`), run by the one turn
 * dispatch (`dispatchTurn`: the trajectory a header or `prompt_cache_key` names, else stateless)
 * and answered as `chat.completion` JSON or SSE chunks.
 */
export const chatRoutes = new Hono<{ Bindings: Env; Variables: AuthVariables }>().post(ROUTES.edge.openai.chatCompletions, async (c) => {
  const parsed = parseChatBody(await readJson(c), "chat");
  const request = { messages: parsed.messages, tools: parsed.tools, sampling: parsed.sampling, constraint: parsed.constraint, model: parsed.model, thinking: parsed.thinking, hints: { promptCacheKey: parsed.promptCacheKey } };
  return dispatchTurn(c, request, (d) =>
    chatAnswer({ model: d.echoModel, stream: parsed.stream, includeUsage: parsed.includeUsage, hasTools: (parsed.tools?.length ?? 0) > 0, logprobs: parsed.sampling.logprobs !== undefined }),
  );
});
