"""Startup guard: version and vector-index option checks (pure), and the probe's decisions."""

from __future__ import annotations

from typing import Any

import pytest

from vcm.errors import ErrorCode
from vcm.store.arango.errors import ArangoConfigError
from vcm.store.arango.guard import check_server, parse_version, run_guard, vector_option


def fatal(problems: list[Any]) -> list[str]:
    return [p.message for p in problems if p.fatal]


def test_parse_version() -> None:
    assert parse_version("3.12.4") == (3, 12, 4)
    assert parse_version("3.12.10-1") == (3, 12, 10)
    assert parse_version("3.13.0-devel") == (3, 13, 0)
    assert parse_version("v3.12.6") == (3, 12, 6)
    assert parse_version("devel") is None


@pytest.mark.parametrize("version", ["3.11.9", "3.12.0", "3.12.3", "2.8.11"])
def test_old_servers_are_refused(version: str) -> None:
    problems = check_server(version, {"vector-index": True})
    assert fatal(problems) and "3.12.4" in fatal(problems)[0]
    assert all(p.code == ErrorCode.CONFIG_ERROR for p in problems)


@pytest.mark.parametrize("version", ["3.12.4", "3.12.6", "3.12.10", "3.13.0", "4.0.0"])
def test_new_enough_servers_with_the_option_pass(version: str) -> None:
    assert fatal(check_server(version, {"vector-index": True})) == []
    assert fatal(check_server(version, {"experimental-vector-index": "true"})) == []


def test_option_off_is_refused_with_the_right_name_for_the_version() -> None:
    old = fatal(check_server("3.12.5", {"experimental-vector-index": False}))
    assert old and "--experimental-vector-index=true" in old[0]
    new = fatal(check_server("3.12.6", {"vector-index": False, "experimental-vector-index": False}))
    assert new and "--vector-index=true" in new[0]


def test_unknown_options_leave_the_decision_to_the_probe() -> None:
    assert fatal(check_server("3.12.6", None)) == []
    assert fatal(check_server("3.12.6", {})) == []
    assert fatal(check_server("3.12.6", {"server.endpoint": ["tcp://0.0.0.0:8529"]})) == []
    assert vector_option({"server.endpoint": "x"}) is None
    assert vector_option({"vector-index": 1}) is True
    assert vector_option({"experimental-vector-index": False, "vector-index": True}) is True


def test_pre_3_12_6_gets_a_non_fatal_sparse_warning() -> None:
    problems = check_server("3.12.4", {"experimental-vector-index": True})
    assert fatal(problems) == [] and any("sparse" in p.message for p in problems)
    assert check_server("3.12.7", {"vector-index": True}) == []


def test_unparsable_version_is_refused() -> None:
    assert fatal(check_server("nightly", {"vector-index": True}))


class FakeServer:
    def __init__(self, version: str, options: Any, *, index_ok: bool = True) -> None:
        self._version, self._options, self.index_ok = version, options, index_ok
        self.created: list[str] = []
        self.deleted: list[str] = []

    def version(self) -> str:
        return self._version

    def options(self) -> Any:
        if isinstance(self._options, Exception):
            raise self._options
        return self._options

    def create_collection(self, name: str) -> FakeServer:
        self.created.append(name)
        return self

    def insert_many(self, docs: list[Any]) -> None:
        pass

    def add_index(self, data: dict[str, Any]) -> dict[str, Any]:
        if not self.index_ok:
            from arango.exceptions import IndexCreateError
            from arango.request import Request
            from arango.response import Response

            resp = Response("post", "u", {}, 400, "Bad", "{}")
            resp.error_message = "vector index feature is not enabled"
            resp.error_code = 10
            raise IndexCreateError(resp, Request("post", "/_api/index"))
        return data

    def delete_collection(self, name: str, ignore_missing: bool = False) -> None:
        self.deleted.append(name)


def forbidden() -> Exception:
    from arango.exceptions import ServerCurrentOptionsGetError
    from arango.request import Request
    from arango.response import Response

    resp = Response("get", "u", {}, 403, "Forbidden", "{}")
    resp.error_code = 11
    return ServerCurrentOptionsGetError(resp, Request("get", "/_admin/options"))


def test_guard_uses_options_when_readable() -> None:
    server = FakeServer("3.12.6", {"vector-index": True})
    report = run_guard(server, server)
    assert report.vector_index is True and report.detected_by == "options" and server.created == []


def test_guard_probes_when_options_are_forbidden_and_cleans_up() -> None:
    server = FakeServer("3.12.6", forbidden())
    report = run_guard(server, server)
    assert report.detected_by == "probe" and report.vector_index is True
    assert server.created and server.deleted == server.created


def test_guard_refuses_when_the_probe_fails() -> None:
    server = FakeServer("3.12.6", forbidden(), index_ok=False)
    with pytest.raises(ArangoConfigError) as info:
        run_guard(server, server)
    assert "not enabled" in info.value.message and info.value.code == ErrorCode.CONFIG_ERROR
    assert server.deleted == server.created


def test_guard_trusts_an_existing_vector_index() -> None:
    server = FakeServer("3.12.6", forbidden(), index_ok=False)
    report = run_guard(server, server, has_vector_index=True)
    assert report.detected_by == "existing-index" and server.created == []


def test_guard_refuses_old_servers_without_probing() -> None:
    server = FakeServer("3.11.4", forbidden())
    with pytest.raises(ArangoConfigError):
        run_guard(server, server)
    assert server.created == []
