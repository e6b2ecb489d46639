"""BM25 as tantivy computes it, for the few messages the text index has not seen yet (pure).

Read-after-write recall merges tantivy's hits with this scorer's hits over the unindexed tail,
so the formula and constants match tantivy's ``Bm25Weight`` (k1 = 1.2, b = 0.75,
idf = ln(1 + (N - df + 0.5) / (df + 0.5))) and the two score scales can be compared. The only
difference left is tantivy's one-byte field-norm quantisation, exact for fields up to 40 terms.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

K1 = 1.2
B = 0.75


def idf(doc_freq: int, num_docs: int) -> float:
    n = max(num_docs, doc_freq, 1)
    return math.log(1.0 + (n - doc_freq + 0.5) / (doc_freq + 0.5))


def score(
    query_terms: Sequence[str],
    doc_terms: Sequence[str],
    *,
    doc_freq: Mapping[str, int],
    num_docs: int,
    avg_doc_len: float,
) -> float:
    """Sum of the per-term BM25 weights of the query terms found in the document."""
    if not doc_terms:
        return 0.0
    counts = Counter(doc_terms)
    avg = avg_doc_len if avg_doc_len > 0 else float(len(doc_terms))
    norm = K1 * (1.0 - B + B * len(doc_terms) / avg)
    total = 0.0
    for term in query_terms:
        tf = counts.get(term, 0)
        if tf:
            weight = idf(doc_freq.get(term, 0), num_docs) * (1.0 + K1)
            total += weight * tf / (tf + norm)
    return total
