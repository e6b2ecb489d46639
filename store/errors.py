"""Error codes shared by every vcm layer, and the store's exception tree.

Every error that reaches a caller carries one stable ``code`` from :class:`ErrorCode`
and a message a person can act on. The store raises only these::

    StoreError                      (base; never raised itself)
    ├── StoreValidationError        VALIDATION_ERROR   bad argument, nothing written
    ├── NotFoundError               NOT_FOUND
    ├── RevConflictError            REV_CONFLICT       optimistic lock lost (carries current rev)
    ├── IdempotencyMismatchError    IDEMPOTENCY_MISMATCH  same key, different content
    └── StoreUnavailableError       STORE_UNAVAILABLE  backend down / transaction aborted
        └── InjectedFailure         STORE_UNAVAILABLE  raised by test fault hooks only
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


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


class StoreError(Exception):
    code: ErrorCode = ErrorCode.STORE_UNAVAILABLE

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        return {"code": str(self.code), "message": self.message, **self.details}


class StoreValidationError(StoreError):
    code = ErrorCode.VALIDATION_ERROR


class NotFoundError(StoreError):
    code = ErrorCode.NOT_FOUND


class RevConflictError(StoreError):
    code = ErrorCode.REV_CONFLICT


class IdempotencyMismatchError(StoreError):
    code = ErrorCode.IDEMPOTENCY_MISMATCH


class StoreUnavailableError(StoreError):
    code = ErrorCode.STORE_UNAVAILABLE


class InjectedFailure(StoreUnavailableError):
    """Raised by a fault hook in tests; behaves like a backend failure mid-operation."""
