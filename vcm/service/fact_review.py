"""How shadow facts are settled (seed 002's promotion gate): by consolidation's replay test, or
by a person.

Consolidation reads the evidence, not the count of writes:

* a shadow fact is promoted when its evidence messages are still in recall and hold most of its
  words, no active fact of its key says otherwise, and the guard lets it through;
* an UNSURE candidate (``duplicate_of`` names the fact it may repeat) is merged into that fact
  when the fact's own evidence holds every word the candidate adds to it (nothing new is said:
  the candidate's pointers join the fact and the candidate goes); otherwise it is promoted as a fact of its
  own when its evidence supports it; otherwise it waits. A candidate whose fact is gone is an
  ordinary shadow fact.

A person (``settle``): ``promote`` (an UNSURE candidate becomes a fact of its own), ``merge`` (an
UNSURE candidate into its fact) or ``reject`` (removed). Each outcome is a decision event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from vcm.errors import Conflict, NotFound, ValidationError
from vcm.facts import dedup, guard
from vcm.service import fact_input
from vcm.store import validation as store_validation
from vcm.store.principals import is_holder
from vcm.store.types import Fact, FactQuery

if TYPE_CHECKING:
    from vcm.service.facts import Facts

SETTLE_ACTIONS = ("promote", "merge", "reject")
LIVE = ("active", "shadow")
# Share of a fact's words its evidence messages must hold (the replay test).
SUPPORT = 0.6


def consolidate(facts: Facts, agent_id: str, actor: str) -> dict[str, int]:
    """The agent's shadow facts, then its user's and its domain's, each against the active facts
    of its own scope (a shared fact's evidence names the agent that wrote it)."""
    core = facts.core
    core.agent(agent_id)
    totals = dict.fromkeys(("promoted", "kept_shadow", "contradicted", "merged"), 0)
    for holder in (agent_id, *facts.principals.holders(agent_id).values()):
        for name, n in _consolidate(facts, holder, actor).items():
            totals[name] += n
    return totals


def _consolidate(facts: Facts, agent_id: str, actor: str) -> dict[str, int]:
    core = facts.core
    promoted = kept = contradicted = merged = 0
    shadows = core.store.query_facts(agent_id, FactQuery(statuses=["shadow"], limit=1000))
    for f in shadows:
        try:  # an earlier promotion or merge may have changed or removed it
            f = core.store.get_fact(agent_id, f.fact_id)
        except NotFound:
            continue
        if f.status != "shadow":
            continue
        target = _target(facts, f)
        if target is not None and _repeats(facts, f, target):
            merge(facts, f, target, actor)
            merged += 1
            continue
        if f.key is not None:
            rivals = [
                r for r in core.store.query_facts(agent_id, FactQuery(key=f.key, statuses=["active"]))
                if dedup.normalise(r.value) != dedup.normalise(f.value)
            ]  # fmt: skip
            if rivals:
                contradicted += 1
                if not f.conflict_with:
                    facts.put_fact(replace(f, conflict_with=tuple(r.fact_id for r in rivals)), f.version)
                continue
        if not supported(facts, agent_id, f, f.evidence) or guard.check(f.value, core.settings.facts.pii).refused:
            kept += 1
            continue
        facts.promote(replace(f, duplicate_of=None), actor, **({"settled": "distinct"} if target else {}))
        promoted += 1
    return {"promoted": promoted, "kept_shadow": kept, "contradicted": contradicted, "merged": merged}


def settle(facts: Facts, agent_id: str, fact_id: str, action: str, actor: str) -> Fact | None:
    """The fact after it (None: removed or merged away); a fact that is not shadow answers
    CONFLICT, ``merge`` of a fact that is no UNSURE candidate (or whose fact is gone)
    VALIDATION_ERROR, as does an unknown action."""
    core = facts.core
    core.agent(agent_id)
    if action not in SETTLE_ACTIONS:
        raise ValidationError(f"action must be one of {', '.join(SETTLE_ACTIONS)}", field="action")
    fact = facts.find(agent_id, store_validation.identifier("fact_id", fact_id))  # its own, or shared
    if fact.status != "shadow":
        raise Conflict(f"fact {fact_id!r} is {fact.status}: only a shadow fact is settled", status=fact.status)
    if action == "promote":
        return facts.promote(replace(fact, duplicate_of=None), actor, settled="promote")
    if action == "merge":
        target = _target(facts, fact)
        if target is None:
            raise ValidationError(f"fact {fact_id!r} is no UNSURE candidate of a live fact", field="action")
        return merge(facts, fact, target, actor)
    facts.record_decision(agent_id, "REJECTED", fact, actor, settled="reject")
    facts.forget_fact(agent_id, fact_id, actor=actor)
    return None


def merge(facts: Facts, candidate: Fact, target: Fact, actor: str) -> Fact:
    """The candidate's evidence, tags and scores join its target; the candidate goes."""
    joined = replace(
        target,
        evidence=fact_input.merge_evidence(target.evidence, candidate.evidence),
        tags=tuple(dict.fromkeys([*target.tags, *candidate.tags])),
        importance=max(target.importance, candidate.importance),
        confidence=max(target.confidence, candidate.confidence),
        updated_at=facts.core.clock(),
    )
    stored = facts.put_fact(joined, target.version)
    facts.record_decision(target.agent_id, "MERGED", stored, actor, candidate=candidate.fact_id)
    facts.link(stored, candidate.evidence, actor)
    facts.drop(candidate, actor)
    return stored


def supported(facts: Facts, agent_id: str, fact: Fact, evidence: Sequence[Any]) -> bool:
    """The replay test: the messages ``evidence`` points at hold most of the fact's words."""
    text = _evidence_text(facts, agent_id, evidence)
    if text is None:
        return False
    words = dedup.word_set(fact.value.split(": ", 1)[-1])
    return bool(words) and len(words & dedup.word_set(text)) / len(words) >= SUPPORT


def _repeats(facts: Facts, candidate: Fact, target: Fact) -> bool:
    """The candidate says nothing its target's evidence does not: every word the candidate has
    and the target lacks is in the messages the target's evidence points at."""
    novel = dedup.word_set(candidate.value.split(": ", 1)[-1]) - dedup.word_set(target.value.split(": ", 1)[-1])
    text = _evidence_text(facts, target.agent_id, target.evidence)
    return text is not None and novel <= dedup.word_set(text)


def _evidence_text(facts: Facts, holder: str, evidence: Sequence[Any]) -> str | None:
    """The words of the messages ``evidence`` points at (None: it points at none). A pointer of
    a shared fact names the agent whose message it is; an agent's own names none."""
    by_agent: dict[str, list[str]] = {}
    for e in evidence:
        if e.get("kind") == "message":
            by_agent.setdefault(str(e.get("agent_id") or holder), []).append(str(e["id"]))
    if not by_agent:
        return None
    found = [m.content for agent, ids in by_agent.items() if not is_holder(agent)
             for m in facts.core.store.get_messages(agent, ids)]  # fmt: skip
    return " ".join(found)


def _target(facts: Facts, fact: Fact) -> Fact | None:
    """The live fact an UNSURE candidate may duplicate (None: no candidate, or its fact is gone)."""
    if fact.duplicate_of is None:
        return None
    try:
        target = facts.core.store.get_fact(fact.agent_id, fact.duplicate_of)
    except NotFound:
        return None
    return target if target.status in LIVE else None
