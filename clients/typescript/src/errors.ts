/**
 * vcm's coded errors, one class per stable code, matching the Python tree (`vcm/errors.py`):
 * the server answers `{"error": {"code", "message", ...details}}` and the client throws the class
 * of that code, so a caller catches `RevConflict` or `NotFound` here as it does in Python.
 * A code this version does not know (a newer server's) is thrown as the root, `VcmError`, carrying
 * the code and the HTTP status of the reply.
 */

export type Details = Record<string, unknown>;

/** The root; also what the client throws for a code it does not know. */
export class VcmError extends Error {
  static readonly code: string = "INTERNAL_ERROR";
  static readonly httpStatus: number = 500;
  /** The stable code (`VALIDATION_ERROR`, `REV_CONFLICT`, ...). */
  code: string;
  /** The HTTP status: the class's, unless a reply with a code unknown here said otherwise. */
  status: number;
  /** Everything the error body carried besides code and message (`current_rev`, `retry_after_s`, ...). */
  readonly details: Details;

  constructor(message: string, details: Details = {}) {
    super(message);
    const cls = new.target as typeof VcmError;
    this.name = cls.name;
    this.code = cls.code;
    this.status = cls.httpStatus;
    this.details = details;
  }

  /** The error body's fields again: `{code, message, ...details}`. */
  toJSON(): Details {
    return { code: this.code, message: this.message, ...this.details };
  }
}

/** Bad input; nothing changed. */
export class ValidationError extends VcmError {
  static override readonly code = "VALIDATION_ERROR";
  static override readonly httpStatus = 422;
}

/** Unknown agent, block, job, document, fact, snapshot. */
export class NotFound extends VcmError {
  static override readonly code = "NOT_FOUND";
  static override readonly httpStatus = 404;
}

/** The window has no room for the request; carries `required_headroom`. */
export class TokenBudgetExceeded extends VcmError {
  static override readonly code = "TOKEN_BUDGET_EXCEEDED";
  static override readonly httpStatus = 422;
}

/** Too many pinned messages or blocks; carries `pinned`, `cap`. */
export class PinLimitExceeded extends VcmError {
  static override readonly code = "PIN_LIMIT_EXCEEDED";
  static override readonly httpStatus = 422;
}

/** Optimistic lock lost; carries `current_rev`. */
export class RevConflict extends VcmError {
  static override readonly code = "REV_CONFLICT";
  static override readonly httpStatus = 409;
}

/** The same idempotency key with a different request. */
export class IdempotencyMismatch extends VcmError {
  static override readonly code = "IDEMPOTENCY_MISMATCH";
  static override readonly httpStatus = 422;
}

/** Slow down; carries `retry_after_s` (from the body, else the `Retry-After` header). */
export class RateLimited extends VcmError {
  static override readonly code = "RATE_LIMITED";
  static override readonly httpStatus = 429;
}

export class Unauthorized extends VcmError {
  static override readonly code = "UNAUTHORIZED";
  static override readonly httpStatus = 401;
}

/** The request clashes with current state (an agent that exists, ...). */
export class Conflict extends VcmError {
  static override readonly code = "CONFLICT";
  static override readonly httpStatus = 409;
}

/** Instruction-like text promoted without a justification. */
export class TaintedContent extends VcmError {
  static override readonly code = "TAINTED_CONTENT";
  static override readonly httpStatus = 422;
}

/** A snapshot failed its checksum; nothing was restored. */
export class SnapshotCorrupt extends VcmError {
  static override readonly code = "SNAPSHOT_CORRUPT";
  static override readonly httpStatus = 422;
}

/** The policy guard refused a memory write (a secret, PII); carries `reasons`. */
export class PolicyRefused extends VcmError {
  static override readonly code = "POLICY_REFUSED";
  static override readonly httpStatus = 422;
}

/** Invalid server settings. */
export class ConfigError extends VcmError {
  static override readonly code = "CONFIG_ERROR";
  static override readonly httpStatus = 500;
}

/** A backend (Redis, the store) is down; retrying later may work. */
export class StoreUnavailable extends VcmError {
  static override readonly code = "STORE_UNAVAILABLE";
  static override readonly httpStatus = 503;
}

/** The model endpoint the server calls failed or is not configured; retrying later may work. */
export class LlmUnavailable extends VcmError {
  static override readonly code = "LLM_UNAVAILABLE";
  static override readonly httpStatus = 503;
}

/** The model endpoint refused the server's request or answered something unusable. */
export class LlmRejected extends VcmError {
  static override readonly code = "LLM_REJECTED";
  static override readonly httpStatus = 502;
}

/** A server bug; the body says nothing more. */
export class InternalError extends VcmError {
  static override readonly code = "INTERNAL_ERROR";
  static override readonly httpStatus = 500;
}

/** The class of each stable code (the lookup table the client throws from). */
export const ERRORS: Readonly<Record<string, typeof VcmError>> = Object.freeze(
  Object.fromEntries(
    [
      ValidationError, NotFound, TokenBudgetExceeded, PinLimitExceeded, RevConflict, IdempotencyMismatch,
      RateLimited, Unauthorized, Conflict, TaintedContent, SnapshotCorrupt, PolicyRefused, ConfigError,
      StoreUnavailable, LlmUnavailable, LlmRejected, InternalError,
    ].map((cls) => [cls.code, cls]),
  ),
);

/** The error an error body (`{code, message, ...details}`) stands for. */
export function fromPayload(error: Details, status?: number): VcmError {
  const { code: rawCode, message: rawMessage, ...details } = error;
  const code = typeof rawCode === "string" ? rawCode : "INTERNAL_ERROR";
  const message = typeof rawMessage === "string" ? rawMessage : code;
  const cls = ERRORS[code];
  if (cls !== undefined) return new cls(message, details);
  const unknown = new VcmError(message, details);
  unknown.code = code;
  if (status !== undefined) unknown.status = status;
  return unknown;
}

/** The error a failed reply stands for (its body read as JSON text). */
export function errorFromReply(status: number, text: string, retryAfter: string | null): VcmError {
  let error: unknown;
  try {
    error = (JSON.parse(text) as { error?: unknown }).error;
  } catch {
    error = undefined;
  }
  if (typeof error !== "object" || error === null) return bare(status, `HTTP ${status} without a vcm error body`);
  const body = { ...(error as Details) };
  if (typeof body.code !== "string" || typeof body.message !== "string") {
    return bare(status, `HTTP ${status} without a vcm error body`);
  }
  if (body.code === RateLimited.code && !("retry_after_s" in body)) {
    const seconds = Number(retryAfter ?? "1");
    body.retry_after_s = Number.isFinite(seconds) ? seconds : 1;
  }
  return fromPayload(body, status);
}

function bare(status: number, message: string): VcmError {
  const error = new VcmError(message);
  error.code = `HTTP_${status}`;
  error.status = status;
  return error;
}
