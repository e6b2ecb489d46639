"""Facts through the façade (structured memory, seed 002).

Every write runs the policy guard (:meth:`~vcm.service.core.Core.guard`) and dedup
(:mod:`vcm.facts.dedup`); each decision — MATCH, NEW, CONFLICT, REFUSED — is an audit event
(codes, ids and sizes, never the value) and a metric. Facts carry evidence pointers (message,
tool-call or document ids), each checked to name something the agent holds (VALIDATION_ERROR
otherwise); shadow facts (extracted, not yet confirmed) become active only through
:meth:`Facts.consolidate`'s replay test, never by being written again.

Who may write what (seed 002): a write without evidence is taken only from an explicit call (the
API, a tool, the command line) with its ``source`` recorded, and lands ``shadow`` unless the
operator made it or it is a ``sticky`` fact; an ``entity`` or ``relation`` written online (by
any entry point but the cold path's workers) lands ``shadow``, since structure changes only
through promotion. Shadow facts stay out of prompts, the Working Set and default search
(``[facts] shadow_in_prompts`` admits them into the first two).

Each stored fact also gets its graph edges here (:meth:`Facts.link`): it ``cites`` the messages
its evidence points at; an ``entity`` fact is ``mentions``-ed by them; a ``relation`` fact (key
``src|relation|dst``) makes sure both ends exist as entity facts and joins them with a
``relates_to`` edge. Entities and relations get their edges once active (written active, or
promoted), never while shadow. Edges are idempotent by (kind, source, target), and a forgotten fact takes
its edges with it (the store's ``delete_facts``). The neighbourhood query is
:mod:`vcm.service.graph`.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from vcm.errors import NotFound, Unauthorized, ValidationError
from vcm.facts import dedup, entities, working_set
from vcm.facts.working_set import WorkingSet
from vcm.obs import metrics
from vcm.service import fact_dedup, fact_evidence, fact_input, fact_review
from vcm.service.core import Core
from vcm.service.fact_input import LIVE, RememberResult
from vcm.service.principals import Principals
from vcm.store import validation as store_validation
from vcm.store.audit_names import Actor, EventKind
from vcm.store.principals import is_holder
from vcm.store.types import Edge, Fact, FactHit, FactQuery, FactScore, fact_node, message_node

# Facts one archive call looks at, at most (the store's page of a fact query).
ARCHIVE_LIMIT = 1000


class Facts:
    """remember, recall_fact, search_facts, rank_facts, list_facts, get_fact, forget_fact,
    archive_facts, fact_stats, working_set, consolidate, settle_fact; and the use and write of a fact that
    the other parts share (:meth:`use`, :meth:`put_fact`)."""

    def __init__(self, core: Core, principals: Principals) -> None:
        self.core = core
        # Whose shared memory an agent reads and where its user/domain facts live.
        self.principals = principals

    def remember(
        self,
        agent_id: str,
        value: str,
        *,
        type: str,
        scope: str = "agent",
        key: str | None = None,
        category: str = "",
        tags: Sequence[str] = (),
        importance: float = 0.5,
        confidence: float = 0.5,
        evidence: Sequence[Mapping[str, Any]] = (),
        status: str = "active",
        ttl_s: int | None = None,
        justification: str | None = None,
        idempotency_key: str | None = None,
        actor: str = Actor.SYSTEM,
        source: str | None = None,
        admitted: bool = False,
    ) -> RememberResult:
        """Upsert a fact: evidence and admission checks, guard, then dedup (MATCH joins its
        evidence to the existing fact and refreshes its lifetime; CONFLICT keeps both values of
        one key, marked; NEW adds it). ``status`` is what the caller asks for; the admission
        rules (module docstring) may make it ``shadow``; ``source``: where a fact without
        evidence comes from (the operator's own word needs none). ``admitted``: a promotion
        writes the ends of the relation it promotes (already admitted: the rules are skipped)."""
        self.core.agent(agent_id)
        cfg = self.core.settings.facts
        value = fact_input.text(value, "value", cfg.max_value_chars)
        if type not in cfg.types:
            raise ValidationError(f"unknown fact type {type!r}; known: {', '.join(sorted(cfg.types))}", field="type")
        if scope not in fact_input.SCOPES:
            raise ValidationError(f"scope must be one of {', '.join(fact_input.SCOPES)}", field="scope")
        if status not in ("active", "shadow"):
            raise ValidationError("a new fact is active or shadow", field="status")
        holder = self.principals.holder(agent_id, scope)  # the agent, or its user or domain
        if type == "entity":  # the key is the name itself, folded: one entity, one fact
            key = entities.canonical(key if key is not None else value)
        elif type == "relation":
            if key is None:
                raise ValidationError("a relation needs its key 'source|relation|target'", field="key")
            key = entities.relation_of(key).key
        if key is not None:
            key = store_validation.identifier("key", key)
        tags = fact_input.tags(tags, self.core.settings.facts.max_tags)
        pointers = fact_input.evidence(evidence)
        said = fact_input.source(source)
        if pointers:
            fact_evidence.check(self.core, agent_id, pointers)
        elif said is None and not fact_input.operator(actor):
            raise ValidationError(
                "a fact needs evidence (message, tool_call or document ids of this agent), or the source "
                "of the explicit call that states it",
                field="evidence",
            )
        if not admitted and (
            (not pointers and not fact_input.operator(actor) and type != "sticky")
            or (type in dedup.IDENTITY_TYPES and fact_input.online(actor))
        ):
            status = "shadow"  # unconfirmed, or structure written online: promotion decides
        if holder != agent_id and not admitted and not fact_input.operator(actor):
            # Seed 002: what one agent heard becomes what every agent of its user or domain
            # believes only through promotion, never by being written.
            status = "shadow"
        if holder != agent_id:  # the pointers name this agent's messages: say whose
            pointers = [{**p, "agent_id": agent_id} for p in pointers]
        imp, conf = fact_input.unit("importance", importance), fact_input.unit("confidence", confidence)
        now = self.core.clock()
        expires_at = fact_input.expiry(self.core.settings.facts.types, type, ttl_s, now)
        lifetime = None if expires_at is None else expires_at - now
        overridden = self.core.guard(agent_id, "remember", f"{key or ''} {value}", justification, actor, type=type)
        provenance = fact_evidence.provenance(self.core.settings, actor, said, pointers, overridden)
        request = {
            "value_sha256": hashlib.sha256(value.encode()).hexdigest(),
            "type": type, "scope": scope, "key": key, "evidence": pointers, "status": status, "holder": holder,
        }  # fmt: skip
        fact_id = "f" + uuid.uuid4().hex[:20]
        replayed = False
        if idempotency_key is not None:
            claimed, replayed = self.core.claim(agent_id, idempotency_key, "remember", request, {"fact_id": fact_id})
            fact_id = str(claimed["fact_id"])
            if replayed:
                try:
                    return RememberResult("REPLAYED", self.core.store.get_fact(holder, fact_id), replayed=True)
                except NotFound:
                    pass  # the first attempt died before writing: write it now
        # An entity's value is its name: the key dedups it and text search finds it, so the
        # model call an embedding costs buys nothing there.
        embedding = None if type == "entity" else self.core.embedding(value)
        outcome = fact_dedup.outcome(self.core, holder, value, key, embedding, scope=scope, type=type)
        if outcome.decision == "MATCH" and outcome.target is not None:
            target = outcome.target
            joined = replace(
                target,
                evidence=fact_input.merge_evidence(target.evidence, pointers),
                tags=tuple(dict.fromkeys([*target.tags, *tags])),
                importance=max(target.importance, imp),
                confidence=max(target.confidence, conf),
                updated_at=now,
                expires_at=expires_at,  # reconfirmed: its lifetime starts again
                lifetime_s=lifetime,
            )
            stored = self.put_fact(joined, target.version)
            self.record_decision(
                agent_id, "MATCH", stored, actor, similarity=round(outcome.similarity, 3), **provenance
            )
            self.link(stored, pointers, actor)
            return RememberResult("MATCH", stored, replayed=replayed)
        fact = Fact(
            agent_id=holder, fact_id=fact_id, scope=scope, type=type, value=value, key=key, category=category,
            tags=tuple(tags), importance=imp, confidence=conf, evidence=tuple(pointers), status=status,
            conflict_with=tuple(f.fact_id for f in outcome.conflicting), created_at=now, updated_at=now,
            expires_at=expires_at, lifetime_s=lifetime, embedding=embedding,
        )  # fmt: skip
        unsure = outcome.decision == "UNSURE" and outcome.target is not None
        if unsure and outcome.target is not None:  # staged for review beside the fact it may repeat
            fact = replace(fact, status="shadow", duplicate_of=outcome.target.fact_id)
            provenance["similarity"] = round(outcome.similarity, 3)
            provenance["duplicate_of"] = outcome.target.fact_id
        stored = self.put_fact(fact, None)
        self.link(stored, pointers, actor)
        marked: list[Fact] = []
        for other in outcome.conflicting:
            marked.append(
                self.put_fact(
                    replace(other, conflict_with=tuple(dict.fromkeys([*other.conflict_with, fact_id]))), other.version
                )
            )
        self.record_decision(
            agent_id, outcome.decision, stored, actor, conflicts=[f.fact_id for f in marked], **provenance
        )
        if marked and type != "question" and "question" in cfg.types:
            self._open_question(agent_id, stored, marked, now)
        return RememberResult(outcome.decision, stored, tuple(marked), replayed=replayed)

    def recall_fact(self, agent_id: str, key: str, *, scope: str | None = None, type: str | None = None) -> list[Fact]:
        """The live facts of a key (more than one: a conflict); their use is recorded."""
        self.core.agent(agent_id)
        store_validation.identifier("key", key)
        found = self.core.store.query_facts(
            agent_id, self.scoped(agent_id, FactQuery(scope=scope, types=[type] if type else None, key=key))
        )
        self.use(agent_id, found)
        return found

    def search_facts(self, agent_id: str, query: str, *, filters: FactQuery | None = None) -> list[FactHit]:
        hits = self.rank_facts(agent_id, query, filters=filters)
        self.use(agent_id, [h.fact for h in hits])
        return hits

    def rank_facts(self, agent_id: str, query: str, *, filters: FactQuery | None = None) -> list[FactHit]:
        """``search_facts`` without recording a use: for callers that show only some of the hits
        and record those (the prompt builder)."""
        vector = self._query_vector(agent_id, query)
        return self.core.store.search_facts(
            agent_id, query, vector, self.scoped(agent_id, filters or FactQuery(limit=10))
        )

    def fact_scores(self, agent_id: str, query: str, *, filters: FactQuery) -> list[FactScore]:
        """``rank_facts``' ranking without reading the facts (the prompt builder reads the scores
        of ~100 hits and shows ~10); :meth:`fact_hits` reads the ones wanted whole."""
        vector = self._query_vector(agent_id, query)
        return self.core.store.search_fact_scores(agent_id, query, vector, self.scoped(agent_id, filters))

    def _query_vector(self, agent_id: str, query: str) -> list[float] | None:
        """A fact search's checks (the agent, the query) and its query's vector (None if blank)."""
        self.core.agent(agent_id)
        if not isinstance(query, str) or len(query) > 4000:
            raise ValidationError("query must be a string of at most 4000 characters", field="query")
        return self.core.embedding(query) if query.strip() else None

    def fact_hits(self, agent_id: str, ranked: Sequence[FactScore], *, filters: FactQuery) -> list[FactHit]:
        """The whole facts of ``ranked`` (from :meth:`fact_scores` with the same ``filters``)."""
        return self.core.store.read_fact_hits(agent_id, ranked, self.scoped(agent_id, filters))

    def list_facts(self, agent_id: str, filters: FactQuery | None = None) -> list[Fact]:
        """The facts matching ``filters``; with no filters, or no statuses named (None or
        empty), the live ones (:data:`LIVE`); a FactQuery left at its default: the active ones."""
        self.core.agent(agent_id)
        query = filters or FactQuery(statuses=LIVE)
        if not query.statuses:
            query = replace(query, statuses=LIVE)
        return self.core.store.query_facts(agent_id, self.scoped(agent_id, query))

    def get_fact(self, agent_id: str, fact_id: str) -> Fact:
        """The agent's own fact, or one of its user's or domain's; any other answers NOT_FOUND
        exactly as a missing one does."""
        self.core.agent(agent_id)
        return self.find(agent_id, fact_id)

    def find(self, agent_id: str, fact_id: str) -> Fact:
        try:
            return self.core.store.get_fact(agent_id, fact_id)
        except NotFound as missing:
            for holder in self.principals.holders(agent_id).values():
                try:
                    return self.core.store.get_fact(holder, fact_id)
                except NotFound:
                    continue
            raise missing from None  # the agent's own answer: nothing says where else it looked

    def scoped(self, agent_id: str, query: FactQuery) -> FactQuery:
        """A read of the agent's facts made to include its user's and domain's (its record's now;
        whatever a caller put in ``holders`` is replaced)."""
        return replace(query, holders=tuple(self.principals.holders(agent_id).values()))

    def forget_fact(self, agent_id: str, fact_id: str, *, actor: str = Actor.SYSTEM) -> bool:
        """Delete one of the agent's facts; a user's or domain's fact only by the operator (what
        every agent of it believes is not one agent's to drop)."""
        self.core.agent(agent_id)
        store_validation.identifier("fact_id", fact_id)
        holder = agent_id
        try:
            found = self.find(agent_id, fact_id)
        except NotFound:
            found = None
        if found is not None and found.agent_id != agent_id:
            if not fact_input.operator(actor):
                raise Unauthorized(f"fact {fact_id!r} is {found.scope} memory: only the operator forgets it")
            holder = found.agent_id
        removed = self.core.store.delete_facts(holder, [fact_id]) > 0
        if removed:
            if holder == agent_id:
                self.core.changed(agent_id, "fact", fact_id, None, "delete")
            self.core.audit(agent_id, EventKind.FACT_FORGOTTEN, {"fact_id": fact_id, "holder": holder}, actor)
        return removed

    def archive_facts(
        self,
        agent_id: str,
        *,
        types: Sequence[str] | None = None,
        tags: Sequence[str] | None = None,
        category: str | None = None,
        until: float | None = None,
        max_importance: float | None = None,
        actor: str = Actor.SYSTEM,
    ) -> int:
        """Move the live facts that match to ``archived``: kept, no longer recalled or searched.
        Every filter given must match (``tags``: all of them; ``until``: last updated before;
        ``max_importance``: at most this important); one call looks at :data:`ARCHIVE_LIMIT`
        facts at most."""
        self.core.agent(agent_id)
        query = FactQuery(types=types, tags=tags, category=category, until=until, limit=ARCHIVE_LIMIT)
        done = 0
        for f in self.core.store.query_facts(agent_id, query):
            if max_importance is not None and f.importance > max_importance:
                continue
            if f.status != "archived":
                self.put_fact(replace(f, status="archived", updated_at=self.core.clock()), f.version)
                done += 1
        self.core.audit(agent_id, EventKind.FACTS_ARCHIVED, {"count": done}, actor)
        return done

    def fact_stats(self, agent_id: str) -> dict[str, Any]:
        self.core.agent(agent_id)
        counts = self.core.store.fact_counts(agent_id)
        return {
            "facts": sum(counts["status"].values()),
            "by_type": counts["type"],
            "by_status": counts["status"],
            "by_scope": counts["scope"],
            "conflicts": counts["conflicts"].get("live", 0),
        }

    def working_set(
        self,
        agent_id: str,
        query: str = "",
        *,
        caps: Mapping[str, int] | None = None,
        hits: Sequence[FactHit | FactScore] | None = None,
        record_use: bool = True,
    ) -> WorkingSet:
        """The agent's Working Set (seed 002): a bounded state snapshot of its live facts, ranked
        by utility for ``query`` (relevance from the hybrid fact search, or from ``hits`` of one
        already made for it, whole or scores only); the items returned count as used unless
        ``record_use`` is off (the caller records what it shows)."""
        self.core.agent(agent_id)
        types = working_set.types_needed(caps)
        statuses = self.prompt_statuses()
        query_ = FactQuery(types=types, statuses=statuses, limit=1000)
        facts = self.core.store.query_facts(agent_id, self.scoped(agent_id, query_)) if types != [] else []
        relevance: dict[str, float] = {}
        if hits is None and query.strip():
            filters = FactQuery(statuses=statuses, limit=working_set.RELEVANCE_HITS)
            hits = self.search_facts(agent_id, query, filters=filters)
        relevance = {h.fact.fact_id if isinstance(h, FactHit) else h.fact_id: h.score for h in hits or ()}
        ws = working_set.build(facts, relevance, self.core.clock(), caps, statuses=statuses)
        if record_use:
            self.use(agent_id, [i.fact for items in ws.sections.values() for i in items])
        return ws

    def prompt_statuses(self) -> tuple[str, ...]:
        """The statuses of the facts a prompt and the Working Set may show: ``active``, and
        ``shadow`` too when ``[facts] shadow_in_prompts`` admits them (off by default)."""
        return LIVE if self.core.settings.facts.shadow_in_prompts else ("active",)

    def consolidate(self, agent_id: str, *, actor: str = "worker:consolidate") -> dict[str, int]:
        """Settle shadow facts by the replay test (:func:`vcm.service.fact_review.consolidate`)."""
        return fact_review.consolidate(self, agent_id, actor)

    def settle_fact(self, agent_id: str, fact_id: str, action: str, *, actor: str = Actor.SYSTEM) -> Fact | None:
        """A person's word on a shadow fact (:func:`vcm.service.fact_review.settle`)."""
        return fact_review.settle(self, agent_id, fact_id, action, actor)

    def promote(self, fact: Fact, actor: str, **extra: Any) -> Fact:
        """A shadow fact made active; an entity or relation gets its graph edges now."""
        stored = self.put_fact(replace(fact, status="active", updated_at=self.core.clock()), fact.version)
        self.record_decision(fact.agent_id, "PROMOTED", stored, actor, **extra)
        if stored.type in dedup.IDENTITY_TYPES:
            self.link(stored, stored.evidence, actor)
        return stored

    def _open_question(self, agent_id: str, fact: Fact, others: Sequence[Fact], now: float) -> None:
        """A conflict goes on the agenda as an open question, with both sides as evidence (the
        seed's rule); written directly, as the question quotes values the guard already passed."""
        values = " or ".join(dict.fromkeys(f'"{f.value[:80]}"' for f in [fact, *others]))
        ttl = self.core.settings.facts.types["question"]
        question = Fact(
            agent_id=fact.agent_id, fact_id="f" + uuid.uuid4().hex[:20], scope=fact.scope, type="question",
            key=f"conflict:{fact.key}", value=f"Which holds for {fact.key}: {values}?", tags=("conflict",),
            importance=max(f.importance for f in [fact, *others]), confidence=1.0,
            evidence=tuple({"kind": "message", "id": str(e["id"])} for f in [fact, *others] for e in f.evidence
                           if e.get("kind") == "message")[:fact_input.MAX_EVIDENCE],
            created_at=now, updated_at=now, expires_at=now + ttl if ttl else None, lifetime_s=ttl or None,
        )  # fmt: skip
        existing = self.core.store.query_facts(
            fact.agent_id, FactQuery(types=["question"], key=question.key, statuses=LIVE)
        )
        if existing:
            self.put_fact(replace(existing[0], value=question.value, updated_at=now), existing[0].version)
        else:
            self.put_fact(question, None)

    def drop(self, fact: Fact, actor: str) -> None:
        """Delete a fact where it lives (merged away, its own or shared)."""
        if self.core.store.delete_facts(fact.agent_id, [fact.fact_id]) and not is_holder(fact.agent_id):
            self.core.changed(fact.agent_id, "fact", fact.fact_id, None, "delete")
        self.core.audit(fact.agent_id, EventKind.FACT_FORGOTTEN, {"fact_id": fact.fact_id}, actor)

    def put_fact(self, fact: Fact, expected_version: int | None) -> Fact:
        """Every fact write: the store's, then its change on the agent's feed."""
        stored = self.core.store.put_fact(fact, expected_version)
        if not is_holder(stored.agent_id):  # shared facts have no agent's feed (docs/memory-model.md)
            self.core.changed(stored.agent_id, "fact", stored.fact_id, stored.version)
        return stored

    def use(self, agent_id: str, used: Sequence[Fact]) -> None:
        """Record a use of these facts: each with a lifetime lives it again from now (seed 002:
        a TTL is refreshed by reconfirmation or use, and by nothing else)."""
        by_holder: dict[str, list[str]] = {}
        for f in used:  # the agent's own, and its user's and domain's: each where it lives
            by_holder.setdefault(f.agent_id, []).append(f.fact_id)
        for holder, ids in by_holder.items():
            self.core.store.touch_facts(holder, list(dict.fromkeys(ids)), self.core.clock())

    def record_decision(self, agent_id: str, decision: str, fact: Fact, actor: str, **extra: Any) -> None:
        metrics.fact_decision(decision)
        payload = {"decision": decision, "fact_id": fact.fact_id, "type": fact.type, "scope": fact.scope,
                   "key": fact.key, "status": fact.status, "chars": len(fact.value), **extra}  # fmt: skip
        self.core.audit(agent_id, EventKind.FACT_DECISION, payload, actor)

    # --- graph edges ------------------------------------------------------------------------------

    def link(self, fact: Fact, pointers: Sequence[Mapping[str, Any]], actor: str) -> None:
        """Edges for a fact just written with these new evidence ``pointers``."""
        if fact.type in dedup.IDENTITY_TYPES and fact.status != "active":
            return  # structure waits for promotion (:meth:`promote` links it then)
        if is_holder(fact.agent_id):
            return  # the entity graph is an agent's: shared facts keep their pointers, no edges
        now = self.core.clock()
        node = fact_node(fact.agent_id, fact.fact_id)
        for e in pointers:
            if e.get("kind") != "message":
                continue
            msg = message_node(fact.agent_id, str(e["id"]))
            self.core.store.add_edge(Edge("cites", node, msg, fact.agent_id, now))
            if fact.type == "entity":
                self.core.store.add_edge(Edge("mentions", msg, node, fact.agent_id, now))
        if fact.type == "relation" and fact.key is not None:
            rel = entities.relation_of(fact.key)
            src, dst = (self._entity(fact, name, pointers, actor) for name in (rel.src, rel.dst))
            self.core.store.add_edge(
                Edge(
                    "relates_to",
                    fact_node(fact.agent_id, src.fact_id),
                    fact_node(fact.agent_id, dst.fact_id),
                    fact.agent_id,
                    now,
                    {"relation": rel.relation, "fact_id": fact.fact_id},
                )
            )

    def _entity(self, relation: Fact, name: str, pointers: Sequence[Mapping[str, Any]], actor: str) -> Fact:
        """The entity fact at one end of a relation, written (or matched) with its evidence."""
        result = self.remember(
            relation.agent_id,
            name.title(),
            type="entity",
            scope=relation.scope,
            key=name,
            evidence=[dict(p) for p in pointers],
            status=relation.status,
            importance=relation.importance,
            confidence=relation.confidence,
            actor=actor,
            admitted=True,
        )
        fact: Fact = result.fact
        return fact
