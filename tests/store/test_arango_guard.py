"""Startup guard: version and vector-index option checks (pure), and the probe's decisions; the
UDS-only rollout guard on sample `ss -lntp` output, /proc/net/tcp tables and stat results."""

from __future__ import annotations

import os
import socket as socketlib
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vcm.errors import ErrorCode
from vcm.store.arango.errors import ArangoConfigError
from vcm.store.arango.guard import (
    FileStat,
    check_server,
    check_uds_only,
    listener_problems,
    parse_proc_net_tcp,
    parse_ss,
    parse_version,
    run_guard,
    run_uds_guard,
    socket_problems,
    ss_problems,
    vector_option,
)


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


# --- UDS-only rollout guard -------------------------------------------------------------------------
SS_HEADER = "State  Recv-Q Send-Q Local Address:Port  Peer Address:Port Process"
SS_TCP_8529 = f"""{SS_HEADER}
LISTEN 0      4096   127.0.0.1:8529      0.0.0.0:*         users:(("arangod",pid=1,fd=12))
LISTEN 0      128    0.0.0.0:22          0.0.0.0:*         users:(("sshd",pid=611,fd=3))
"""
SS_OTHER_PORTS = f"""{SS_HEADER}
LISTEN 0      128    0.0.0.0:22          0.0.0.0:*         users:(("sshd",pid=611,fd=3))
LISTEN 0      511    127.0.0.1:6379      0.0.0.0:*         users:(("redis-server",pid=88,fd=6))
LISTEN 0      4096   [::]:8000           [::]:*            users:(("uvicorn",pid=90,fd=7))
LISTEN 0      100    127.0.0.1:85290     0.0.0.0:*
"""
SOCK = "/run/arangodb/arangod.sock"
UID = 10001


def sock(mode: int, uid: int = UID) -> FileStat:
    return FileStat(stat.S_IFSOCK | mode, uid, 0)


def dir_(mode: int, uid: int = UID) -> FileStat:
    return FileStat(stat.S_IFDIR | mode, uid, uid)


def messages(problems: list[Any]) -> list[str]:
    assert all(p.fatal and p.code == ErrorCode.CONFIG_ERROR for p in problems)
    return [p.message for p in problems]


def test_ss_listening_on_8529_is_a_violation() -> None:
    listeners, unparsed = parse_ss(SS_TCP_8529)
    assert unparsed == []
    assert [(x.address, x.port, x.processes) for x in listeners] == [
        ("127.0.0.1", 8529, ("arangod",)),
        ("0.0.0.0", 22, ("sshd",)),
    ]
    found = messages(listener_problems(listeners, unparsed=unparsed))
    assert len(found) == 1 and "port 8529" in found[0] and "127.0.0.1:8529 (arangod)" in found[0]


def test_ss_with_arangod_on_another_port_or_without_process_names_is_a_violation() -> None:
    other_port = f"""{SS_HEADER}
LISTEN 0      4096   0.0.0.0:8530        0.0.0.0:*         users:(("arangod",pid=1,fd=12))
"""
    found = messages(ss_problems(other_port))
    assert len(found) == 1 and "arangod listens on TCP" in found[0]
    no_processes = "LISTEN 0 4096 [::]:8529 [::]:*\n"  # `ss -ltnH` without -p, or not root
    found = messages(ss_problems(no_processes))
    assert len(found) == 1 and "[::]:8529" in found[0]


def test_ss_listening_on_other_ports_only_passes() -> None:
    listeners, unparsed = parse_ss(SS_OTHER_PORTS)
    assert {x.port for x in listeners} == {22, 6379, 8000, 85290}  # :85290 would fool `grep :8529`
    assert listener_problems(listeners, unparsed=unparsed) == []


@pytest.mark.parametrize("text", ["", "\n", SS_HEADER + "\n"])
def test_empty_ss_output_passes(text: str) -> None:
    assert parse_ss(text) == ([], [])
    assert ss_problems(text) == []
    assert check_uds_only(text, SOCK, sock(0o660), dir_(0o700), uid=UID) == []


def test_ss_with_a_netid_column_keeps_tcp_only() -> None:
    text = """Netid State  Recv-Q Send-Q Local Address:Port Peer Address:Port Process
udp   UNCONN 0      0      0.0.0.0:8529       0.0.0.0:*
tcp   LISTEN 0      4096   [::ffff:127.0.0.1]:8529 *:* users:(("arangod",pid=1,fd=12),("arangod",pid=1,fd=13))
"""
    listeners, unparsed = parse_ss(text)
    assert [(x.address, x.port, x.processes) for x in listeners] == [
        ("[::ffff:127.0.0.1]", 8529, ("arangod", "arangod"))
    ]
    assert len(listener_problems(listeners, unparsed=unparsed)) == 1


def test_unparsable_ss_lines_fall_back_to_the_designs_grep() -> None:
    listeners, unparsed = parse_ss("garbage mentioning arangod\nmore garbage\n")
    assert listeners == [] and len(unparsed) == 2
    found = messages(listener_problems(listeners, unparsed=unparsed))
    assert len(found) == 1 and "garbage mentioning arangod" in found[0]


PROC_NET_TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2151 00000000:0000 0A 00000000:00000000 00:00000000 00000000 10001        0 12345 1 0 100 0 0 10 0
   1: 0100007F:2151 0100007F:C35A 01 00000000:00000000 00:00000000 00000000 10001        0 12346 1 0 20 4 30 10 -1
