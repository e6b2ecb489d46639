"""The store contract suite runs once per adapter: ``store`` is parametrised over
``embedded`` (always) and ``arango`` (when ``VCM_TEST_ARANGO_URL`` names a test server).
``world`` is an ArangoStore over the in-memory fake of python-arango (the fake-driver tests)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.store.factories import FaultSwitch
from vcm.store.embedded import EmbeddedStore
from vcm.store.port import MemoryStore

if TYPE_CHECKING:
    from tests.store.fake_arango import FakeDB
    from vcm.store.arango.adapter import ArangoStore

ARANGO_URL_ENV = "VCM_TEST_ARANGO_URL"
ARANGO_SKIP_REASON = "VCM_TEST_ARANGO_URL not set: ArangoDB contract leg skipped"


@pytest.fixture
def faults() -> FaultSwitch:
    return FaultSwitch()


def _embedded(tmp_path: Path, faults: FaultSwitch) -> MemoryStore:
    # A low training threshold would make small tests approximate; the IVF switch has its
    # own embedded-only tests, so contract tests keep exact search.
    return EmbeddedStore(str(tmp_path / "vcm.db"), fault_hook=faults)


def _arango(faults: FaultSwitch) -> MemoryStore:
    url = os.environ.get(ARANGO_URL_ENV)
    if not url:
        pytest.skip(ARANGO_SKIP_REASON)
    from vcm.store.arango.adapter import ArangoStore

    store: MemoryStore = ArangoStore.from_url(
        url,
        username=os.environ.get("VCM_TEST_ARANGO_USER", "root"),
        password=os.environ.get("VCM_TEST_ARANGO_PASSWORD", ""),
        database=f"vcm_test_{uuid.uuid4().hex[:16]}",
        fault_hook=faults,
    )
    return store


@pytest.fixture(params=["embedded", pytest.param("arango", marks=pytest.mark.arango)])
def store(request: pytest.FixtureRequest, tmp_path: Path, faults: FaultSwitch) -> Iterator[MemoryStore]:
    adapter = _embedded(tmp_path, faults) if request.param == "embedded" else _arango(faults)
    try:
        yield adapter
    finally:
        faults.armed.clear()
        adapter.close()


@pytest.fixture
def world() -> tuple[ArangoStore, FakeDB, FaultSwitch]:
    """An ArangoStore over the in-memory fake (tests/store/fake_arango.py): the store, its
    read-write fake database, and the fault switch."""
    from tests.store.fake_arango import FakeDB
    from tests.store.fake_arango import Store as FakeStore
    from vcm.store.arango.adapter import ArangoStore
    from vcm.store.arango.client import Connection

    data: FakeStore = {}
    log: list[str] = []
    rw = FakeDB(data, log=log)
    ro = FakeDB(data, read_only=True, log=log)
    ro.indexes = rw.indexes
    conn = Connection(client=None, database="vcm", rw=rw, ro=ro, username="u", password="p")  # type: ignore[arg-type]
    faults = FaultSwitch()
    store = ArangoStore(conn, guard=False, fault_hook=faults, clock=lambda: 1000.0)
    log.clear()
    return store, rw, faults
