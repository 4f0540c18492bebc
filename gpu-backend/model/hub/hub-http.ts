/** Where the hub is and who asks: `HF_ENDPOINT` (default https://huggingface.co) and `HF_TOKEN`. */
export interface HubConfig {
  endpoint: string;
  token?: string;
}

/** The hub config from an environment (default `process.env`). */
export function hubConfig(env: NodeJS.ProcessEnv = process.env): HubConfig {
  const endpoint = (env.HF_ENDPOINT || "https://huggingface.co").replace(/\/+$/, "");
  const token = env.HF_TOKEN || undefined;
  return token ? { endpoint, token } : { endpoint };
}

/** Redirects followed at most (a renamed repo, then the CDN). */
const MAX_REDIRECTS = 5;

/** Error codes (on fetch's `cause`) that mean the host cannot be reached at all. */
const UNREACHABLE = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "ENETUNREACH", "EHOSTUNREACH", "ETIMEDOUT", "UND_ERR_CONNECT_TIMEOUT"]);

/** The error code under a fetch failure ("ECONNREFUSED", "UND_ERR_SOCKET"...), if any. */
export function errorCode(e: unknown): string | undefined {
  for (let c: unknown = e, depth = 0; c && depth < 5; c = (c as { cause?: unknown }).cause, depth += 1) {
    const code = (c as { code?: unknown }).code;
    if (typeof code === "string") return code;
    const errors = (c as { errors?: unknown[] }).errors;
    if (Array.isArray(errors) && errors.length > 0) return errorCode(errors[0]);
  }
  return undefined;
}

/** Whether an error says the host could not be reached (as opposed to a connection cut mid-body). */
export function isUnreachable(e: unknown): boolean {
  const code = errorCode(e);
  return code !== undefined && UNREACHABLE.has(code);
}

/** A response from the hub, after its redirects, with the hub's own headers kept from the first hop. */
export interface HubResponse {
  response: Response;
  /** X-Repo-Commit of the first answer (the hub's, before a CDN redirect). */
  repoCommit?: string;
  /** X-Linked-Etag (an LFS file's sha256, quoted) or ETag of the first answer. */
  etag?: string;
}

/**
 * GETs a hub URL, following redirects by hand: the `Authorization: Bearer HF_TOKEN` header goes
 * only to the hub's own origin (a relative redirect: a renamed repo), never to the CDN a large
 * file redirects to. Maps failures to errors that say what to do: unreachable (offline, DNS),
 * 401/403 (gated or private: HF_TOKEN), 404, other statuses.
 *
 * @example const { response } = await hubGet(config, `${config.endpoint}/api/models/gpt2/revision/main`, "gpt2");
 */
export async function hubGet(config: HubConfig, url: string, what: string, headers: Record<string, string> = {}): Promise<HubResponse> {
  const origin = new URL(config.endpoint).origin;
  let current = url;
  let repoCommit: string | undefined;
  let etag: string | undefined;
  for (let hop = 0; ; hop += 1) {
    const sameOrigin = new URL(current).origin === origin;
    const h: Record<string, string> = { "user-agent": "agent-edge", ...headers };
    if (config.token && sameOrigin) h.authorization = `Bearer ${config.token}`;
    let response: Response;
    try {
      response = await fetch(current, { headers: h, redirect: "manual" });
    } catch (e) {
      if (isUnreachable(e)) {
        throw new Error(
          `cannot reach the Hugging Face hub at ${new URL(current).origin} (${errorCode(e)}) for ${what}: check the network (a proxy, a firewall) or HF_ENDPOINT; ` +
            `a model downloaded before loads offline from the cache (docs/model-sources.md)`,
        );
      }
      throw e;
    }
    if (hop === 0) {
      repoCommit = response.headers.get("x-repo-commit") ?? undefined;
      etag = response.headers.get("x-linked-etag") ?? response.headers.get("etag") ?? undefined;
    }
    if (response.status >= 300 && response.status < 400 && response.headers.get("location")) {
      await response.body?.cancel();
      if (hop >= MAX_REDIRECTS) throw new Error(`${what}: more than ${MAX_REDIRECTS} redirects from ${url}`);
      current = new URL(response.headers.get("location")!, current).toString();
      continue;
    }
    if (response.ok) return { response, repoCommit, etag };
    const body = (await response.text().catch(() => "")).slice(0, 200);
    if (response.status === 401 || response.status === 403) {
      throw new Error(
        config.token
          ? `the hub refused ${what} (${response.status}) with the token in HF_TOKEN: the repo is gated or private; accept its licence on its page with that account, or use a token with access (${body})`
          : `the hub refused ${what} (${response.status}): the repo is gated or private; set HF_TOKEN to a Hugging Face access token (https://huggingface.co/settings/tokens) of an account that has accepted its licence (${body})`,
      );
    }
    if (response.status === 404) throw new Error(`${what}: not found on the hub (404: no such repo, revision or file, or a private repo without HF_TOKEN) (${body})`);
    throw new Error(`${what}: the hub answered ${response.status} ${response.statusText} (${body})`);
  }
}

/** An ETag's value without W/ and quotes. */
export function bareEtag(etag: string | undefined): string | undefined {
  return etag?.replace(/^W\//, "").replace(/^"|"$/g, "") || undefined;
}
