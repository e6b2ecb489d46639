"""An in-memory FAKE of the python-arango surface ArangoStore uses (databases, collections, AQL
by shape, stream transactions as copy-on-commit snapshots), and driver errors as the server
sends them. Control flow only: it executes no AQL (tests/store/test_arango_adapter_fake.py says
what it can and cannot show). The ``world`` fixture over it is in tests/store/conftest.py."""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable
from typing import Any

from arango.exceptions import (
    DocumentDeleteError,
    DocumentInsertError,
    DocumentReplaceError,
    DocumentRevisionError,
)
from arango.request import Request
from arango.response import Response

from vcm.store.arango import names

_revs = itertools.count(1)


def server_error(cls: type[Exception], status: int, num: int, message: str, body: Any = None) -> Exception:
    resp = Response("post", "http://fake", {}, status, "error", json.dumps(body or {}))
    resp.body = body or {"error": True, "errorNum": num, "errorMessage": message}
    resp.error_code = num
    resp.error_message = message
    resp.is_success = False
    return cls(resp, Request("post", "/fake"))


Store = dict[str, dict[str, dict[str, Any]]]


class FakeCollection:
    def __init__(self, db: FakeDB, name: str) -> None:
        self.db, self.name = db, name

    @property
    def docs(self) -> dict[str, dict[str, Any]]:
        return self.db.data.setdefault(self.name, {})

    def _write(self) -> None:
        self.db.check_writable(self.name)

    def get(self, key: str) -> dict[str, Any] | None:
        found = self.docs.get(key)
        return copy.deepcopy(found) if found is not None else None

    def insert(self, doc: dict[str, Any], overwrite_mode: str | None = None, silent: bool = False) -> Any:
        self._write()
        key = doc["_key"]
        if key in self.docs:
            if overwrite_mode == "ignore":
                return {"_key": key, "_rev": self.docs[key]["_rev"]}
            if overwrite_mode != "replace":  # overwriteMode=replace: the new document replaces it
                raise server_error(DocumentInsertError, 409, 1210, "unique constraint violated")
        stored = {**copy.deepcopy(doc), "_id": f"{self.name}/{key}", "_rev": f"r{next(_revs)}"}
        self.docs[key] = stored
        return True if silent else {"_key": key, "_rev": stored["_rev"]}

    def replace(self, doc: dict[str, Any], check_rev: bool = True) -> Any:
        self._write()
        key = doc["_key"]
        current = self.docs.get(key)
        if current is None:
            raise server_error(DocumentReplaceError, 404, 1202, "document not found")
        if check_rev and "_rev" in doc and doc["_rev"] != current["_rev"]:
            raise server_error(DocumentRevisionError, 412, 1200, "conflict", {"_rev": current["_rev"]})
        stored = {**copy.deepcopy(doc), "_id": f"{self.name}/{key}", "_rev": f"r{next(_revs)}"}
        self.docs[key] = stored
        return {"_key": key, "_rev": stored["_rev"], "_old_rev": current["_rev"]}

    def delete(self, doc: dict[str, Any], check_rev: bool = True) -> Any:
        self._write()
        key = doc["_key"]
        current = self.docs.get(key)
        if current is None:
            raise server_error(DocumentDeleteError, 404, 1202, "document not found")
        if check_rev and doc.get("_rev") not in (None, current["_rev"]):
            raise server_error(DocumentRevisionError, 412, 1200, "conflict", {"_rev": current["_rev"]})
        del self.docs[key]
        return True

    def indexes(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.db.indexes.setdefault(self.name, []))

    def add_index(self, data: dict[str, Any]) -> dict[str, Any]:
        self.db.check_writable(self.name, ddl=True)
        self.db.indexes.setdefault(self.name, []).append(copy.deepcopy(data))
        return data


