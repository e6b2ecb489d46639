"""A stand-in for arangod's user and database management on an AF_UNIX socket.

Not ArangoDB: it keeps databases, users (password, active) and grants in memory and answers the
HTTP endpoints python-arango 8 calls for them, with ArangoDB's status codes and error numbers:
Basic auth on every request (401, errorNum 11), root-only management in ``_system``, database
access for other users by their grant. Enough to run compose/arango_init.py end to end.

Like arangod under compose/arangod-uds, its socket has mode 0660 in a 0700 directory, and it has a
network namespace of its own: ``net_dir`` holds ``tcp``/``tcp6`` listener tables in /proc/net
format, empty until :meth:`FakeArangod.listen_tcp` adds a row (for the rollout guard).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import socketserver
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

Grant = tuple[str, str, str | None]  # (user, database, collection or None)


class FakeArangod:
    def __init__(self, root_password: str) -> None:
        self.databases = {"_system"}
        self.users: dict[str, dict[str, Any]] = {"root": {"passwd": root_password, "active": True}}
        self.grants: dict[Grant, str] = {}
        self.requests: list[tuple[str, str, str]] = []  # (method, path, user)
        self.ignore_grants = False  # a broken server: accepts grants without keeping them
        self.lock = threading.Lock()
        self.directory = tempfile.mkdtemp(prefix="vcm-init-")  # AF_UNIX paths must stay short
        self.socket_path = os.path.join(self.directory, "arangod.sock")
        self.net_dir = os.path.join(self.directory, "net")  # its network namespace's /proc/net
        self.tcp_listeners: list[tuple[str, int]] = []
        self._server: _Server | None = None
        os.mkdir(self.net_dir)
        self._write_net()

    def listen_tcp(self, address: str, port: int) -> None:
        """Pretend arangod listens on TCP ``address``:``port`` (a row in the listener tables)."""
        self.tcp_listeners.append((address, port))
        self._write_net()

    def _write_net(self) -> None:
        header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        rows: dict[int, list[str]] = {4: [], 6: []}
        for address, port in self.tcp_listeners:
            ip = ipaddress.ip_address(address)
            packed = ip.packed  # the kernel prints each 32-bit word in host byte order
            if sys.byteorder == "little":
                packed = b"".join(packed[i : i + 4][::-1] for i in range(0, len(packed), 4))
            words = packed.hex().upper()
            remote = "0" * len(words)
            n = len(rows[ip.version])
            rows[ip.version].append(
                f"{n:4}: {words}:{port:04X} {remote}:0000 0A 00000000:00000000 00:00000000 00000000 "
                f"{os.getuid():5} 0 {1000 + n} 1 0000000000000000 100 0 0 10 0\n"
            )
        for name, version in (("tcp", 4), ("tcp6", 6)):
            with open(os.path.join(self.net_dir, name), "w", encoding="ascii") as fh:
                fh.write(header + "".join(rows[version]))

    def start(self) -> None:
        self._server = _Server(self.socket_path, self)
        os.chmod(self.socket_path, 0o660)  # what compose/arangod-uds does to arangod's socket
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        Path(self.socket_path).unlink(missing_ok=True)
        for name in ("tcp", "tcp6"):
            Path(self.net_dir, name).unlink(missing_ok=True)
        os.rmdir(self.net_dir)
        os.rmdir(self.directory)

    def calls(self, method: str, path_pattern: str) -> int:
        return sum(1 for m, p, _ in self.requests if m == method and re.fullmatch(path_pattern, p))


def _error(status: int, num: int, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"error": True, "code": status, "errorNum": num, "errorMessage": message}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else {}
        fake = self.server.fake
        with fake.lock:
            status, reply = self._route(fake, body)
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _user(self, fake: FakeArangod) -> str | None:
        auth = self.headers.get("Authorization") or ""
        if not auth.startswith("Basic "):
            return None
        name, _, password = base64.b64decode(auth[6:]).decode().partition(":")
        user = fake.users.get(name)
        if user is None or not user["active"] or user["passwd"] != password:
            return None
        return name

    def _route(self, fake: FakeArangod, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        path = urlsplit(self.path).path
        match = re.fullmatch(r"/_db/([^/]+)(/_api/.*)", path)
        user = self._user(fake)
        fake.requests.append((self.command, path, user or "?"))
        if user is None:
            return _error(401, 11, "not authorized to execute this request")
        if not match:
            return _error(404, 404, "unknown path")
        db, api = unquote(match.group(1)), match.group(2)
        if db not in fake.databases:
            return _error(404, 1228, "database not found")
        if user != "root" and fake.grants.get((user, db, None), "none") == "none":
            return _error(401, 11, "not authorized to execute this request")
        if api == "/_api/collection" and self.command == "GET":
            return 200, {"error": False, "code": 200, "result": []}
        if user != "root" or db != "_system":
            return _error(403, 11, "forbidden")
        return self._manage(fake, api, body)

    def _manage(self, fake: FakeArangod, api: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        method = self.command
        if api == "/_api/database":
            if method == "GET":
                return 200, {"error": False, "code": 200, "result": sorted(fake.databases)}
            if method == "POST":
                if body["name"] in fake.databases:
                    return _error(409, 1207, "duplicate database name")
                fake.databases.add(body["name"])
                return 201, {"error": False, "code": 201, "result": True}
        if api == "/_api/user":
            if method == "GET":
                result = [{"user": n, "active": u["active"], "extra": {}} for n, u in fake.users.items()]
                return 200, {"error": False, "code": 200, "result": result}
            if method == "POST":
                if body["user"] in fake.users:
                    return _error(409, 1702, "duplicate user")
                fake.users[body["user"]] = {"passwd": body.get("passwd") or "", "active": body.get("active", True)}
                return 201, {"user": body["user"], "active": fake.users[body["user"]]["active"], "extra": {}}
        parts = api.removeprefix("/_api/user/").split("/")
        if api.startswith("/_api/user/") and parts[0] not in fake.users:
            return _error(404, 1703, "user not found")
        if api.startswith("/_api/user/") and len(parts) == 1 and method == "PATCH":
            user = fake.users[parts[0]]
            if "passwd" in body:
                user["passwd"] = body["passwd"]
            if "active" in body:
                user["active"] = body["active"]
            return 200, {"user": parts[0], "active": user["active"], "extra": {}}
        if api.startswith("/_api/user/") and len(parts) in (3, 4) and parts[1] == "database":
            name, db = parts[0], parts[2]
            collection = parts[3] if len(parts) == 4 else None
            if db not in fake.databases:
                return _error(404, 1228, "database not found")
            if method == "PUT":
                if not fake.ignore_grants:
                    fake.grants[(name, db, collection)] = body["grant"]
                return 200, {"error": False, "code": 200, db: body["grant"]}
            if method == "GET":
                return 200, {"error": False, "code": 200, "result": fake.grants.get((name, db, collection), "none")}
        return _error(404, 404, "unknown path")

    do_GET = _handle
    do_POST = _handle
    do_PUT = _handle
    do_PATCH = _handle
    do_DELETE = _handle


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, fake: FakeArangod) -> None:
        self.fake = fake
        super().__init__(path, _Handler)
