"""Text analysis shared by both adapters: tantivy's ``en_stem`` chain as a plain function.

The embedded text index registers the same chain, so its BM25 and the pure scorers of
:mod:`vcm.store.bm25` (the unindexed tail, fact ranking in either adapter) agree on terms.
"""

from __future__ import annotations

import tantivy

# The same chain tantivy registers as "en_stem", so tail scoring and query terms agree with it.
ANALYZER = (
    tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
    .filter(tantivy.Filter.remove_long(40))
    .filter(tantivy.Filter.lowercase())
    .filter(tantivy.Filter.stemmer("english"))
    .build()
)


def analyze(text: str) -> list[str]:
    return list(ANALYZER.analyze(text))


def query_terms(text: str) -> list[str]:
    """Distinct analysed terms of a query, in order (a repeated word does not count twice)."""
    return list(dict.fromkeys(analyze(text)))