class FakeAql:
    def __init__(self, db: FakeDB) -> None:
        self.db = db

    def execute(self, query: str, bind_vars: dict[str, Any] | None = None, **_: Any) -> list[Any]:
        bind = bind_vars or {}
        self.db.queries.append((query, bind))
        if self.db.on_query is not None:
            canned = self.db.on_query(query, bind)
            if canned is not None:
                return canned
        if "INSERT" in query and "docs" in bind:
            col = self.db.collection(bind["@collection"])
            out = []
            for doc in bind["docs"]:
                doc = dict(doc)
                if "ingested_at" in query:
                    doc["ingested_at"] = 1
                existed = doc["_key"] in col.docs
                col.insert(doc, overwrite_mode="ignore")
                out.append(None if existed else doc["_key"])
            return out
        if query.startswith("FOR id IN @ids"):
            found = []
            for doc_id in bind["ids"]:
                coll, _, key = doc_id.partition("/")
                doc = self.db.data.get(coll, {}).get(key)
                if doc is not None and bind.get("agent_id", doc.get("agent_id")) == doc.get("agent_id"):
                    found.append(copy.deepcopy(doc))
            return found
        if 'm.kind == "vector_space"' in query:
            return [d for d in self.db.data.get(names.META, {}).values() if d.get("kind") == "vector_space"]
        if any(word in query for word in ("INSERT", "REMOVE", "REPLACE", "UPDATE")):
            self.db.check_writable("<aql>")
        return []


class FakeDB:
    """A python-arango StandardDatabase/TransactionDatabase look-alike over a shared dict."""

    def __init__(self, data: Store, *, read_only: bool = False, log: list[str] | None = None) -> None:
        self.data = data
        self.indexes: dict[str, list[dict[str, Any]]] = {}
        self.read_only = read_only
        self.aql = FakeAql(self)
        self.queries: list[tuple[str, dict[str, Any]]] = []
        self.on_query: Callable[[str, dict[str, Any]], list[Any] | None] | None = None
        self.log = log if log is not None else []
        self.declared: set[str] | None = None  # set inside a transaction

    def check_writable(self, collection: str, ddl: bool = False) -> None:
        if self.read_only:
            raise AssertionError(f"write to {collection} through the read-only handle")
        if self.declared is not None and collection != "<aql>" and collection not in self.declared:
            raise AssertionError(f"transaction writes {collection} without declaring it")

    def collection(self, name: str) -> FakeCollection:
        return FakeCollection(self, name)

    # bootstrap surface
    def collections(self) -> list[dict[str, Any]]:
        return [{"name": n} for n in self.data]

    def create_collection(self, name: str, edge: bool = False) -> None:
        self.check_writable(name, ddl=True)
        self.data.setdefault(name, {})

    def views(self) -> list[dict[str, Any]]:
        return []

    def create_view(self, name: str, view_type: str, properties: dict[str, Any]) -> None:
        self.log.append(f"view {name}")

    def has_graph(self, name: str) -> bool:
        return False

    def create_graph(self, name: str, edge_definitions: list[dict[str, Any]]) -> None:
        self.log.append(f"graph {name}")

    def analyzers(self) -> list[dict[str, Any]]:
        return [{"name": "text_en", "features": ["frequency", "norm", "position"]}]

    def version(self) -> str:
        return "3.12.6"

    def begin_transaction(self, write: list[str], read: list[str] | None = None, **options: Any) -> FakeTxn:
        if self.read_only:
            raise AssertionError("transaction through the read-only handle")
        txn = FakeTxn(self, read or [], write, options)
        self.log.append(f"begin {sorted(write)}")
        return txn


class FakeTxn(FakeDB):
    def __init__(self, parent: FakeDB, read: list[str], write: list[str], options: dict[str, Any]) -> None:
        super().__init__(copy.deepcopy(parent.data), log=parent.log)
        self.parent = parent
        self.read, self.write = read, write
        self.declared = set(write)
        self.options = options
        self.on_query = parent.on_query
        self.queries = parent.queries

    def commit_transaction(self) -> bool:
        for name in self.write:
            self.parent.data[name] = self.data.get(name, {})
        self.log.append("commit")
        return True

    def abort_transaction(self) -> bool:
        self.log.append("abort")
        return True
