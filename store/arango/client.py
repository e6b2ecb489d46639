"""Connections to ArangoDB: URL parsing, the Unix-socket HTTP client, read-only/read-write handles.

URLs (auth is always on; credentials come from keyword arguments or the URL's userinfo)::

    arango+http://[user:pass@]host[:8529][/database]
    arango+https://[user:pass@]host[:8529][/database]
    arango+unix:///run/arangodb/arangod.sock[/database]      (or ?database=name)

python-arango has no Unix-socket transport (issue arangodb/python-arango#297): it builds request
URLs as ``f"{host}/_db/{db}{endpoint}"`` and hands them to an :class:`~arango.http.HTTPClient`.
:class:`UnixSocketHTTPClient` is such a client whose requests session sends every request over
one ``AF_UNIX`` socket path with a plain urllib3 connection pool (variant B of
docs/reference/arangodb.md §5.2, no extra dependency). The host part of the URL is then only a label.

Two database handles are opened: ``ro`` with the read-only user for every read, ``rw`` with the
read-write user for writes and DDL. Without read-only credentials both use the read-write user.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from arango.client import ArangoClient
from arango.database import StandardDatabase
from arango.exceptions import DatabaseCreateError, ServerConnectionError
from arango.http import DefaultHTTPClient, HTTPClient
from arango.response import Response
from requests import Session
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection
from urllib3.connectionpool import HTTPConnectionPool

from vcm.store.arango.errors import (
    DATABASE_NOT_FOUND,
    DUPLICATE_NAME,
    ArangoConfigError,
    http_status,
    is_error,
    translated,
)

DEFAULT_DATABASE = "vcm"
DEFAULT_PORT = 8529
UNIX_HOST = "http://arangodb.sock"  # label only: the socket path decides where requests go


@dataclass(frozen=True)
class Target:
    """Where and how to connect, parsed from a store URL."""

    scheme: str  # "http" | "https" | "unix"
    host_url: str  # what python-arango prefixes to every request path
    socket_path: str | None
    database: str | None
    username: str | None
    password: str | None


def parse_url(url: str) -> Target:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    transport = {"arango": "http", "arango+http": "http", "arango+https": "https", "arango+unix": "unix"}.get(scheme)
    if transport is None:
        raise ArangoConfigError(
            f"unsupported ArangoDB URL scheme {parts.scheme!r}; use arango+http://, arango+https:// or arango+unix://"
        )
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    query_db = _query_database(parts.query)
    if transport == "unix":
        socket_path, path_db = _split_socket_path(unquote(parts.path))
        if not socket_path:
            raise ArangoConfigError("arango+unix:// needs a socket path, e.g. arango+unix:///run/arangodb/arangod.sock")
        return Target("unix", UNIX_HOST, socket_path, query_db or path_db, username, password)
    if not parts.hostname:
        raise ArangoConfigError(f"the ArangoDB URL {url!r} has no host")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    port = parts.port or DEFAULT_PORT
    path_db = unquote(parts.path.strip("/")) or None
    if path_db is not None and "/" in path_db:
        raise ArangoConfigError(f"the ArangoDB URL path must be just the database name, got {path_db!r}")
    return Target(transport, f"{transport}://{host}:{port}", None, query_db or path_db, username, password)


def _query_database(query: str) -> str | None:
    values = parse_qs(query)
    for name in ("database", "db"):
        if values.get(name):
            return values[name][0]
    return None


def _split_socket_path(path: str) -> tuple[str, str | None]:
    """``/run/arangodb/arangod.sock/vcm`` -> (``/run/arangodb/arangod.sock``, ``vcm``).

    The socket is the path up to the last segment ending in ``.sock``; one segment after it is
    the database. Without a ``.sock`` segment the whole path is the socket.
    """
    segments = path.split("/")
    for i in range(len(segments) - 1, -1, -1):
        if segments[i].endswith(".sock"):
            rest = [s for s in segments[i + 1 :] if s]
            if len(rest) > 1:
                raise ArangoConfigError(f"cannot tell the socket from the database in {path!r}")
            return "/".join(segments[: i + 1]), (rest[0] if rest else None)
    return path.rstrip("/"), None


# --- Unix domain socket transport ---------------------------------------------------------------
class _UnixConnection(HTTPConnection):
    def __init__(self, socket_path: str, *, timeout: Any = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self._socket_path = socket_path

    def _new_conn(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if isinstance(self.timeout, int | float):
            sock.settimeout(self.timeout)
        try:
            sock.connect(self._socket_path)
        except OSError:
            sock.close()
            raise
        return sock


class _UnixPool(HTTPConnectionPool):
    def __init__(self, socket_path: str, *, maxsize: int, timeout: float | None) -> None:
        super().__init__("localhost", maxsize=maxsize, timeout=timeout)
        self._socket_path = socket_path

    def _new_conn(self) -> HTTPConnection:
        self.num_connections += 1
        return _UnixConnection(self._socket_path, timeout=self.timeout.connect_timeout)


class _UnixAdapter(HTTPAdapter):
    def __init__(self, socket_path: str, *, pool_maxsize: int, connect_timeout: float | None) -> None:
        self._pool = _UnixPool(socket_path, maxsize=pool_maxsize, timeout=connect_timeout)
        super().__init__()

    # requests >= 2.32 asks for a pool per request; older versions use get_connection.
    def get_connection_with_tls_context(
        self, request: Any, verify: Any, proxies: Any = None, cert: Any = None
    ) -> HTTPConnectionPool:
        return self._pool

    def get_connection(self, url: Any, proxies: Any = None) -> HTTPConnectionPool:
        return self._pool

    def request_url(self, request: Any, proxies: Any) -> str:
        return str(request.path_url)

    def close(self) -> None:
        self._pool.close()
        super().close()


def _send(
    session: Session,
    timeout: Any,
    method: str,
    url: str,
    headers: MutableMapping[str, str] | None,
    params: MutableMapping[str, str] | None,
    data: Any,
    auth: tuple[str, str] | None,
) -> Response:
    r = session.request(method=method, url=url, params=params, data=data, headers=headers, auth=auth, timeout=timeout)
    return Response(
        method=method,
        url=r.url,
        headers=r.headers,
        status_code=r.status_code,
        status_text=r.reason,
        raw_body=r.text,
    )


class UnixSocketHTTPClient(HTTPClient):
    """python-arango HTTP client that talks HTTP/1.1 over a Unix domain socket."""

    def __init__(
        self,
        socket_path: str,
        *,
        request_timeout: float | None = 60.0,
        connect_timeout: float | None = 5.0,
        pool_maxsize: int = 10,
    ) -> None:
        self.socket_path = socket_path
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.pool_maxsize = pool_maxsize

    def create_session(self, host: str) -> Session:
        session = Session()
        adapter = _UnixAdapter(self.socket_path, pool_maxsize=self.pool_maxsize, connect_timeout=self.connect_timeout)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session

    def send_request(
        self,
        session: Session,
        method: str,
        url: str,
        headers: MutableMapping[str, str] | None = None,
        params: MutableMapping[str, str] | None = None,
        data: Any = None,
        auth: tuple[str, str] | None = None,
    ) -> Response:
        timeout = (self.connect_timeout, self.request_timeout)
        return _send(session, timeout, method, url, headers, params, data, auth)


class TimeoutHTTPClient(DefaultHTTPClient):
    """python-arango's default TCP client with separate connect and read timeouts."""

    def __init__(self, *, request_timeout: float | None, connect_timeout: float | None, **kw: Any) -> None:
        super().__init__(request_timeout=request_timeout, **kw)
        self.connect_timeout = connect_timeout

    def send_request(
        self,
        session: Session,
        method: str,
        url: str,
        headers: MutableMapping[str, str] | None = None,
        params: MutableMapping[str, str] | None = None,
        data: Any = None,
        auth: tuple[str, str] | None = None,
    ) -> Response:
        timeout = (self.connect_timeout, self.request_timeout)
        return _send(session, timeout, method, url, headers, params, data, auth)


