"""vcm's one exception tree: every error that reaches a caller, in every layer and in the client.

Each class stands for one stable code and carries the HTTP status that code answers with; the
API renders ``{"error": {"code", "message", ...details}}`` from it and the client raises the same
class again from that body (:func:`from_payload`), so in-process and remote callers catch the
same exceptions::

    VcmError                    (root; also what the client raises for a code it does not know)
    ├── ValidationError         VALIDATION_ERROR       422  bad input; nothing changed
    ├── NotFound                NOT_FOUND              404  unknown agent / block / batch / document
    │   └── AgentFenced                                     a cold-path write for an agent deleted
    │                                                       (or re-created) since its job began
    ├── TokenBudgetExceeded     TOKEN_BUDGET_EXCEEDED  422  carries required_headroom
    ├── PinLimitExceeded        PIN_LIMIT_EXCEEDED     422  carries pinned, cap
    ├── RevConflict             REV_CONFLICT           409  optimistic lock lost; carries current_rev
    ├── IdempotencyMismatch     IDEMPOTENCY_MISMATCH   422  same key, different request
    ├── RateLimited             RATE_LIMITED           429  carries retry_after_s
    ├── Unauthorized            UNAUTHORIZED           401
    ├── Conflict                CONFLICT               409  the request clashes with current state
    │                                                       (an agent that exists, a batch finished
    │                                                       before its predecessor)
    ├── TaintedContent          TAINTED_CONTENT        422  instruction-like text promoted unjustified
    ├── SnapshotCorrupt         SNAPSHOT_CORRUPT       422  a snapshot failed its checksum; not restored
    ├── PolicyRefused           POLICY_REFUSED         422  a memory write the policy guard refused
    │                                                       (secret, PII); carries reasons
    ├── ConfigError             CONFIG_ERROR           500  invalid settings, raised at start
    ├── StoreUnavailable        STORE_UNAVAILABLE      503  backend down / transaction aborted
    │   └── InjectedFailure                                 raised by test fault hooks only
    └── InternalError           INTERNAL_ERROR         500  a server bug; the body says nothing more

This module imports nothing from vcm: the client SDK depends on it alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, ClassVar


class ErrorCode(StrEnum):
    TOKEN_BUDGET_EXCEEDED = "TOKEN_BUDGET_EXCEEDED"
    PIN_LIMIT_EXCEEDED = "PIN_LIMIT_EXCEEDED"
    REV_CONFLICT = "REV_CONFLICT"
    IDEMPOTENCY_MISMATCH = "IDEMPOTENCY_MISMATCH"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    NOT_FOUND = "NOT_FOUND"
    RATE_LIMITED = "RATE_LIMITED"
    UNAUTHORIZED = "UNAUTHORIZED"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    CONFIG_ERROR = "CONFIG_ERROR"
    CONFLICT = "CONFLICT"
    TAINTED_CONTENT = "TAINTED_CONTENT"
    SNAPSHOT_CORRUPT = "SNAPSHOT_CORRUPT"
    POLICY_REFUSED = "POLICY_REFUSED"
    LLM_UNAVAILABLE = "LLM_UNAVAILABLE"
    LLM_REJECTED = "LLM_REJECTED"
    INTERNAL_ERROR = "INTERNAL_ERROR"


class VcmError(Exception):
    """The root. ``code`` and ``http_status`` are per class; an instance built for a code this
    version does not know (a newer server's) carries that code and status itself."""

    code: str = ErrorCode.INTERNAL_ERROR
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        # The HTTP status: the class's, unless a reply with a code unknown here said otherwise.
        self.status: int = self.http_status

    def to_dict(self) -> dict[str, Any]:
        return {"code": str(self.code), "message": self.message, **self.details}


class ValidationError(VcmError):
    code = ErrorCode.VALIDATION_ERROR
    http_status = 422


class NotFound(VcmError):
    code = ErrorCode.NOT_FOUND
    http_status = 404


class AgentFenced(NotFound):
    """A cold-path write (eviction commit, spool, vectors, ingestion, extracted facts) carried the
    incarnation its job started with, and the store's agent record is gone or holds another one:
    the agent was deleted, or deleted and re-created, meanwhile. Nothing was written; the job ends
    ``fenced`` (never retried, never dead-lettered)."""


class TokenBudgetExceeded(VcmError):
    # 422, not 413: the request may be small; it is the window that has no room for it.
    code = ErrorCode.TOKEN_BUDGET_EXCEEDED
    http_status = 422


class PinLimitExceeded(VcmError):
    code = ErrorCode.PIN_LIMIT_EXCEEDED
    http_status = 422


class RevConflict(VcmError):
    code = ErrorCode.REV_CONFLICT
    http_status = 409


class IdempotencyMismatch(VcmError):
    # 422 as in the IETF Idempotency-Key draft: the key is being reused for a different request.
    code = ErrorCode.IDEMPOTENCY_MISMATCH
    http_status = 422


class RateLimited(VcmError):
    code = ErrorCode.RATE_LIMITED
    http_status = 429


class Unauthorized(VcmError):
    code = ErrorCode.UNAUTHORIZED
    http_status = 401


class Conflict(VcmError):
    code = ErrorCode.CONFLICT
    http_status = 409


class TaintedContent(VcmError):
    """Text that reads like instructions to the model, promoted without a justification."""

    code = ErrorCode.TAINTED_CONTENT
    http_status = 422


class SnapshotCorrupt(VcmError):
    """The stored snapshot does not match its SHA-256 (or cannot be read): nothing was restored."""

    code = ErrorCode.SNAPSHOT_CORRUPT
    http_status = 422


class PolicyRefused(VcmError):
    """The policy guard refused a memory write (a secret, a PII class, instruction-like text)
    given without a justification: nothing was written."""

    code = ErrorCode.POLICY_REFUSED
    http_status = 422


class ConfigError(VcmError):
    code = ErrorCode.CONFIG_ERROR
    http_status = 500


class StoreUnavailable(VcmError):
    code = ErrorCode.STORE_UNAVAILABLE
    http_status = 503


class LlmUnavailable(VcmError):
    """The model endpoint vcm calls (chat, /v1/chat/completions) failed or is not configured;
    retrying later may work."""

    code = ErrorCode.LLM_UNAVAILABLE
    http_status = 503


class LlmRejected(VcmError):
    """The model endpoint refused vcm's request or answered something unusable."""

    code = ErrorCode.LLM_REJECTED
    http_status = 502


class InjectedFailure(StoreUnavailable):
    """Raised by a fault hook in tests; behaves like a backend failure mid-operation."""


class InternalError(VcmError):
    code = ErrorCode.INTERNAL_ERROR
    http_status = 500


def _by_code() -> dict[str, type[VcmError]]:
    table: dict[str, type[VcmError]] = {}
    pending: list[type[VcmError]] = list(VcmError.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if "code" in vars(cls):  # a class that names its own code, not a refinement such as InjectedFailure
            assert cls.code not in table, f"two classes for {cls.code}"
            table[cls.code] = cls
    return table


ERRORS: dict[str, type[VcmError]] = _by_code()
"""The class of each stable code: the one lookup table of the API, the client and the hot state."""

STATUS: dict[str, int] = {code: cls.http_status for code, cls in ERRORS.items()}


def error_class(code: str) -> type[VcmError]:
    """The class of ``code``; the root for a code this version does not know."""
    return ERRORS.get(code, VcmError)


def from_payload(error: Mapping[str, Any], status: int | None = None) -> VcmError:
    """The exception an error body (``{"code", "message", ...details}``) stands for."""
    code = str(error.get("code", ErrorCode.INTERNAL_ERROR))
    message = str(error.get("message", code))
    details = {k: v for k, v in error.items() if k not in ("code", "message")}
    cls = ERRORS.get(code)
    if cls is not None:
        return cls(message, **details)
    exc = VcmError(message, **details)
    exc.code = code
    if status is not None:
        exc.status = status
    return exc


def error_payload(exc: VcmError) -> dict[str, Any]:
    """The JSON body / system-message payload for a coded error."""
    return exc.to_dict()
