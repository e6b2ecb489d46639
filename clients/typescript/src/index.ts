/** vcm-client: the TypeScript client of vcm (see docs/typescript.md). */
export { VcmClient } from "./client.js";
export type { Body, ChangeFrame, ChatFrame, ChatMessage, ClientOptions, Idempotent, Query, Reply, Schemas, StreamOptions } from "./client.js";
export * from "./errors.js";
export type { components, operations, paths } from "./schema.js";
