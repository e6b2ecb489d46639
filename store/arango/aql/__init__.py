"""Every AQL query the ArangoDB adapter sends, as pure functions returning ``(text, bind_vars)``.

Rules that every function here keeps (``tests/store/test_arango_aql.py`` checks them):

* Query text is assembled only from constants of :mod:`vcm.store.arango.names`, validated attribute
  names (:func:`vector_attribute`) and fixed keywords. Every value a caller supplies (agent ids,
  query strings, vectors, metadata keys and values) travels as a bind variable; collections
  chosen at run time travel as ``@@collection`` bind variables.
* Full-text search names its analyzer explicitly: ``ANALYZER(... IN TOKENS(@q, "text_en"),
  "text_en")``. An ``arangosearch`` view's default analyzer context is ``identity``, so without
  it nothing would match (docs/reference/arangodb.md §2.4).
* Approximate vector search (``APPROX_NEAR_*``) keeps no ``FILTER`` between its ``FOR`` and
  ``LIMIT``: 3.12.4/3.12.5 refuse to use the vector index otherwise, and 3.12.6+ allow only one
  FILTER (reference §1.5). The ANN part is an inner subquery that over-fetches; all filters run
  in an outer loop over its result.

One module per family of operations, matching the adapter's split by concern: :mod:`.common`
(the query type, checked attributes, generic reads and writes), :mod:`.messages`,
:mod:`.recall_vectors`, :mod:`.archival`, :mod:`.events`, :mod:`.graph`, :mod:`.agents`,
:mod:`.facts` and :mod:`.maintenance`.
"""

from vcm.store.arango.aql.common import AqlQuery as AqlQuery
