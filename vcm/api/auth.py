"""Bearer tokens of the HTTP API: one admin token, one token per agent.

* The **admin token** comes only from settings (``[api] admin_token``, i.e. the secret
  ``VCM_API__ADMIN_TOKEN``). Empty means "generate one at start": :func:`with_admin_token` makes
  one and hands it to the caller (``vcm serve`` prints it once, to stderr); :func:`admin_digest`
  refuses to go on without one, so no app ever runs unauthenticated.
* An **agent token** (its format, and the rules of issuing one, are the service's:
  :mod:`vcm.service.tokens`) is checked against the SHA-256 Redis keeps under the agent's hash
  tag; the agent id inside the token says which single hash to compare against, so verification
  is one GET, and the comparison is constant time. SHA-256 without a salt or a slow KDF is enough
  because the secret is random and long, not a password.

A token authorises its own agent only. :meth:`Principal.authorize` answers a request for any other
agent with the same ``NOT_FOUND`` an admin gets for an agent that does not exist, so a token never
reveals whether another agent exists. Secrets never appear in messages, reprs or logs.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import SecretStr

from vcm.errors import ConfigError, NotFound, Unauthorized
from vcm.hotpath.credentials import AgentTokens
from vcm.obs import audit
from vcm.service.tokens import agent_of, digest
from vcm.settings import Settings

_SECRET_BYTES = 32
# A digest no token hashes to, compared against when the agent has no token, so that unknown and
# known agents take the same path through the comparison.
_NO_DIGEST = "0" * 64
MAX_TOKEN_CHARS = 512


def new_admin_token() -> str:
    return "vcm_admin_" + secrets.token_urlsafe(_SECRET_BYTES)


def with_admin_token(settings: Settings) -> tuple[Settings, str | None]:
    """Settings that carry an admin token, and the token when it was generated just now.

    The caller shows a generated token to the operator once (``vcm serve`` prints it to stderr);
    it is never logged.
    """
    if settings.api.admin_token.get_secret_value():
        return settings, None
    token = new_admin_token()
    api = settings.api.model_copy(update={"admin_token": SecretStr(token)})
    return settings.model_copy(update={"api": api}), token


def admin_digest(settings: Settings) -> str:
    secret = settings.api.admin_token.get_secret_value()
    if not secret:
        raise ConfigError(
            "api.admin_token is empty: set VCM_API__ADMIN_TOKEN, or start with `vcm serve`, which "
            "generates one and prints it once",
            setting="api.admin_token",
        )
    return digest(secret)


def not_found(agent_id: str) -> NotFound:
    # Same text as vcm.hotpath.state.HotState.agent, so "not yours" and "does not exist" read alike.
    return NotFound(f"unknown agent {agent_id!r}; create it first", agent_id=agent_id)


@dataclass(frozen=True)
class Principal:
    """Who a request comes from: the admin, or exactly one agent."""

    agent_id: str | None
    admin: bool = False

    @property
    def actor(self) -> str:
        """The ``actor`` recorded on the audit events this caller's writes produce."""
        return audit.API_ADMIN if self.admin else audit.api_agent(self.agent_id or "?")

    def authorize(self, agent_id: str) -> None:
        if self.admin or self.agent_id == agent_id:
            return
        raise not_found(agent_id)

    def require_admin(self) -> None:
        if not self.admin:
            raise Unauthorized("this operation needs the admin token")


@dataclass(frozen=True)
class Caller:
    """Who calls a route that leaves the token check to its own Redis call (the append and the
    context read, where a separate lookup would double the round trips): the principal, and the
    digest of the presented agent token that call must find stored (None: the admin, or a token
    already verified)."""

    principal: Principal
    token_sha256: str | None


class TokenAuthority:
    """Turns an ``Authorization`` header into a :class:`Principal`: the admin's token from
    settings, or an agent's, compared with the digest the hot state keeps
    (:class:`vcm.hotpath.credentials.AgentTokens`, ``service.hot.tokens``). Issuing tokens is the
    service's (:mod:`vcm.service.tokens`)."""

    def __init__(
        self,
        tokens: AgentTokens,
        admin_sha256: str,
        *,
        rebuild: Callable[[str], bool] | None = None,
    ) -> None:
        self.tokens = tokens
        self.admin_sha256 = admin_sha256
        # Rebuilds an agent's lost hot state from the store (vcm.durable); True when it did.
        self.rebuild = rebuild

    def __repr__(self) -> str:  # never the admin digest
        return f"TokenAuthority(tokens={self.tokens!r})"

    def claim(self, authorization: str | None, agent_id: str) -> Caller | None:
        """The caller of a route of ``agent_id`` whose own Redis call checks the token, read with
        no I/O: the admin (nothing left to check), or the agent the token names with the token's
        digest for that call to compare (:meth:`vcm.hotpath.state.HotState.append`). None when the
        token names another agent or none: :meth:`principal` then decides between 401 and 404.
        A malformed header is UNAUTHORIZED here, as there."""
        token = _bearer(authorization)
        presented = digest(token)
        if hmac.compare_digest(presented, self.admin_sha256):
            return Caller(Principal(None, admin=True), None)
        if agent_of(token) == agent_id:
            return Caller(Principal(agent_id), presented)
        return None

    def principal(self, authorization: str | None) -> Principal:
        token = _bearer(authorization)
        presented = digest(token)
        if hmac.compare_digest(presented, self.admin_sha256):
            return Principal(None, admin=True)
        agent_id = agent_of(token)
        if agent_id is None:
            raise Unauthorized("invalid bearer token")
        stored = self.tokens.get(agent_id)
        if stored is None and self.rebuild is not None:
            # The hot state was lost (restart, flushed Redis) and has just been rebuilt from the
            # store, which keeps the token's hash: by this call, or by a concurrent one that got
            # there first (then this one rebuilt nothing, and the token is back all the same).
            self.rebuild(agent_id)
            stored = self.tokens.get(agent_id)
        expected = stored if isinstance(stored, str) and len(stored) == len(_NO_DIGEST) else _NO_DIGEST
        if not hmac.compare_digest(presented, expected):
            raise Unauthorized("invalid bearer token")
        return Principal(agent_id)


def _bearer(authorization: str | None) -> str:
    if not authorization:
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_CHARS:
        raise Unauthorized("malformed Authorization header: expected 'Bearer <token>'")
    return token
