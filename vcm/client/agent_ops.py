"""The client's operations on agents: the agent itself, its lifecycle and snapshots, its facts
and state (both clients share them; :class:`~vcm.client.replies.Sender` sends)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vcm.client.replies import Json, R, Sender, clean, idem
from vcm.wire import Call, seg


class AgentOperations(Sender[R]):
    # --- agents ---------------------------------------------------------------------------------
    def create_agent(
        self,
        agent_id: str,
        *,
        model: str | None = None,
        system_prompt: str = "",
        tools: Sequence[Mapping[str, Any]] = (),
        vcm_tools: bool = False,
        user_id: str | None = None,
        domain: str | None = None,
    ) -> R:
        """Admin only. The reply's ``token`` is the agent's bearer token, shown this once;
        ``user_id`` / ``domain``: the (existing) user and domain it belongs to."""
        body: Json = {"agent_id": agent_id, "system_prompt": system_prompt, "tools": [dict(t) for t in tools]}
        if model is not None:
            body["model"] = model
        if vcm_tools:
            body["vcm_tools"] = True
        body.update({k: v for k, v in (("user_id", user_id), ("domain", domain)) if v is not None})
        return self._send(Call("POST", "/v1/agents", json=body))

    def agents(self) -> R:
        return self._send(Call("GET", "/v1/agents"))

    def agent(self, agent_id: str) -> R:
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}"))

    def rotate_token(self, agent_id: str) -> R:
        return self._send(Call("POST", f"/v1/agents/{seg(agent_id)}/token"))

    # --- users and domains: whose shared memory an agent reads (admin, but reading an agent's) ----
    def create_user(self, user_id: str) -> R:
        return self._send(Call("POST", "/v1/users", json={"user_id": user_id}))

    def users(self) -> R:
        return self._send(Call("GET", "/v1/users"))

    def delete_user(self, user_id: str) -> R:
        """The user and all its memory go; its agents stay, belonging to no user."""
        return self._send(Call("DELETE", f"/v1/users/{seg(user_id)}"))

    def create_domain(self, domain: str) -> R:
        return self._send(Call("POST", "/v1/domains", json={"domain": domain}))

    def domains(self) -> R:
        return self._send(Call("GET", "/v1/domains"))

    def delete_domain(self, domain: str) -> R:
        """The domain and all its memory go; its agents stay, in no domain."""
        return self._send(Call("DELETE", f"/v1/domains/{seg(domain)}"))

    def set_agent_principals(self, agent_id: str, *, user_id: str | None, domain: str | None) -> R:
        """Name the agent's user and domain (None: none); both are always sent."""
        body: Json = {"user_id": user_id, "domain": domain}
        return self._send(Call("PUT", f"/v1/agents/{seg(agent_id)}/principals", json=body))

    def agent_principals(self, agent_id: str) -> R:
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/principals"))

    # --- lifecycle and snapshots ----------------------------------------------------------------
    def delete_agent(self, agent_id: str) -> R:
        """Admin or the agent itself: everything of the agent goes (counts in the reply)."""
        return self._send(Call("DELETE", f"/v1/agents/{seg(agent_id)}"))

    def forget_message(self, agent_id: str, message_id: str) -> R:
        """Forget a message wherever it is, and the facts derived from it; the reply's ``receipt``
        is what :meth:`check_forget` re-checks."""
        return self._send(Call("DELETE", f"/v1/agents/{seg(agent_id)}/messages/{seg(message_id)}"))

    def check_forget(self, agent_id: str, receipt: str) -> R:
        """Is anything of a forgotten message left? ``clean``, or ``left`` says where."""
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/forget/{seg(receipt)}"))

    def forget_document(self, agent_id: str, doc_id: str) -> R:
        return self._send(Call("DELETE", f"/v1/agents/{seg(agent_id)}/archival/{seg(doc_id)}"))

    def reset(self, agent_id: str, *, idempotency_key: str | None = None) -> R:
        return self._send(Call("POST", f"/v1/agents/{seg(agent_id)}/reset", headers=idem(idempotency_key)))

    def create_snapshot(
        self,
        agent_id: str,
        *,
        kind: str = "manual",
        reason: str = "",
        ttl_s: int | None = None,
        idempotency_key: str | None = None,
    ) -> R:
        body = clean({"kind": kind, "reason": reason, "ttl_s": ttl_s})
        return self._send(
            Call("POST", f"/v1/agents/{seg(agent_id)}/snapshots", json=body, headers=idem(idempotency_key))
        )

    def snapshots(self, agent_id: str) -> R:
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/snapshots"))

    def restore_snapshot(self, agent_id: str, snapshot_id: str, *, idempotency_key: str | None = None) -> R:
        path = f"/v1/agents/{seg(agent_id)}/snapshots/{seg(snapshot_id)}/restore"
        return self._send(Call("POST", path, headers=idem(idempotency_key)))

    def delete_snapshot(self, agent_id: str, snapshot_id: str) -> R:
        return self._send(Call("DELETE", f"/v1/agents/{seg(agent_id)}/snapshots/{seg(snapshot_id)}"))

    def summary_versions(self, agent_id: str, *, limit: int = 20) -> R:
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/summary/versions", params={"limit": limit}))

    # --- facts and state ------------------------------------------------------------------------
    def remember(
        self,
        agent_id: str,
        value: str,
        *,
        type: str,
        key: str | None = None,
        scope: str = "agent",
        tags: Sequence[str] = (),
        importance: float = 0.5,
        evidence: Sequence[Mapping[str, Any]] = (),
        ttl_s: int | None = None,
        justification: str | None = None,
        idempotency_key: str | None = None,
        source: str | None = None,
    ) -> R:
        """Keep a fact. ``evidence`` must name the agent's messages, tool calls or documents;
        without it, ``source`` says where the fact comes from (recorded; an agent's such fact
        lands shadow)."""
        body = clean(
            {
                "value": value, "type": type, "key": key, "scope": scope, "tags": list(tags), "importance": importance,
                "evidence": [dict(e) for e in evidence], "ttl_s": ttl_s, "justification": justification,
                "source": source,
            }
        )  # fmt: skip
        call = Call("POST", f"/v1/agents/{seg(agent_id)}/facts", json=body, headers=idem(idempotency_key))
        if (replica := self._replica) is not None:
            return self._run(replica.direct(agent_id, call, lambda reply: replica.fact_written(agent_id, reply)))
        return self._send(call)

    def facts(
        self,
        agent_id: str,
        *,
        types: Sequence[str] | None = None,
        key: str | None = None,
        limit: int = 100,
        **filters: Any,
    ) -> R:
        """``filters``: those of ``GET .../facts`` (``status``, ``category``, ``min_importance``,
        ``created_since``, ...); an unknown one is refused by the server."""
        params = clean({"type": list(types) if types else None, "key": key, "limit": limit, **filters})
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/facts", params=params))

    def search_facts(
        self, agent_id: str, query: str, *, types: Sequence[str] | None = None, limit: int = 10, **filters: Any
    ) -> R:
        """``filters`` as for :meth:`facts`; scores are comparable across queries, in [0, 1]."""
        params = clean({"query": query, "type": list(types) if types else None, "limit": limit, **filters})
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/facts/search", params=params))

    def fact(self, agent_id: str, fact_id: str) -> R:
        if self._replica is not None:
            return self._run(self._replica.read(agent_id, "fact", fact_id))
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/facts/{seg(fact_id)}"))

    def injections(
        self, agent_id: str, *, since: float | None = None, limit: int = 100, cursor: str | None = None
    ) -> R:
        """The injection log: ids each built prompt injected (facts, messages, skills, state)."""
        params = clean({"since": since, "limit": limit, "cursor": cursor})
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/injections", params=params))

    def settle_fact(self, agent_id: str, fact_id: str, action: str) -> R:
        """A person's word on a shadow fact (admin token): ``promote`` or ``reject``."""
        call = Call("POST", f"/v1/agents/{seg(agent_id)}/facts/{seg(fact_id)}/settle", json={"action": action})
        return self._send(call)

    def forget_fact(self, agent_id: str, fact_id: str) -> R:
        call = Call("DELETE", f"/v1/agents/{seg(agent_id)}/facts/{seg(fact_id)}")
        if (replica := self._replica) is not None:
            return self._run(replica.direct(agent_id, call, lambda _: replica.forgotten(agent_id, "fact", fact_id)))
        return self._send(call)

    def fact_stats(self, agent_id: str) -> R:
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/facts/stats"))

    def working_set(self, agent_id: str, query: str = "") -> R:
        """Goal, constraints, top facts, entities, relations and agenda, ranked for ``query``."""
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/working-set", params={"query": query}))

    def entity_graph(self, agent_id: str, name: str, *, depth: int = 1) -> R:
        """An entity, the entities related to it within ``depth`` hops, their relations and the
        messages that mention it."""
        return self._send(Call("GET", f"/v1/agents/{seg(agent_id)}/entities/{seg(name)}", params={"depth": depth}))

    def state(self, agent_id: str, key: str | None = None) -> R:
        path = f"/v1/agents/{seg(agent_id)}/state" + (f"/{seg(key)}" if key else "")
        if self._replica is not None:
            if key:
                return self._run(self._replica.read(agent_id, "state", key))
            return self._run(self._replica.listing(agent_id, "state", Call("GET", path)))
        return self._send(Call("GET", path))

    def set_state(self, agent_id: str, key: str, value: Any, *, ttl_s: int | None = None, rev: str | None = None) -> R:
        """Set a key (``rev=""``: only if it does not exist yet). With a cache, the change is
        based on ``rev`` or else on the version this client last saw, and a stale one is a
        conflict (``CacheConfig.conflict``)."""
        if self._replica is not None:
            change = self._replica.change(agent_id, "state", key, value, rev, ttl_s=ttl_s)
            return self._run(self._replica.submit(change))
        body = clean({"value": value, "ttl_s": ttl_s, "_rev": rev}) | {"value": value}
        return self._send(Call("PUT", f"/v1/agents/{seg(agent_id)}/state/{seg(key)}", json=body))

    def delete_state(self, agent_id: str, key: str | None = None, *, rev: str | None = None) -> R:
        """Delete one key (only if still at ``rev``, when given), or every key (``key`` None)."""
        path = f"/v1/agents/{seg(agent_id)}/state" + (f"/{seg(key)}" if key else "")
        if (replica := self._replica) is not None:
            if key:
                return self._run(replica.submit(replica.change(agent_id, "state", key, None, rev)))
            return self._run(
                replica.direct(agent_id, Call("DELETE", path), lambda _: replica.cleared(agent_id, "state"))
            )
        return self._send(Call("DELETE", path, params=clean({"_rev": rev}) or None))
