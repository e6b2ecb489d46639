"""The ArangoDB schema of vcm: loaded from ``config/arango_schema.json``, created idempotently.

:func:`bootstrap` creates only what is missing (collections, persistent/TTL indexes, the
``messages_view`` ArangoSearch view, the ``g_mem`` graph) and never alters what exists, so it
is safe to run on every start and from several processes at once: a "duplicate name" from a
concurrent creator counts as success.

The vector index is not part of bootstrap. ArangoDB trains it (FAISS IVF) on the documents
present when it is created, and up to 3.12.8 it cannot be created before that data exists
(docs/reference/arangodb.md §1.3). :class:`VectorIndexSpec` says when to create it (a space holds
``min_vectors`` embedded documents) and how (``nLists`` = 4·sqrt(N), at most N/39, the same
sizing the embedded FAISS index uses); until then searches use exact ``COSINE_SIMILARITY`` /
``L2_DISTANCE``. :func:`vector_state` reports ``"exact"`` or ``"ivf"``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from arango.exceptions import (
    CollectionCreateError,
    GraphCreateError,
    IndexCreateError,
    ViewCreateError,
)

from vcm import config as vcm_config
from vcm.store.arango.aql.common import vector_attribute
from vcm.store.arango.errors import (
    DUPLICATE_NAME,
    GRAPH_DUPLICATE,
    ArangoConfigError,
    is_error,
    translated,
)
from vcm.store.types import Metric

SCHEMA_PATH = vcm_config.path("arango_schema.json")

VectorState = Literal["exact", "ivf"]


@dataclass(frozen=True)
class VectorIndexSpec:
    collection: str
    name_pattern: str
    field_pattern: str
    sparse: bool
    in_background: bool
    parallelism: int
    training_iterations: int
    multiplier: float
    min_points_per_list: int
    min_lists: int
    max_lists: int
    n_probe_min: int
    n_probe_fraction: float
    min_vectors: int

    def name(self, metric: Metric, dimension: int) -> str:
        vector_attribute(metric, dimension)  # validates both
        return self.name_pattern.format(metric=metric, dimension=dimension)

    def field(self, metric: Metric, dimension: int) -> str:
        attr = self.field_pattern.format(metric=metric, dimension=dimension)
        if attr != vector_attribute(metric, dimension):
            raise ArangoConfigError("vector field_pattern must match emb_{metric}_{dimension}")
        return attr

    def n_lists(self, n_vectors: int) -> int:
        """IVF cells for N training vectors: c·sqrt(N), but at least ``min_points_per_list``
        vectors per cell (FAISS k-means warns below 39) and never more cells than vectors."""
        ideal = round(self.multiplier * math.sqrt(max(n_vectors, 0)))
        cap = max(n_vectors // self.min_points_per_list, 1)
        return max(1, min(max(self.min_lists, min(ideal, cap)), self.max_lists, max(n_vectors, 1)))

    def default_n_probe(self, n_lists: int) -> int:
        return max(1, min(n_lists, max(self.n_probe_min, round(n_lists * self.n_probe_fraction))))

    def threshold(self) -> int:
        """Embedded documents a space needs before the index is created."""
        return max(self.min_vectors, self.min_points_per_list * self.min_lists)

    def definition(self, metric: Metric, dimension: int, n_vectors: int) -> dict[str, Any]:
        """The body of ``POST /_api/index`` (reference §1.2)."""
        n_lists = self.n_lists(n_vectors)
        return {
            "name": self.name(metric, dimension),
            "type": "vector",
            "fields": [self.field(metric, dimension)],
            "sparse": self.sparse,
            "inBackground": self.in_background,
            "parallelism": self.parallelism,
            "params": {
                "metric": metric,
                "dimension": dimension,
                "nLists": n_lists,
                "defaultNProbe": self.default_n_probe(n_lists),
                "trainingIterations": self.training_iterations,
            },
        }


@dataclass(frozen=True)
class Schema:
    version: int
    analyzers: list[dict[str, Any]]
    collections: list[tuple[str, str]]  # (name, "document" | "edge")
    indexes: dict[str, list[dict[str, Any]]]
    optional_indexes: dict[str, tuple[str, dict[str, Any]]]
    views: list[dict[str, Any]]
    graphs: list[dict[str, Any]]
    vector: VectorIndexSpec
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)

    def collection_names(self) -> list[str]:
        return [name for name, _ in self.collections]


def load_schema(path: Path | str | None = None) -> Schema:
    source = Path(path) if path is not None else SCHEMA_PATH
    try:
        raw = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArangoConfigError(f"cannot read the ArangoDB schema at {source}: {exc}") from exc
    return parse_schema(raw)


def parse_schema(raw: Mapping[str, Any]) -> Schema:
    try:
        vec = raw["vector_index"]
        n_lists, n_probe = vec["n_lists"], vec["default_n_probe"]
        spec = VectorIndexSpec(
            collection=str(vec["collection"]),
            name_pattern=str(vec["name_pattern"]),
            field_pattern=str(vec["field_pattern"]),
            sparse=bool(vec["sparse"]),
            in_background=bool(vec["in_background"]),
            parallelism=int(vec["parallelism"]),
            training_iterations=int(vec["training_iterations"]),
            multiplier=float(n_lists["multiplier"]),
            min_points_per_list=int(n_lists["min_points_per_list"]),
            min_lists=int(n_lists["min"]),
            max_lists=int(n_lists["max"]),
            n_probe_min=int(n_probe["min"]),
            n_probe_fraction=float(n_probe["fraction"]),
            min_vectors=int(vec["min_vectors"]),
        )
        optional = {
            key: (str(value["collection"]), _strip_comments(value["index"]))
            for key, value in raw.get("optional_indexes", {}).items()
        }
        return Schema(
            version=int(raw["version"]),
            analyzers=[_strip_comments(a) for a in raw["analyzers"]],
            collections=[(str(c["name"]), str(c["type"])) for c in raw["collections"]],
            indexes={str(coll): [_strip_comments(i) for i in defs] for coll, defs in raw["indexes"].items()},
            optional_indexes=optional,
            views=[_strip_comments(v) for v in raw["views"]],
            graphs=[_strip_comments(g) for g in raw["graphs"]],
            vector=spec,
            raw=raw,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ArangoConfigError(f"the ArangoDB schema file is malformed: {exc!r}") from exc


def _strip_comments(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k != "comment"}


# --- bootstrap (I/O) -------------------------------------------------------------------------------
@dataclass
class BootstrapReport:
    created: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def bootstrap(db: Any, schema: Schema, *, retention: bool = False) -> BootstrapReport:
    """Create what is missing; ``retention`` adds the TTL index on ``messages.expires_at``.

    ``db`` is a python-arango ``StandardDatabase`` of a user with Administrate access.
    """
    report = BootstrapReport()
    with translated("bootstrap"):
        _check_analyzers(db, schema, report)
        existing = {c["name"] for c in cast(list[dict[str, Any]], db.collections())}
        for name, kind in schema.collections:
            if name in existing:
                continue
            try:
                db.create_collection(name, edge=(kind == "edge"))
                report.created.append(f"collection {name}")
            except CollectionCreateError as exc:
                if not is_error(exc, DUPLICATE_NAME):
                    raise
        wanted = {coll: list(defs) for coll, defs in schema.indexes.items()}
        if retention and "message_retention" in schema.optional_indexes:
            coll, index = schema.optional_indexes["message_retention"]
            wanted.setdefault(coll, []).append(index)
        for coll, defs in wanted.items():
            _ensure_indexes(db, coll, defs, report)
        view_names = {v["name"] for v in cast(list[dict[str, Any]], db.views())}
        for view in schema.views:
            if view["name"] in view_names:
                continue
            try:
                db.create_view(view["name"], view["type"], view["properties"])
                report.created.append(f"view {view['name']}")
            except ViewCreateError as exc:
                if not is_error(exc, DUPLICATE_NAME):
                    raise
        for graph in schema.graphs:
            if db.has_graph(graph["name"]):
                _widen_graph(db.graph(graph["name"]), graph, report)
                continue
            try:
                db.create_graph(graph["name"], edge_definitions=graph["edge_definitions"])
                report.created.append(f"graph {graph['name']}")
            except GraphCreateError as exc:
                if not is_error(exc, GRAPH_DUPLICATE, DUPLICATE_NAME):
                    raise
    return report


def graph_changes(
    current: Sequence[Mapping[str, Any]], wanted: Sequence[Mapping[str, Any]]
) -> list[tuple[str, dict[str, Any]]]:
    """What an existing graph lacks: ``("create", def)`` for a missing edge definition,
    ``("replace", def)`` where an existing one allows fewer vertex collections than wanted (the
    replacement is the union, so an upgrade only ever widens what a graph accepts). Pure."""
    have = {str(d["edge_collection"]): d for d in current}
    out: list[tuple[str, dict[str, Any]]] = []
    for d in wanted:
        name = str(d["edge_collection"])
        old = have.get(name)
        if old is None:
            out.append(("create", dict(d)))
            continue
        merged = {
            "edge_collection": name,
            **{
                side: sorted({*old.get(side, []), *d.get(side, [])})
                for side in ("from_vertex_collections", "to_vertex_collections")
            },
        }
        if any(
            set(merged[side]) != set(old.get(side, [])) for side in ("from_vertex_collections", "to_vertex_collections")
        ):
            out.append(("replace", merged))
    return out


def _widen_graph(graph: Any, spec: Mapping[str, Any], report: BootstrapReport) -> None:
    """New edge kinds and vertex collections reach a graph an earlier vcm created."""
    current = cast(list[dict[str, Any]], graph.edge_definitions())
    for op, d in graph_changes(current, spec["edge_definitions"]):
        if op == "create":
            graph.create_edge_definition(d["edge_collection"], d["from_vertex_collections"], d["to_vertex_collections"])
        else:
            graph.replace_edge_definition(
                d["edge_collection"], d["from_vertex_collections"], d["to_vertex_collections"]
            )
        report.created.append(f"{op}d edge definition {d['edge_collection']} in graph {spec['name']}")


def _check_analyzers(db: Any, schema: Schema, report: BootstrapReport) -> None:
    present = {a.get("name"): a for a in cast(list[dict[str, Any]], db.analyzers())}
    for analyzer in schema.analyzers:
        name = analyzer["name"]
        found = present.get(name) or present.get(f"_system::{name}")
        if found is None:
            raise ArangoConfigError(f"the built-in analyzer {name!r} is missing; vcm needs ArangoDB 3.12")
        missing = set(analyzer.get("features", [])) - set(found.get("features", []))
        if missing:
            report.warnings.append(f"analyzer {name} lacks features {sorted(missing)}")


def _ensure_indexes(db: Any, collection: str, defs: Sequence[dict[str, Any]], report: BootstrapReport) -> None:
    col = db.collection(collection)
    have = {i.get("name") for i in cast(list[dict[str, Any]], col.indexes())}
    for definition in defs:
        if definition["name"] in have:
            continue
        try:
            col.add_index(dict(definition))
            report.created.append(f"index {collection}.{definition['name']}")
        except IndexCreateError:
            # A concurrent bootstrap may have created it; anything else is real.
            again = {i.get("name") for i in cast(list[dict[str, Any]], col.indexes())}
            if definition["name"] not in again:
                raise


# --- vector index lifecycle (I/O) -----------------------------------------------------------------
def vector_index_info(db: Any, spec: VectorIndexSpec, metric: Metric, dimension: int) -> dict[str, Any] | None:
    name = spec.name(metric, dimension)
    with translated("vector_index_info"):
        for index in cast(list[dict[str, Any]], db.collection(spec.collection).indexes()):
            if index.get("name") == name and index.get("type") == "vector":
                return index
    return None


def vector_state(info: Mapping[str, Any] | None) -> VectorState:
    """``ivf`` once the index exists and is usable; 3.12.9+ report ``trainingState``
    (``unusable`` | ``training`` | ``ingesting`` | ``ready``), older servers only list an index
    after training succeeded (reference §1.3)."""
    if info is None:
        return "exact"
    state = info.get("training_state", info.get("trainingState"))
    return "ivf" if state in (None, "ready") else "exact"


def index_n_lists(info: Mapping[str, Any] | None) -> int | None:
    params = (info or {}).get("params")
    if isinstance(params, Mapping) and isinstance(params.get("nLists"), int):
        return int(params["nLists"])
    return None


def create_vector_index(
    db: Any, spec: VectorIndexSpec, metric: Metric, dimension: int, n_vectors: int
) -> dict[str, Any]:
    """Create (and train) the index of one space. DDL: runs outside any transaction."""
    definition = spec.definition(metric, dimension, n_vectors)
    with translated("create_vector_index"):
        return cast(dict[str, Any], db.collection(spec.collection).add_index(definition))
