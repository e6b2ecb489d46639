"""The vector index over message recall vectors (``messages.recall_emb``) and how one agent's
vector recall uses it: index definition, counts, and the query for each plan (pure).

One index per dimension, named ``recall_emb_cosine_<d>``, over the one attribute that holds
every message's recall vector; it is global (every agent's messages), so the agent filter is
the problem (docs/recall-scale.md): :func:`vcm.store.arango.aql.recall_vectors.recall_vector_plan` picks exact
search, the 3.12.6+ filtered lookup, or a bounded global over-fetch post-filtered by agent, and
:func:`vector_query` / :func:`read_hits` turn that plan into AQL and back. An approximate answer
that holds fewer hits than it should (the probed cells held too few of the agent's vectors, or
the over-fetch kept too few of them) is reported incomplete, and the caller ranks exactly
instead: slower, never short.

The index is created only on 3.12.6+ (``sparse``: messages without a vector are left out;
before 3.12.6 creating it fails while any message lacks the attribute, BTS-2184, which the
newest messages always do), and carries ``storedValues`` for the filter's attributes on 3.12.7+
so the filter is evaluated from the index (docs/reference/arangodb.md §1.2, §1.5).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vcm.errors import ValidationError
from vcm.store.arango import names
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.aql import recall_vectors as aql_recall_vectors
from vcm.store.arango.aql.common import AqlQuery
from vcm.store.arango.aql.recall_vectors import RECALL_VECTOR, RECALL_VERSION, RecallVectorPlan
from vcm.store.arango.schema import VectorIndexSpec

SPARSE_SINCE = (3, 12, 6)
STORED_VALUES_SINCE = (3, 12, 7)
_PREFIX = "recall_emb_cosine_"

Ranked = list[tuple[str, float]]


def index_name(dimension: int) -> str:
    if not 1 <= dimension <= aql_common.MAX_DIMENSION:
        raise ValidationError(f"dimension must be within 1..{aql_common.MAX_DIMENSION}")
    return f"{_PREFIX}{dimension}"


def index_dimension(info: Mapping[str, Any]) -> int | None:
    """The dimension of a recall vector index listed by the server, None for any other index."""
    name = str(info.get("name", ""))
    if info.get("type") != "vector" or not name.startswith(_PREFIX) or not name[len(_PREFIX) :].isdigit():
        return None
    return int(name[len(_PREFIX) :])


def can_create(server: tuple[int, int, int]) -> bool:
    """Whether this server can index ``messages.recall_emb`` at all (it needs ``sparse``)."""
    return server >= SPARSE_SINCE


def index_definition(
    spec: VectorIndexSpec, dimension: int, n_vectors: int, server: tuple[int, int, int]
) -> dict[str, Any]:
    """``POST /_api/index`` body of the recall vector index, sized like the archival indexes
    (``spec``: nLists from the vectors present, defaultNProbe from nLists)."""
    if not can_create(server):
        raise ValidationError("a vector index over messages.recall_emb needs ArangoDB 3.12.6+ (sparse)")
    n_lists = spec.n_lists(n_vectors)
    definition: dict[str, Any] = {
        "name": index_name(dimension),
        "type": "vector",
        "fields": [RECALL_VECTOR],
        "sparse": True,
        "inBackground": spec.in_background,
        "parallelism": spec.parallelism,
        "params": {
            "metric": "cosine",
            "dimension": dimension,
            "nLists": n_lists,
            "defaultNProbe": spec.default_n_probe(n_lists),
            "trainingIterations": spec.training_iterations,
        },
    }
    if server >= STORED_VALUES_SINCE:
        definition["storedValues"] = ["agent_id", RECALL_VERSION]
    return definition


def count_recall_vectors(dimension: int) -> AqlQuery:
    """Messages carrying a recall vector of ``dimension`` (the index's training set; a scan)."""
    index_name(dimension)  # validates it
    text = (
        f"FOR d IN {names.MESSAGES}\n  FILTER d.{RECALL_VECTOR} != null AND LENGTH(d.{RECALL_VECTOR}) == @dimension\n"
        "  COLLECT WITH COUNT INTO n\n  RETURN n"
    )
    return AqlQuery(text, {"dimension": dimension})


def vector_query(
    plan: RecallVectorPlan,
    agent_id: str,
    vector: Sequence[float],
    *,
    version: str,
    wanted: int,
    since: float | None = None,
    until: float | None = None,
) -> AqlQuery:
    """The query that carries out ``plan`` for the agent's top-``wanted``."""
    if plan.form == "exact":
        return aql_recall_vectors.recall_vector_exact(
            agent_id, vector, version=version, fetch=wanted, since=since, until=until
        )
    if plan.form == "filtered":
        return aql_recall_vectors.recall_vector_ann_filtered(
            agent_id, vector, version=version, fetch=plan.fetch, n_probe=plan.n_probe, since=since, until=until
        )
    return aql_recall_vectors.recall_vector_ann(
        agent_id,
        vector,
        version=version,
        fetch=plan.fetch,
        wanted=wanted,
        n_probe=plan.n_probe,
        since=since,
        until=until,
    )


def read_hits(plan: RecallVectorPlan, rows: Sequence[Any], *, wanted: int, agent_vectors: int) -> tuple[Ranked, bool]:
    """``(hits best first, complete)`` from the rows of :func:`vector_query`. Complete unless an
    approximate form returned fewer hits than the agent can supply (``min(wanted,
    agent_vectors)``) without a time window narrowing them: then the caller ranks exactly.
    With a time window the approximate forms are not used (see :func:`plan_for`)."""
    if plan.form == "overfetch":
        first = rows[0] if rows else {"hits": []}
        hit_rows = list(first.get("hits", [])) if isinstance(first, Mapping) else []
    else:
        hit_rows = list(rows)
    hits = [(str(r["key"]), float(r["score"])) for r in hit_rows][:wanted]
    complete = plan.form == "exact" or len(hits) >= min(wanted, agent_vectors)
    return hits, complete


def plan_for(
    *,
    server: tuple[int, int, int],
    agent_vectors: int,
    total_vectors: int,
    wanted: int,
    n_lists: int | None,
    default_n_probe: int,
    windowed: bool,
) -> RecallVectorPlan:
    """:func:`aql_recall_vectors.recall_vector_plan`, but exact for a time window (``since``/``until``): how
    many of the agent's vectors a window holds is unknown here, so a short answer could not be
    told from a narrow window; exact search over the window is what the embedded store's
    message index does for a narrow window too."""
    if windowed or agent_vectors == 0:
        return RecallVectorPlan("exact", 0, 0)
    return aql_recall_vectors.recall_vector_plan(
        server=server,
        agent_vectors=agent_vectors,
        total_vectors=max(total_vectors, agent_vectors),
        wanted=wanted,
        n_lists=n_lists,
        default_n_probe=default_n_probe,
    )
