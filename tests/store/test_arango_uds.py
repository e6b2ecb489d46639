"""The Unix-socket transport, against a tiny fake HTTP/1.1 server on an AF_UNIX socket.

Not arangod: the server answers the few endpoints python-arango calls here with canned JSON.
What it proves is the transport: requests reach the socket with Basic auth and the right path,
keep-alive connections are reused across threads, and python-arango parses the replies.
"""

from __future__ import annotations

import base64
import json
import os
import socketserver
import tempfile
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, cast

import pytest

from vcm.errors import StoreUnavailable
from vcm.store.arango.client import UNIX_HOST, connect, parse_url
from vcm.store.arango.errors import ArangoConfigError


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as python-arango's pooled sessions expect
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # AF_UNIX has no client address
        pass

    def _reply(self, status: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append(
            {
                "method": self.command,
                "path": self.path,
                "auth": self.headers.get("Authorization"),
                "body": body,
            }
        )
        auth = self.headers.get("Authorization") or ""
        expected = "Basic " + base64.b64encode(b"vcm:s3cret").decode()
        readonly = "Basic " + base64.b64encode(b"reader:r").decode()
        if auth not in (expected, readonly):
            self._reply(401, {"error": True, "code": 401, "errorNum": 11, "errorMessage": "not authorized"})
            return
        if self.path.startswith("/_db/vcm/_api/version"):
            self._reply(200, {"server": "arango", "version": "3.12.6", "license": "community"})
        elif self.path.startswith("/_db/vcm/_api/collection"):
            self._reply(200, {"error": False, "code": 200, "result": []})
        elif self.path.startswith("/_db/vcm/_api/cursor"):
            query = json.loads(body)
            self._reply(
                201,
                {"error": False, "code": 201, "result": [query["bindVars"]["x"] * 2], "hasMore": False},
            )
        else:
            self._reply(404, {"error": True, "code": 404, "errorNum": 404, "errorMessage": "unknown path"})

    do_GET = _handle
    do_POST = _handle
    do_PUT = _handle
    do_DELETE = _handle


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str) -> None:
        self.seen: list[dict[str, Any]] = []
        super().__init__(path, _Handler)


@pytest.fixture
def server() -> Iterator[_Server]:
    # AF_UNIX paths are limited to ~107 bytes; pytest's tmp_path can be longer.
    directory = tempfile.mkdtemp(prefix="vcm-uds-")
    path = os.path.join(directory, "arangod.sock")
    srv = _Server(path)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        Path(path).unlink(missing_ok=True)
        os.rmdir(directory)


def test_requests_travel_over_the_socket_with_basic_auth(server: _Server) -> None:
    conn = connect(f"arango+unix://{server.server_address}/vcm", username="vcm", password="s3cret")
    try:
        assert conn.rw.version() == "3.12.6"
        bind: dict[str, Any] = {"x": 21}
        rows = list(cast(Iterable[Any], conn.rw.aql.execute("RETURN @x * 2", bind_vars=bind)))
        assert rows == [42]
    finally:
        conn.close()
    seen = server.seen
    expected = "Basic " + base64.b64encode(b"vcm:s3cret").decode()
    assert {r["auth"] for r in seen} == {expected}
    paths = [r["path"] for r in seen]
    assert paths[0].startswith("/_db/vcm/_api/collection")  # the verify ping
    assert any(p.startswith("/_db/vcm/_api/version") for p in paths)
    cursor = next(r for r in seen if r["path"].startswith("/_db/vcm/_api/cursor"))
    assert json.loads(cursor["body"])["query"] == "RETURN @x * 2"


def test_read_only_and_read_write_handles_use_their_own_credentials(server: _Server) -> None:
    conn = connect(
        f"arango+unix://{server.server_address}?database=vcm",
        username="vcm",
        password="s3cret",
        ro_username="reader",
        ro_password="r",
    )
    try:
        conn.ro.version()
        conn.rw.version()
    finally:
        conn.close()
    auths = [r["auth"] for r in server.seen if "/_api/version" in r["path"]]
    assert auths == [
        "Basic " + base64.b64encode(b"reader:r").decode(),
        "Basic " + base64.b64encode(b"vcm:s3cret").decode(),
    ]


def test_wrong_password_is_a_store_error(server: _Server) -> None:
    with pytest.raises(StoreUnavailable) as info:
        connect(f"arango+unix://{server.server_address}/vcm", username="vcm", password="wrong")
    assert info.value.details["http_status"] == 401


def test_concurrent_requests_share_the_pool(server: _Server) -> None:
    conn = connect(f"arango+unix://{server.server_address}/vcm", username="vcm", password="s3cret")
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            versions = list(pool.map(lambda _: conn.rw.version(), range(64)))
    finally:
        conn.close()
    assert versions == ["3.12.6"] * 64


def test_missing_socket_is_unavailable() -> None:
    with pytest.raises(StoreUnavailable):
        connect("arango+unix:///nonexistent/dir/arangod.sock/vcm", username="u", password="p", connect_timeout=0.5)


def test_url_parsing() -> None:
    t = parse_url("arango+unix:///run/arangodb/arangod.sock/memory")
    assert (t.scheme, t.socket_path, t.database, t.host_url) == (
        "unix",
        "/run/arangodb/arangod.sock",
        "memory",
        UNIX_HOST,
    )
    t = parse_url("arango+unix:///run/arangodb/arangod.sock")
    assert t.socket_path == "/run/arangodb/arangod.sock" and t.database is None
    t = parse_url("arango+unix:///run/arangodb/sock?db=x")
    assert t.socket_path == "/run/arangodb/sock" and t.database == "x"
    t = parse_url("arango+http://u%40x:p%3Aw@db.internal:8530/vcm")
    assert (t.host_url, t.database, t.username, t.password) == (
        "http://db.internal:8530",
        "vcm",
        "u@x",
        "p:w",
    )
    t = parse_url("arango+https://db.example")
    assert t.host_url == "https://db.example:8529" and t.database is None
    assert parse_url("arango+http://[::1]:8529/").host_url == "http://[::1]:8529"
    for bad in ("http://x/vcm", "arango+http:///vcm", "arango+unix://", "arango+http://h/a/b"):
        with pytest.raises(ArangoConfigError):
            parse_url(bad)


def test_credentials_are_required() -> None:
    with pytest.raises(ArangoConfigError):
        connect("arango+http://localhost:1/vcm")
