"""Dedup and conflicts of a fact write (:meth:`vcm.service.facts.Facts.remember`), within the
scope's own memory: the write's key first (its live facts read whole: a CONFLICT marks them),
then near-duplicate text over the type's live facts read light, their cosines computed in the
store (``dedup_candidates``). The rules themselves are pure, in :mod:`vcm.facts.dedup`."""

from __future__ import annotations

from collections.abc import Sequence

from vcm.errors import NotFound
from vcm.facts import dedup
from vcm.service.core import Core
from vcm.service.fact_input import LIVE
from vcm.store.types import FactQuery

# A write is compared with its key's live facts (more than one: a conflict) and with the most
# recently updated live facts of its scope and type.
KEYED = 100
CANDIDATES = 1000


def outcome(
    core: Core, holder: str, value: str, key: str | None, embedding: Sequence[float] | None, *, scope: str, type: str
) -> dedup.Outcome:
    """The write's verdict. An identity type's key is the thing itself (an entity's name, a
    relation's triple): nothing without the key is the same. A target gone between the two
    reads leaves the write NEW."""
    identity = type in dedup.IDENTITY_TYPES
    keyed = (
        []
        if key is None
        else core.store.query_facts(holder, FactQuery(scope=scope, types=[type], key=key, statuses=LIVE, limit=KEYED))
    )
    verdict = dedup.by_key(value, key, keyed, identity=identity)
    if verdict is not None or identity:
        return verdict or dedup.Outcome("NEW")
    cfg = core.settings.facts
    near = dedup.by_similarity(
        value,
        key,
        core.store.dedup_candidates(
            holder, FactQuery(scope=scope, types=[type], statuses=LIVE, limit=CANDIDATES), embedding
        ),
        word_overlap=cfg.word_overlap,
        embedding_similarity=cfg.embedding_similarity,
        unsure_overlap=cfg.unsure_word_overlap,
        unsure_similarity=cfg.unsure_embedding_similarity,
    )
    if near.target is None:
        return dedup.Outcome("NEW")
    try:
        target = core.store.get_fact(near.target.agent_id, near.target.fact_id)
    except NotFound:
        return dedup.Outcome("NEW")
    return dedup.Outcome(near.decision, target, similarity=near.similarity)
