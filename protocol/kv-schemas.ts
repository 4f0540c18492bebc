import { z } from "zod";
import type { KvFetchRequest, KvPullReport, KvPullRequest, KvStreamHeader } from "./kv-messages";
import { KV_PULL_OUTCOMES } from "./kv-messages";
import type { Assert, Equals } from "./schema-parts";
import { array, count, expect, integer, map, milliseconds, nonEmptyString, oneOf, string, tokenId } from "./schema-parts";

/**
 * Schemas of the KV transfer messages (kv-messages.ts; re-exported by schemas.ts), each typed to
 * match its message exactly (the drift checks at the bottom).
 */

export const kvPullReportSchema = map({
  outcome: z.enum(KV_PULL_OUTCOMES, expect(oneOf(KV_PULL_OUTCOMES))),
  from: string,
  missingBlocks: count,
  blocks: count,
  bytes: count,
  ms: milliseconds,
}) satisfies z.ZodType<KvPullReport>;

export const kvPullRequestSchema = map({
  model: string.optional(),
  cacheSalt: string.optional(),
  tokenIds: array(tokenId).min(1, "must be a non-empty array"),
  fromBlock: count,
  format: nonEmptyString,
}) satisfies z.ZodType<KvPullRequest>;

export const kvFetchRequestSchema = map({
  source: map({ url: nonEmptyString, backendId: string.optional() }),
  model: string.optional(),
  cacheSalt: string.optional(),
  tokenIds: array(tokenId).min(1, "must be a non-empty array"),
}) satisfies z.ZodType<KvFetchRequest>;

export const kvStreamHeaderSchema = map({
  format: nonEmptyString,
  bytesPerBlock: integer(1),
  blocks: count,
}) satisfies z.ZodType<KvStreamHeader>;


export type KvSchemaDriftChecks = [
  Assert<Equals<z.output<typeof kvPullReportSchema>, KvPullReport>>,
  Assert<Equals<z.output<typeof kvPullRequestSchema>, KvPullRequest>>,
  Assert<Equals<z.output<typeof kvFetchRequestSchema>, KvFetchRequest>>,
  Assert<Equals<z.output<typeof kvStreamHeaderSchema>, KvStreamHeader>>,
];
