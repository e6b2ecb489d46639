"""The hot path's exception tree. Every error carries a stable code (see store.errors.ErrorCode)::

    VcmError                          (base)
    ├── ValidationError               VALIDATION_ERROR   bad input; nothing changed
    ├── NotFound                      NOT_FOUND          unknown agent / block / batch
    ├── TokenBudgetExceeded           TOKEN_BUDGET_EXCEEDED  carries required_headroom
    ├── PinLimitExceeded              PIN_LIMIT_EXCEEDED     carries pinned, cap
    ├── RevConflict                   REV_CONFLICT       carries current_rev
    ├── IdempotencyMismatch           IDEMPOTENCY_MISMATCH
    ├── RateLimited                   RATE_LIMITED
    ├── Unauthorized                  UNAUTHORIZED
    ├── OutOfOrder                    CONFLICT           an eviction batch finished before its predecessor
    ├── TaintedContent                TAINTED_CONTENT    instruction-like text into a working block, unjustified
    └── ConfigError                   CONFIG_ERROR       invalid settings, raised at start

Errors raised by the store (store.errors.StoreError) keep their own tree and codes; callers map
both through :func:`error_payload`.
"""

from __future__ import annotations

from typing import Any

from store.errors import ErrorCode, StoreError


class VcmError(Exception):
    code: ErrorCode = ErrorCode.VALIDATION_ERROR

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        return {"code": str(self.code), "message": self.message, **self.details}


class ValidationError(VcmError):
    code = ErrorCode.VALIDATION_ERROR


class NotFound(VcmError):
    code = ErrorCode.NOT_FOUND


class TokenBudgetExceeded(VcmError):
    code = ErrorCode.TOKEN_BUDGET_EXCEEDED


class PinLimitExceeded(VcmError):
    code = ErrorCode.PIN_LIMIT_EXCEEDED


class RevConflict(VcmError):
    code = ErrorCode.REV_CONFLICT


class IdempotencyMismatch(VcmError):
    code = ErrorCode.IDEMPOTENCY_MISMATCH


class RateLimited(VcmError):
    code = ErrorCode.RATE_LIMITED


class Unauthorized(VcmError):
    code = ErrorCode.UNAUTHORIZED


class OutOfOrder(VcmError):
    code = ErrorCode.CONFLICT


class TaintedContent(VcmError):
    """Text that reads like instructions to the model, promoted without a justification."""

    code = ErrorCode.TAINTED_CONTENT


class ConfigError(VcmError):
    code = ErrorCode.CONFIG_ERROR


def error_payload(exc: VcmError | StoreError) -> dict[str, Any]:
    """The JSON body / system-message payload for a coded error."""
    return exc.to_dict()
