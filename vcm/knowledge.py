"""Facts and state through the façade (part of :class:`~vcm.service.MemoryService`).

Every write runs the policy guard (:mod:`vcm.facts.guard`) and, for facts, dedup
(:mod:`vcm.facts.dedup`); each decision — MATCH, NEW, CONFLICT, REFUSED — is an audit event
(codes, ids and sizes, never the value) and a metric. Facts carry evidence pointers (message,
tool-call or document ids); shadow facts (extracted, not yet confirmed) become active only
through :meth:`KnowledgeOps.consolidate`'s replay test, never by being written again.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vcm import poisoning
from vcm.errors import NotFound, PolicyRefused, ValidationError
from vcm.facts import dedup, entities, guard, working_set
from vcm.facts.capture import Captured
from vcm.facts.working_set import WorkingSet
from vcm.hotpath.state import HotState
from vcm.obs import metrics
from vcm.settings import Settings
from vcm.store import validation as store_validation
from vcm.store.port import MemoryStore
from vcm.store.types import Fact, FactHit, FactQuery, StateEntry

SCOPES = ("agent", "user", "domain")
STATUSES = ("shadow", "active", "expired", "archived")
EVIDENCE_KINDS = ("message", "tool_call", "document")
MAX_EVIDENCE = 64


@dataclass(frozen=True)
class RememberResult:
    decision: str  # MATCH | NEW | CONFLICT
    fact: Fact
    conflicts: tuple[Fact, ...] = ()
    replayed: bool = False


def _unit(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise ValidationError(f"{name} must be a number between 0 and 1", field=name)
    return float(value)


def _evidence(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(items, str | bytes) or not isinstance(items, Sequence) or len(items) > MAX_EVIDENCE:
        raise ValidationError(f"evidence must be a list of at most {MAX_EVIDENCE} pointers", field="evidence")
    out: list[dict[str, Any]] = []
    for e in items:
        if not isinstance(e, Mapping) or e.get("kind") not in EVIDENCE_KINDS or not isinstance(e.get("id"), str):
            raise ValidationError(
                "each evidence pointer is {kind: message|tool_call|document, id: str, span?: [start, end]}",
                field="evidence",
            )
        pointer: dict[str, Any] = {"kind": e["kind"], "id": store_validation.identifier("evidence id", e["id"])}
        span = e.get("span")
        if span is not None:
            if not (isinstance(span, Sequence) and len(span) == 2 and all(isinstance(x, int) and x >= 0 for x in span)):
                raise ValidationError("evidence span must be [start, end] character offsets", field="evidence")
            pointer["span"] = [int(span[0]), int(span[1])]
        out.append(pointer)
    return out


def _merge_evidence(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for e in [*a, *b]:
        seen.setdefault((str(e["kind"]), str(e["id"])), dict(e))
    return tuple(list(seen.values())[-MAX_EVIDENCE:])


class KnowledgeOps:
    """Facts (remember, recall, search, forget, archive, list, stats, consolidate) and state."""

    hot: HotState
    store: MemoryStore
    settings: Settings
    clock: Callable[[], float]
    embed: Any
    _taint: poisoning.Filter
    # Provided by MemoryService and LifecycleOps.
    agent: Callable[[str], Any]
    claim: Callable[..., tuple[dict[str, Any], bool]]
    _audit: Callable[[str, str, Mapping[str, Any], str], None]
    _link: Callable[[Fact, Sequence[Mapping[str, Any]], str], None]  # EntityGraphOps
    vector_of: Callable[[str], list[float]]
    _changed: Callable[..., None]  # ReplicaOps: publish a change to the agent's feed

    # --- facts ------------------------------------------------------------------------------------
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
        actor: str = "system",
    ) -> RememberResult:
        """Upsert a fact: guard, then dedup (MATCH joins its evidence to the existing fact and
        refreshes its lifetime; CONFLICT keeps both values of one key, marked; NEW adds it)."""
        self.agent(agent_id)
        cfg = self.settings.facts
        value = self._text(value, "value", cfg.max_value_chars)
        if type not in cfg.types:
            raise ValidationError(f"unknown fact type {type!r}; known: {', '.join(sorted(cfg.types))}", field="type")
        if scope not in SCOPES:
            raise ValidationError(f"scope must be one of {', '.join(SCOPES)}", field="scope")
        if status not in ("active", "shadow"):
            raise ValidationError("a new fact is active or shadow", field="status")
        if type == "entity":  # the key is the name itself, folded: one entity, one fact
            key = entities.canonical(key if key is not None else value)
        elif type == "relation":
            if key is None:
                raise ValidationError("a relation needs its key 'source|relation|target'", field="key")
            key = entities.relation_of(key).key
        if key is not None:
            key = store_validation.identifier("key", key)
        tags = self._tags(tags)
        pointers = _evidence(evidence)
        imp, conf = _unit("importance", importance), _unit("confidence", confidence)
        now = self.clock()
        expires_at = self._expiry(type, ttl_s, now)
        lifetime = None if expires_at is None else expires_at - now
        self._guard(agent_id, "remember", f"{key or ''} {value}", justification, actor, type=type)
        request = {
            "value_sha256": hashlib.sha256(value.encode()).hexdigest(),
            "type": type, "scope": scope, "key": key, "evidence": pointers, "status": status,
        }  # fmt: skip
        fact_id = "f" + uuid.uuid4().hex[:20]
        replayed = False
        if idempotency_key is not None:
            claimed, replayed = self.claim(agent_id, idempotency_key, "remember", request, {"fact_id": fact_id})
            fact_id = str(claimed["fact_id"])
            if replayed:
                try:
                    return RememberResult("REPLAYED", self.store.get_fact(agent_id, fact_id), replayed=True)
                except NotFound:
                    pass  # the first attempt died before writing: write it now
        identity = type in dedup.IDENTITY_TYPES
        # An entity's value is its name: the key dedups it and text search finds it, so the
        # model call an embedding costs buys nothing there.
        embedding = None if type == "entity" else self._embedding(value)
        candidates = self.store.query_facts(
            agent_id,
            FactQuery(scope=scope, types=[type], key=key, limit=10)
            if identity  # one key, one fact: however many entities the agent knows
            else FactQuery(scope=scope, types=[type], limit=1000, with_embeddings=True),
        )
        outcome = dedup.decide(
            value,
            key,
            embedding,
            candidates,
            word_overlap=cfg.word_overlap,
            embedding_similarity=cfg.embedding_similarity,
            identity=identity,
        )
        if outcome.decision == "MATCH" and outcome.target is not None:
            target = outcome.target
            joined = replace(
                target,
                evidence=_merge_evidence(target.evidence, pointers),
                tags=tuple(dict.fromkeys([*target.tags, *tags])),
                importance=max(target.importance, imp),
                confidence=max(target.confidence, conf),
                updated_at=now,
                expires_at=expires_at,  # reconfirmed: its lifetime starts again
                lifetime_s=lifetime,
            )
            stored = self._put_fact(joined, target.version)
            self._decision(agent_id, "MATCH", stored, actor, similarity=round(outcome.similarity, 3))
            self._link(stored, pointers, actor)
            return RememberResult("MATCH", stored, replayed=replayed)
        fact = Fact(
            agent_id=agent_id, fact_id=fact_id, scope=scope, type=type, value=value, key=key, category=category,
            tags=tuple(tags), importance=imp, confidence=conf, evidence=tuple(pointers), status=status,
            conflict_with=tuple(f.fact_id for f in outcome.conflicting), created_at=now, updated_at=now,
            expires_at=expires_at, lifetime_s=lifetime, embedding=embedding,
        )  # fmt: skip
        stored = self._put_fact(fact, None)
        self._link(stored, pointers, actor)
        marked: list[Fact] = []
        for other in outcome.conflicting:
            marked.append(
                self._put_fact(
                    replace(other, conflict_with=tuple(dict.fromkeys([*other.conflict_with, fact_id]))), other.version
                )
            )
        self._decision(agent_id, outcome.decision, stored, actor, conflicts=[f.fact_id for f in marked])
        if marked and type != "question" and "question" in cfg.types:
            self._open_question(agent_id, stored, marked, now)
        return RememberResult(outcome.decision, stored, tuple(marked), replayed=replayed)

    def recall_fact(self, agent_id: str, key: str, *, scope: str | None = None, type: str | None = None) -> list[Fact]:
        """The live facts of a key (more than one: a conflict); their use is recorded."""
        self.agent(agent_id)
        store_validation.identifier("key", key)
        found = self.store.query_facts(agent_id, FactQuery(scope=scope, types=[type] if type else None, key=key))
        self._use(agent_id, found)
        return found

    def search_facts(self, agent_id: str, query: str, *, filters: FactQuery | None = None) -> list[FactHit]:
        hits = self.rank_facts(agent_id, query, filters=filters)
        self._use(agent_id, [h.fact for h in hits])
        return hits

    def rank_facts(self, agent_id: str, query: str, *, filters: FactQuery | None = None) -> list[FactHit]:
        """``search_facts`` without recording a use: for callers that show only some of the hits
        and record those (the prompt builder)."""
        self.agent(agent_id)
        if not isinstance(query, str) or len(query) > 4000:
            raise ValidationError("query must be a string of at most 4000 characters", field="query")
        return self.store.search_facts(
            agent_id, query, self._embedding(query) if query.strip() else None, filters or FactQuery(limit=10)
        )

    def list_facts(self, agent_id: str, filters: FactQuery | None = None) -> list[Fact]:
        self.agent(agent_id)
        return self.store.query_facts(agent_id, filters or FactQuery())

    def get_fact(self, agent_id: str, fact_id: str) -> Fact:
        self.agent(agent_id)
        return self.store.get_fact(agent_id, fact_id)

    def forget_fact(self, agent_id: str, fact_id: str, *, actor: str = "system") -> bool:
        self.agent(agent_id)
        store_validation.identifier("fact_id", fact_id)
        removed = self.store.delete_facts(agent_id, [fact_id]) > 0
        if removed:
            self._changed(agent_id, "fact", fact_id, None, "delete")
            self._audit(agent_id, "fact_forgotten", {"fact_id": fact_id}, actor)
        return removed

    def archive_facts(
        self, agent_id: str, filters: FactQuery, *, actor: str = "system", only: set[str] | None = None
    ) -> int:
        """Move the facts matching ``filters`` (and in ``only``, when given) to ``archived``:
        kept, no longer recalled or searched."""
        self.agent(agent_id)
        done = 0
        for f in self.store.query_facts(agent_id, filters):
            if only is not None and f.fact_id not in only:
                continue
            if f.status != "archived":
                self._put_fact(replace(f, status="archived", updated_at=self.clock()), f.version)
                done += 1
        self._audit(agent_id, "facts_archived", {"count": done}, actor)
        return done

    def fact_stats(self, agent_id: str) -> dict[str, Any]:
        self.agent(agent_id)
        counts = self.store.fact_counts(agent_id)
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
        hits: Sequence[FactHit] | None = None,
        record_use: bool = True,
    ) -> WorkingSet:
        """The agent's Working Set (seed 002): a bounded state snapshot of its live facts, ranked
        by utility for ``query`` (relevance from the hybrid fact search, or from ``hits`` of one
        already made for it); the items returned count as used unless ``record_use`` is off
        (the caller records what it shows)."""
        self.agent(agent_id)
        types = working_set.types_needed(caps)
        facts = self.store.query_facts(agent_id, FactQuery(types=types, limit=1000)) if types != [] else []
        relevance: dict[str, float] = {}
        if hits is None and query.strip():
            hits = self.search_facts(agent_id, query, filters=FactQuery(limit=working_set.RELEVANCE_HITS))
        relevance = {h.fact.fact_id: h.score for h in hits or ()}
        ws = working_set.build(facts, relevance, self.clock(), caps)
        if record_use:
            self._use(agent_id, [i.fact for items in ws.sections.values() for i in items])
        return ws

    def consolidate(self, agent_id: str, *, actor: str = "worker:consolidate") -> dict[str, int]:
        """Promote shadow facts that pass the replay test: their evidence messages are still in
        recall and hold most of the fact's words, no live fact of their key says otherwise, and
        the guard lets them through. Repetition alone promotes nothing: the test reads the
        evidence, not the count of writes."""
        self.agent(agent_id)
        promoted = kept = contradicted = 0
        shadows = self.store.query_facts(agent_id, FactQuery(statuses=["shadow"], limit=1000))
        for f in shadows:
            if f.key is not None:
                rivals = [
                    r for r in self.store.query_facts(agent_id, FactQuery(key=f.key, statuses=["active"]))
                    if dedup.normalise(r.value) != dedup.normalise(f.value)
                ]  # fmt: skip
                if rivals:
                    contradicted += 1
                    if not f.conflict_with:
                        self._put_fact(replace(f, conflict_with=tuple(r.fact_id for r in rivals)), f.version)
                    continue
            if not self._supported(agent_id, f) or guard.check(f.value, self.settings.facts.pii).refused:
                kept += 1
                continue
            stored = self._put_fact(replace(f, status="active", updated_at=self.clock()), f.version)
            self._decision(agent_id, "PROMOTED", stored, actor)
            promoted += 1
        return {"promoted": promoted, "kept_shadow": kept, "contradicted": contradicted}

    def _open_question(self, agent_id: str, fact: Fact, others: Sequence[Fact], now: float) -> None:
        """A conflict goes on the agenda as an open question, with both sides as evidence (the
        seed's rule); written directly, as the question quotes values the guard already passed."""
        values = " or ".join(dict.fromkeys(f'"{f.value[:80]}"' for f in [fact, *others]))
        ttl = self.settings.facts.types["question"]
        question = Fact(
            agent_id=agent_id, fact_id="f" + uuid.uuid4().hex[:20], scope=fact.scope, type="question",
            key=f"conflict:{fact.key}", value=f"Which holds for {fact.key}: {values}?", tags=("conflict",),
            importance=max(f.importance for f in [fact, *others]), confidence=1.0,
            evidence=tuple({"kind": "message", "id": str(e["id"])} for f in [fact, *others] for e in f.evidence
                           if e.get("kind") == "message")[:MAX_EVIDENCE],
            created_at=now, updated_at=now, expires_at=now + ttl if ttl else None, lifetime_s=ttl or None,
        )  # fmt: skip
        existing = self.store.query_facts(agent_id, FactQuery(types=["question"], key=question.key))
        if existing:
            self._put_fact(replace(existing[0], value=question.value, updated_at=now), existing[0].version)
        else:
            self._put_fact(question, None)

    def _supported(self, agent_id: str, fact: Fact) -> bool:
        ids = [str(e["id"]) for e in fact.evidence if e.get("kind") == "message"]
        if not ids:
            return False
        text = " ".join(m.content for m in self.store.get_messages(agent_id, ids))
        words = dedup.word_set(fact.value.split(": ", 1)[-1])
        return bool(words) and len(words & dedup.word_set(text)) / len(words) >= 0.6

    # --- state ------------------------------------------------------------------------------------
    def set_state(
        self,
        agent_id: str,
        key: str,
        value: Any,
        *,
        ttl_s: int | None = None,
        expected_rev: str | None = None,
        justification: str | None = None,
        actor: str = "system",
    ) -> StateEntry:
        self.agent(agent_id)
        store_validation.identifier("key", key)
        text = store_validation.json_value("value", value)
        if len(text) > self.settings.facts.max_value_chars:
            raise ValidationError(
                f"value is longer than {self.settings.facts.max_value_chars} characters as JSON", field="value"
            )
        if ttl_s is not None and (isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 1):
            raise ValidationError("ttl_s must be a positive number of seconds (omit it: no expiry)", field="ttl_s")
        self._guard(agent_id, "set_state", f"{key} {text}", justification, actor, key=key)
        entry = self.store.put_state(
            agent_id,
            key,
            json.loads(text),
            expires_at=self.clock() + ttl_s if ttl_s else None,
            expected_rev=expected_rev,
        )
        self._changed(agent_id, "state", key, entry.rev)
        self._audit(agent_id, "state_set", {"key": key, "rev": entry.rev, "bytes": len(text)}, actor)
        return entry

    def get_state(self, agent_id: str, key: str) -> StateEntry:
        self.agent(agent_id)
        return self.store.get_state(agent_id, key, self.clock())

    def list_state(self, agent_id: str) -> list[StateEntry]:
        self.agent(agent_id)
        return self.store.list_state(agent_id, self.clock())

    def delete_state(
        self, agent_id: str, key: str | None, *, expected_rev: str | None = None, actor: str = "system"
    ) -> int:
        """Delete one key, or every key (``key`` None: clear)."""
        self.agent(agent_id)
        removed = self.store.delete_state(agent_id, key, expected_rev)
        if removed:
            self._changed(agent_id, "state", "*" if key is None else key, None, "clear" if key is None else "delete")
        self._audit(agent_id, "state_deleted", {"key": key, "removed": removed}, actor)
        return removed

    # --- capture ----------------------------------------------------------------------------------
    def keep_captured(self, agent_id: str, captured: Captured, message_id: str, actor: str) -> dict[str, Any]:
        """Store what a reply's tags asked to keep; a refused one is an event, never a failed append."""
        kept: dict[str, Any] = {"facts": [], "state": [], "refused": 0}
        pointer = [{"kind": "message", "id": message_id}]
        for type_, text in captured.memories:
            known = type_ if type_ in self.settings.facts.types else "learned"
            try:
                res = self.remember(
                    agent_id, text, type=known, evidence=pointer, tags=(type_,) if known != type_ else (), actor=actor
                )
                kept["facts"].append(res.fact.fact_id)
            except (PolicyRefused, ValidationError):
                kept["refused"] += 1
        for key, value in captured.states:
            try:
                self.set_state(agent_id, key, value, actor=actor)
                kept["state"].append(key)
            except (PolicyRefused, ValidationError):
                kept["refused"] += 1
        return kept

    # --- plumbing ---------------------------------------------------------------------------------
    def _put_fact(self, fact: Fact, expected_version: int | None) -> Fact:
        """Every fact write: the store's, then its change on the agent's feed."""
        stored = self.store.put_fact(fact, expected_version)
        self._changed(stored.agent_id, "fact", stored.fact_id, stored.version)
        return stored

    def _use(self, agent_id: str, used: Sequence[Fact]) -> None:
        """Record a use of these facts: each with a lifetime lives it again from now (seed 002:
        a TTL is refreshed by reconfirmation or use, and by nothing else)."""
        if used:
            self.store.touch_facts(agent_id, list(dict.fromkeys(f.fact_id for f in used)), self.clock())

    def _text(self, value: Any, name: str, limit: int) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ValidationError(f"{name} must be a non-empty string", field=name)
        if len(value) > limit:
            raise ValidationError(f"{name} is longer than {limit} characters", field=name, limit=limit)
        return value.strip()

    def _tags(self, tags: Sequence[str]) -> list[str]:
        if isinstance(tags, str) or not isinstance(tags, Sequence) or len(tags) > self.settings.facts.max_tags:
            raise ValidationError(
                f"tags must be a list of at most {self.settings.facts.max_tags} strings", field="tags"
            )
        out = []
        for t in tags:
            if not isinstance(t, str) or not t.strip() or len(t) > 64:
                raise ValidationError("each tag is a non-empty string of at most 64 characters", field="tags")
            out.append(t.strip())
        return list(dict.fromkeys(out))

    def _expiry(self, type_: str, ttl_s: int | None, now: float) -> float | None:
        if ttl_s is None:
            default = self.settings.facts.types[type_]
            return now + default if default else None
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 0:
            raise ValidationError(
                "ttl_s must be >= 0 seconds (0: never expires); a past expiry is refused", field="ttl_s"
            )
        return now + ttl_s if ttl_s else None

    def _embedding(self, text: str) -> list[float] | None:
        if self.embed is None:
            return None
        try:
            return self.vector_of(text)
        except Exception:  # an embedder failure must not fail a memory write: text still dedups
            return None

    def _guard(self, agent_id: str, op: str, text: str, justification: str | None, actor: str, **ids: Any) -> None:
        verdict = guard.check(text, self.settings.facts.pii, self._taint.scan(text).reasons)
        if not verdict.refused:
            return
        if justification is not None and not poisoning.justification_problem(justification):
            self._audit(
                agent_id,
                "guard_override",
                {"op": op, "reasons": list(verdict.reasons), "justification": justification[:1000], **ids},
                actor,
            )
            return
        metrics.guard_refused(op)
        self._audit(
            agent_id, "fact_decision", {"decision": "REFUSED", "op": op, "reasons": list(verdict.reasons), **ids}, actor
        )
        raise PolicyRefused(
            f"the policy guard refused this {op.replace('_', ' ')}: {', '.join(verdict.reasons)}; "
            "give a justification to store it anyway",
            reasons=list(verdict.reasons),
        )

    def _decision(self, agent_id: str, decision: str, fact: Fact, actor: str, **extra: Any) -> None:
        metrics.fact_decision(decision)
        payload = {"decision": decision, "fact_id": fact.fact_id, "type": fact.type, "scope": fact.scope,
                   "key": fact.key, "status": fact.status, "chars": len(fact.value), **extra}  # fmt: skip
        self._audit(agent_id, "fact_decision", payload, actor)