# --- connections ------------------------------------------------------------------------------------
@dataclass
class Connection:
    client: ArangoClient
    database: str
    rw: StandardDatabase
    ro: StandardDatabase
    username: str
    password: str  # kept to open _system for create_database / the options read
    endpoint: str = ""  # the server's TCP URL or socket path, for logs and per-server caches

    def system(self) -> StandardDatabase:
        return self.client.db("_system", username=self.username, password=self.password)

    def close(self) -> None:
        self.client.close()


def make_http_client(
    target: Target, *, request_timeout: float | None, connect_timeout: float | None, pool_maxsize: int
) -> HTTPClient:
    if target.socket_path is not None:
        return UnixSocketHTTPClient(
            target.socket_path,
            request_timeout=request_timeout,
            connect_timeout=connect_timeout,
            pool_maxsize=pool_maxsize,
        )
    return TimeoutHTTPClient(
        request_timeout=request_timeout,
        connect_timeout=connect_timeout,
        pool_connections=pool_maxsize,
        pool_maxsize=pool_maxsize,
    )


def connect(
    url: str,
    *,
    username: str | None = None,
    password: str | None = None,
    ro_username: str | None = None,
    ro_password: str | None = None,
    database: str | None = None,
    request_timeout: float | None = 60.0,
    connect_timeout: float | None = 5.0,
    pool_maxsize: int = 10,
    create_database: bool = False,
    verify: bool = True,
    uds_only: bool = False,
    client_factory: Callable[..., ArangoClient] | None = None,
) -> Connection:
    """Open read-write and read-only handles.

    With ``create_database`` a missing database is created through ``_system`` (the read-write
    user then needs access to ``_system``); only attempted when opening the database fails.
    ``uds_only`` refuses any URL but ``arango+unix://`` before a connection is tried.
    ``client_factory`` builds the python-arango client (tests pass a fake).
    """
    target = parse_url(url)
    if uds_only and target.socket_path is None:
        raise ArangoConfigError(
            f"store.uds_only is set but the store URL uses {target.scheme} ({target.host_url}); use "
            "arango+unix:///path/to/arangod.sock, or unset VCM_STORE__UDS_ONLY for a TCP deployment",
            setting="store.uds_only",
        )
    user = username if username is not None else target.username
    secret = password if password is not None else target.password
    if not user:
        raise ArangoConfigError(
            "ArangoDB needs credentials (auth is always on): pass username/password or put them in the URL"
        )
    secret = secret or ""
    name = database or target.database or DEFAULT_DATABASE
    http = make_http_client(
        target, request_timeout=request_timeout, connect_timeout=connect_timeout, pool_maxsize=pool_maxsize
    )
    client = (client_factory or ArangoClient)(hosts=target.host_url, http_client=http, request_timeout=request_timeout)
    try:
        with translated("connect"):
            try:
                rw = client.db(name, username=user, password=secret, verify=verify)
            except ServerConnectionError as exc:
                # A missing database answers 404/1228 to a superuser and 401 to others.
                if not (create_database and (is_error(exc, DATABASE_NOT_FOUND) or http_status(exc) == 401)):
                    raise
                sys_db = client.db("_system", username=user, password=secret, verify=True)
                if sys_db.has_database(name):
                    raise
                _create_database(sys_db, name)
                rw = client.db(name, username=user, password=secret, verify=verify)
            ro = client.db(name, username=ro_username, password=ro_password or "", verify=verify) if ro_username else rw
    except BaseException:
        client.close()
        raise
    endpoint = target.socket_path or target.host_url
    return Connection(client, name, rw, ro, user, secret, endpoint)


def _create_database(sys_db: StandardDatabase, name: str) -> None:
    try:
        sys_db.create_database(name)
    except DatabaseCreateError as exc:
        if not is_error(exc, DUPLICATE_NAME):  # created concurrently: fine
            raise