"""
PROC_NET_TCP6 = """  sl  local_address                         remote_address                        st tx_queue
   0: 00000000000000000000000000000000:1F40 00000000000000000000000000000000:0000 0A 00000000:00000000
"""


def test_proc_net_tcp_listeners_are_read_and_any_counts_in_arangods_namespace() -> None:
    if sys.byteorder != "little":
        pytest.skip("sample tables are little-endian")
    v4 = parse_proc_net_tcp(PROC_NET_TCP)  # the established row (st 01) is not a listener
    v6 = parse_proc_net_tcp(PROC_NET_TCP6)
    assert [(x.address, x.port) for x in v4 + v6] == [("127.0.0.1", 8529), ("[::]", 8000)]
    assert len(listener_problems(v6)) == 0  # port 8000, no process: fine for `ss`-style rules
    assert len(listener_problems(v6, any_listener=True)) == 1  # but not in arangod's namespace
    assert len(check_uds_only(v4, SOCK, sock(0o660), dir_(0o700), uid=UID, any_listener=True)) == 1
    assert parse_proc_net_tcp(PROC_NET_TCP.splitlines()[0]) == []


def test_a_0660_socket_in_a_0700_directory_owned_by_the_connecting_uid_passes() -> None:
    assert socket_problems(SOCK, sock(0o660), dir_(0o700), uid=UID) == []
    assert socket_problems(SOCK, sock(0o600), dir_(0o700), uid=UID) == []  # stricter is fine
    assert check_uds_only(SS_OTHER_PORTS, SOCK, sock(0o660), dir_(0o700), uid=UID) == []


@pytest.mark.parametrize(
    ("socket", "directory", "expected"),
    [
        (sock(0o755), dir_(0o700), "socket /run/arangodb/arangod.sock has mode 0755; it must be 0660"),
        (sock(0o777), dir_(0o700), "has mode 0777"),
        (sock(0o666), dir_(0o700), "has mode 0666"),
        (sock(0o440), dir_(0o700), "has mode 0440"),  # its owner could not connect
        (sock(0o660), dir_(0o755), "socket directory /run/arangodb has mode 0755; it must be 0700"),
        (sock(0o660), dir_(0o750), "has mode 0750"),
        (sock(0o660, uid=0), dir_(0o700), "belongs to uid 0; it must belong to uid 10001"),
        (sock(0o660), dir_(0o700, uid=999), "socket directory /run/arangodb belongs to uid 999"),
        (FileStat(stat.S_IFREG | 0o660, UID), dir_(0o700), "is not a Unix socket"),
        (None, dir_(0o700), "no socket at /run/arangodb/arangod.sock"),
        (None, None, "socket directory /run/arangodb does not exist"),
        (sock(0o660), FileStat(stat.S_IFREG | 0o700, UID), "/run/arangodb is not a directory"),
    ],
)
def test_socket_and_directory_violations(socket: FileStat | None, directory: FileStat | None, expected: str) -> None:
    found = messages(socket_problems(SOCK, socket, directory, uid=UID))
    assert any(expected in m for m in found), found


def test_check_uds_only_reports_listeners_and_the_socket_together() -> None:
    found = messages(check_uds_only(SS_TCP_8529, SOCK, sock(0o755), dir_(0o755), uid=UID))
    assert len(found) == 3
    assert "8529" in found[0] and "0755; it must be 0700" in found[1] and "0755; it must be 0660" in found[2]


@pytest.fixture
def real_socket() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="vcm-guard-"))  # AF_UNIX paths must stay short
    path = directory / "arangod.sock"
    server = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
    server.bind(str(path))
    try:
        yield path
    finally:
        server.close()
        path.unlink(missing_ok=True)
        directory.rmdir()


def test_run_uds_guard_stats_a_real_socket_and_reads_ss_output(real_socket: Path) -> None:
    os.chmod(real_socket, 0o660)
    os.chmod(real_socket.parent, 0o700)
    assert run_uds_guard(str(real_socket), ss_output=SS_OTHER_PORTS) == []
    os.chmod(real_socket, 0o755)
    found = messages(run_uds_guard(str(real_socket), ss_output=SS_TCP_8529))
    assert len(found) == 2 and "8529" in found[0] and "mode 0755" in found[1]
    found = messages(run_uds_guard(str(real_socket), uid=os.getuid() + 1, ss_output=""))
    assert sum("must belong to uid" in m for m in found) == 2


def test_run_uds_guard_reads_listener_tables_and_refuses_a_symlink(real_socket: Path, tmp_path: Path) -> None:
    os.chmod(real_socket, 0o660)
    os.chmod(real_socket.parent, 0o700)
    (tmp_path / "tcp").write_text(PROC_NET_TCP.splitlines()[0] + "\n")  # no listener; no tcp6 (IPv6 off)
    assert run_uds_guard(str(real_socket), net_dir=str(tmp_path)) == []
    (tmp_path / "tcp6").write_text(PROC_NET_TCP6)
    assert len(run_uds_guard(str(real_socket), net_dir=str(tmp_path))) == 1
    found = messages(run_uds_guard(str(real_socket), net_dir=str(tmp_path / "missing")))
    assert len(found) == 1 and "cannot read the TCP listeners" in found[0]
    link = real_socket.parent / "link.sock"
    link.symlink_to(real_socket)
    try:
        found = messages(run_uds_guard(str(link), ss_output=""))
        assert found == [f"{link} is not a Unix socket"]
    finally:
        link.unlink()
