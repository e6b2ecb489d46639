"""Bearer tokens of the HTTP API: one admin token, one token per agent.

* The **admin token** comes only from settings (``[api] admin_token``, i.e. the secret
  ``VCM_API__ADMIN_TOKEN``). Empty means "generate one at start": :func:`with_admin_token` makes
  one and hands it to the caller (``vcm serve`` prints it once, to stderr); :func:`admin_digest`
  refuses to go on without one, so no app ever runs unauthenticated.
* An **agent token** is ``vcm_<base64url(agent id)>.<43 random characters>`` (256 bits). It is
  shown once, when issued, and Redis keeps only its SHA-256 under the agent's hash tag
  (``vcm:{<agent>}:token``). The agent id inside the token says which single hash to compare
  against, so verification is one GET; the comparison is constant time. SHA-256 without a salt
  or a slow KDF is enough because the secret is random and long, not a password.

A token authorises its own agent only. :meth:`Principal.authorize` answers a request for any other
agent with the same ``NOT_FOUND`` an admin gets for an agent that does not exist, so a token never
reveals whether another agent exists. Secrets never appear in messages, reprs or logs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

import redis
from pydantic import SecretStr

from vcm import validation
from vcm.errors import ConfigError, NotFound, Unauthorized
from vcm.hotpath.credentials import AgentTokens
from vcm.obs import audit
from vcm.settings import Settings

AGENT_TOKEN_PREFIX = "vcm_"
_SECRET_BYTES = 32
# A digest no token hashes to, compared against when the agent has no token, so that unknown and
# known agents take the same path through the comparison.
_NO_DIGEST = "0" * 64
MAX_TOKEN_CHARS = 512


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


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


def agent_of(token: str) -> str | None:
    """The agent id an agent token names, or None when it is not shaped like one."""
    if not token.startswith(AGENT_TOKEN_PREFIX) or token.count(".") != 1:
        return None
    encoded = token[len(AGENT_TOKEN_PREFIX) :].split(".", 1)[0]
    try:
        raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        agent_id = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    return agent_id if validation.AGENT_ID.match(agent_id) else None


def _agent_token(agent_id: str, secret_part: str | None = None) -> str:
    encoded = base64.urlsafe_b64encode(agent_id.encode("utf-8")).decode("ascii").rstrip("=")
    return f"{AGENT_TOKEN_PREFIX}{encoded}.{secret_part or secrets.token_urlsafe(_SECRET_BYTES)}"


def derived_token(agent_id: str, nonce: str, key: bytes) -> str:
    """The agent token a keyed rotation issues: recomputable from its (random) nonce and the
    deployment key, so a retried request can answer with the same token without vcm ever storing
    a token."""
    mac = hmac.new(key, f"vcm-token\x00{agent_id}\x00{nonce}".encode(), hashlib.sha256).digest()
    return _agent_token(agent_id, base64.urlsafe_b64encode(mac).decode("ascii").rstrip("="))


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
    """Issues agent tokens and turns an ``Authorization`` header into a :class:`Principal`.

    The digests live in the hot state (:class:`vcm.hotpath.credentials.AgentTokens`,
    ``service.hot.tokens``); a Redis client is accepted too and wrapped, for callers that hold one
    (a cluster test, the app until its routes pass the hot state's)."""

    def __init__(
        self,
        tokens: AgentTokens | redis.Redis,
        admin_sha256: str,
        *,
        rebuild: Callable[[str], bool] | None = None,
        on_change: Callable[[str, str], None] | None = None,
    ) -> None:
        self.tokens = tokens if isinstance(tokens, AgentTokens) else AgentTokens(tokens)
        self.admin_sha256 = admin_sha256
        # Rebuilds an agent's lost hot state from the store (vcm.durable); True when it did.
        self.rebuild = rebuild
        # Told of every token change, so the store keeps the hash a rebuild restores.
        self.on_change = on_change

    def __repr__(self) -> str:  # never the admin digest
        return f"TokenAuthority(tokens={self.tokens!r})"

    def issue(self, agent_id: str, *, replace: bool) -> str | None:
        """A new token for the agent; None when it has one and ``replace`` is false.

        Without ``replace`` the write is SET NX, so two racing creations cannot both get a token.
        """
        token = _agent_token(agent_id)
        stored = self.tokens.put(agent_id, digest(token), only_if_absent=not replace)
        if stored and self.on_change is not None:
            self.on_change(agent_id, digest(token))
        return token if stored else None

    def current_digest(self, agent_id: str) -> str | None:
        return self.tokens.get(agent_id)

    def install(self, agent_id: str, token: str, *, if_digest: str | None = None) -> bool:
        """Make ``token`` the agent's token; with ``if_digest``, only if that is still the current
        token's digest (a retried rotation must not undo a later one)."""
        if if_digest is None:
            installed = self.tokens.put(agent_id, digest(token))
        else:
            installed = self.tokens.replace_if(agent_id, if_digest, digest(token))
        if installed and self.on_change is not None:
            self.on_change(agent_id, digest(token))
        return installed

    def has_token(self, agent_id: str) -> bool:
        return self.tokens.exists(agent_id)

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
        if stored is None and self.rebuild is not None and self.rebuild(agent_id):
            # The hot state was lost (restart, flushed Redis) and has just been rebuilt from the
            # store, which keeps the token's hash.
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
