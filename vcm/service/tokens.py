"""Agent bearer tokens through the façade: the token format, and the rules of issuing one.

Issuing is the service's job, not an entry point's: the API's ``POST /v1/agents`` and ``vcm
agents create`` both hand out the token ``vcm serve`` accepts, and its digest must reach the store
(a rebuild restores it) whoever issued it. Checking a presented token (the admin's from settings,
the ``Authorization`` header, who may call what) stays with the entry points that receive one
(:class:`vcm.api.auth.TokenAuthority`, which the MCP server reuses); both sides share the format
below.

* An **agent token** is ``vcm_<base64url(agent id)>.<43 random characters>`` (256 bits). It is
  shown once, when issued, and Redis keeps only its SHA-256 under the agent's hash tag
  (``vcm:{<agent>}:token``, :class:`vcm.hotpath.credentials.AgentTokens`). The agent id inside
  the token says which single hash to compare against, so verification is one GET.
* A **keyed rotation** derives its token from a random nonce and the deployment key (the cursor
  secret), and records the nonce and the digest it replaces under the idempotency key: a retry
  answers with the same token without vcm ever storing a token, and installs it only while the
  digest it replaced is still current, so a late retry cannot undo a later rotation.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from vcm import validation
from vcm.errors import Conflict
from vcm.service.agents import Agents
from vcm.service.core import Core
from vcm.store.audit_names import Actor
from vcm.types import AgentInfo

AGENT_TOKEN_PREFIX = "vcm_"
_SECRET_BYTES = 32


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


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


def agent_token(agent_id: str, secret_part: str | None = None) -> str:
    """A token naming ``agent_id``, with a fresh random secret unless one is given."""
    encoded = base64.urlsafe_b64encode(agent_id.encode("utf-8")).decode("ascii").rstrip("=")
    return f"{AGENT_TOKEN_PREFIX}{encoded}.{secret_part or secrets.token_urlsafe(_SECRET_BYTES)}"


def derived_token(agent_id: str, nonce: str, key: bytes) -> str:
    """The agent token a keyed rotation issues: recomputable from its (random) nonce and the
    deployment key, so a retried request can answer with the same token without vcm ever storing
    a token."""
    mac = hmac.new(key, f"vcm-token\x00{agent_id}\x00{nonce}".encode(), hashlib.sha256).digest()
    return agent_token(agent_id, base64.urlsafe_b64encode(mac).decode("ascii").rstrip("="))


class Tokens:
    """create_agent_with_token, issue_token, rotate_token."""

    def __init__(self, core: Core, registry: Agents) -> None:
        self.core = core
        self.registry = registry  # creating an agent with its token creates the agent first

    def create_agent_with_token(
        self,
        agent_id: str,
        *,
        model: str | None = None,
        system_prompt: str = "",
        tools: Sequence[Mapping[str, Any]] = (),
        actor: str = Actor.SYSTEM,
    ) -> tuple[AgentInfo, str]:
        """Create an agent and issue its token. The token is shown this once (vcm keeps a hash),
        so the call cannot be replayed: an agent that has a token already is a CONFLICT."""
        validation.agent_id(agent_id)
        if self.core.hot.tokens.exists(agent_id):
            raise _exists(agent_id)
        info = self.registry.create_agent(agent_id, model=model, system_prompt=system_prompt, tools=tools, actor=actor)
        token = self.issue_token(agent_id, replace=False)
        if token is None:  # a concurrent creation won the SET NX
            raise _exists(agent_id)
        return info, token

    def issue_token(self, agent_id: str, *, replace: bool) -> str | None:
        """A new token for the agent; None when it has one and ``replace`` is false.

        Without ``replace`` the write is SET NX, so two racing creations cannot both get a token.
        """
        token = agent_token(agent_id)
        if not self.core.hot.tokens.put(agent_id, digest(token), only_if_absent=not replace):
            return None
        self.core.durable.token_changed(agent_id, digest(token))
        return token

    def rotate_token(self, agent_id: str, *, idempotency_key: str | None = None) -> str:
        """A new token for the agent; the previous one stops working at once. Under an
        idempotency key a retry answers with the same new token instead of revoking it, and
        changes nothing once a later rotation has replaced it."""
        self.core.agent(agent_id)
        if idempotency_key is None:
            token = self.issue_token(agent_id, replace=True)
            assert token is not None  # replace=True always writes
            return token
        first = {"nonce": secrets.token_urlsafe(24), "before": self.core.hot.tokens.get(agent_id) or ""}
        claimed, _ = self.core.claim(agent_id, idempotency_key, "rotate_token", {}, first)
        token = derived_token(agent_id, str(claimed["nonce"]), self.core.cursor_secret())
        if self.core.hot.tokens.get(agent_id) != digest(token):
            # Installed only while the token this rotation replaced is still current; otherwise
            # the retry answers as the first call did and changes nothing.
            self._install(agent_id, token, if_digest=str(claimed["before"]) or None)
        return token

    def _install(self, agent_id: str, token: str, *, if_digest: str | None) -> bool:
        """Make ``token`` the agent's token; with ``if_digest``, only if that is still the current
        token's digest (one compare-and-set)."""
        if if_digest is None:
            installed = self.core.hot.tokens.put(agent_id, digest(token))
        else:
            installed = self.core.hot.tokens.replace_if(agent_id, if_digest, digest(token))
        if installed:
            self.core.durable.token_changed(agent_id, digest(token))
        return installed


def _exists(agent_id: str) -> Conflict:
    # The API is where agents get their tokens, so the way out it names is the API's rotation.
    return Conflict(
        f"agent {agent_id!r} already exists and has a token; issue a new one with POST /v1/agents/{agent_id}/token",
        agent_id=agent_id,
    )
