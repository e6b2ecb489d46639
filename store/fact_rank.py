"""Ranking of facts for ``search_facts``, shared by both adapters (pure).

An agent holds thousands of facts, not millions of messages, so both adapters fetch the facts
that pass the filters and rank them here: BM25 over the analysed value, key and tags (the same
formula and analyzer as message recall) fused with cosine on the fact embeddings by the same
convex combination as hybrid recall (:func:`vcm.store.fusion.convex`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from vcm.store import fusion
from vcm.store.embedded import bm25
from vcm.store.embedded.textindex import analyze, query_terms
from vcm.store.types import Fact, FactHit

# Candidates fetched per search; beyond this, filters should narrow the search.
MAX_CANDIDATES = 5000


def fact_terms(fact: Fact) -> list[str]:
    return analyze(" ".join([fact.value, fact.key or "", *fact.tags, fact.category]))


def rank(text: str, vector: Sequence[float] | None, facts: Sequence[Fact], limit: int) -> list[FactHit]:
    if not facts:
        return []
    terms = [fact_terms(f) for f in facts]
    wanted = query_terms(text) if text.strip() else []
    text_scores: list[tuple[str, float]] = []
    if wanted:
        df: Counter[str] = Counter()
        for t in terms:
            df.update(set(t))
        avg = sum(len(t) for t in terms) / len(terms)
        for f, t in zip(facts, terms, strict=True):
            s = bm25.score(wanted, t, doc_freq=df, num_docs=len(facts), avg_doc_len=avg)
            if s > 0:
                text_scores.append((f.fact_id, s))
        text_scores.sort(key=lambda kv: -kv[1])
    vector_scores: list[tuple[str, float]] = []
    embedded = [f for f in facts if f.embedding]
    if vector is not None and embedded:
        q = fusion.unit_vector(vector)
        dim = q.shape[0]
        same = [f for f in embedded if len(f.embedding or ()) == dim]
        if same:
            matrix = np.asarray([f.embedding for f in same], dtype=np.float32)
            norms = np.linalg.norm(matrix, axis=1)
            norms[norms == 0] = 1.0
            sims = (matrix / norms[:, None]) @ q
            vector_scores = sorted(
                ((f.fact_id, float(s)) for f, s in zip(same, sims, strict=True)), key=lambda kv: -kv[1]
            )
    if not text_scores and not vector_scores:
        return []
    if not vector_scores:
        fused = dict(fusion.minmax(text_scores, floor=0.0))
    elif not text_scores:
        fused = fusion.minmax(vector_scores)  # no word in common: meaning alone ranks
    else:
        unembedded = {f.fact_id for f in facts if not f.embedding}
        fused = fusion.convex(text_scores, vector_scores, unembedded=unembedded)
    by_id = {f.fact_id: f for f in facts}
    ordered = sorted(fused.items(), key=lambda kv: (-kv[1], -by_id[kv[0]].updated_at, kv[0]))
    return [FactHit(replace(by_id[i], embedding=None), s) for i, s in ordered[:limit]]
