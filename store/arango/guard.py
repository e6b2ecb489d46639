"""Startup guard: refuse to run against an ArangoDB that cannot serve vcm.

vcm needs **3.12.4 or newer** (vector indexes and ``APPROX_NEAR_*`` arrived in 3.12.4) started
with the vector index feature on. The option is ``--experimental-vector-index`` on 3.12.4 and
3.12.5 and ``--vector-index`` from 3.12.6, where the old name stays an alias
(docs/reference/arangodb.md §0, §1.1).

How the option is detected, in order:

1. ``GET /_db/_system/_admin/options`` (python-arango ``sys_db.options()``), which returns the
   effective startup options keyed by name without dashes (``"vector-index": true``). The
   endpoint answers only in ``_system`` and, by default (``--server.options-api=jwt``), only to
   a superuser JWT; with ``admin``/``public`` a basic-auth admin user may read it. If it
   answers, :func:`check_server` decides from it alone.
2. Otherwise (401/403/404, ``disabled``): if ``archival_docs`` already has a vector index, the
   feature is on (it cannot be turned off once used).
3. Otherwise a probe: create a scratch collection ``vcm_probe_<random>``, insert two 2-d
   vectors, create a ``vector`` index (``nLists: 1``) on them, and drop the collection again.
   Success means the feature is on; an index-creation error means it is off (the server's
   message is quoted). This needs the read-write user's Administrate grant, which bootstrap
   needs anyway.

:func:`check_server` is pure and unit-tested; :func:`run_guard` does the I/O.

**UDS-only rollout guard** (the design: ArangoDB binds only to its Unix socket). A deployment that
serves vcm over the socket must also not be reachable any other way:

* nothing listens on TCP port 8529 and no TCP listener belongs to arangod (the design's
  ``ss -lntp | grep -E ':8529|arangod'`` prints nothing). Where listeners cannot be attributed to
  a process (``/proc/net/tcp`` read from inside arangod's own network namespace, as the compose
  stack's ``arangodb-init`` job does), any TCP listener there is one;
* the socket is a socket of mode 0660 (or stricter, keeping its owner's read-write) owned by the
  uid that connects (10001 in the compose stack: arangod and the vcm image share it);
* its directory is mode 0700 (or stricter) and owned by that uid, so no other user reaches it.

:func:`check_uds_only` (and its parts :func:`parse_ss`, :func:`parse_proc_net_tcp`,
:func:`listener_problems`, :func:`ss_problems`, :func:`socket_problems`) is pure and unit-tested;
:func:`run_uds_guard` reads the listeners (``ss -lntp`` output it is given, or ``/proc/net/tcp*``)
and stats the socket. The compose stack runs it in ``compose/arango_init.py``, before it creates
anything.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import stat
import sys
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from arango.exceptions import ArangoServerError, IndexCreateError

from vcm.errors import ErrorCode
from vcm.store.arango.errors import ArangoConfigError, translated

MIN_VERSION = (3, 12, 4)
RENAMED_OPTION_VERSION = (3, 12, 6)  # --vector-index; --experimental-vector-index before
VECTOR_OPTIONS = ("vector-index", "experimental-vector-index")

_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class Problem:
    code: ErrorCode
    message: str
    fatal: bool = True


@dataclass
class GuardReport:
    version: str
    vector_index: bool | None  # None: not determined
    detected_by: str  # "options" | "existing-index" | "probe" | "skipped"
    problems: list[Problem] = field(default_factory=list)

    @property
    def fatal(self) -> list[Problem]:
        return [p for p in self.problems if p.fatal]


def parse_version(version: str) -> tuple[int, int, int] | None:
    """``"3.12.6"``, ``"3.12.10-1"``, ``"3.13.0-devel"`` -> numeric triple; None if unparsable."""
    match = _VERSION.match(version or "")
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


def vector_option(options: Mapping[str, Any] | None) -> bool | None:
    """The vector index option from ``/_admin/options``; None when it says nothing."""
    if not options:
        return None
    seen = [options[name] for name in VECTOR_OPTIONS if name in options]
    if not seen:
        return None
    return any(_truthy(value) for value in seen)


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return False


def option_hint(version: tuple[int, int, int] | None) -> str:
    if version is not None and version < RENAMED_OPTION_VERSION:
        return "start arangod with --experimental-vector-index=true (3.12.4-3.12.5 name)"
    return "start arangod with --vector-index=true (3.12.6+; --experimental-vector-index=true is the older alias)"


def check_server(version: str, options: Mapping[str, Any] | None) -> list[Problem]:
    """Problems with a server of ``version`` whose startup ``options`` are known (or None/{}).

    Unknown options produce no problem here: the caller then probes (see module docstring).
    """
    problems: list[Problem] = []
    parsed = parse_version(version)
    if parsed is None:
        problems.append(Problem(ErrorCode.CONFIG_ERROR, f"cannot parse the ArangoDB version {version!r}"))
    elif parsed < MIN_VERSION:
        problems.append(
            Problem(
                ErrorCode.CONFIG_ERROR,
                f"ArangoDB {version} is too old: vcm needs 3.12.4 or newer (vector index, "
                "APPROX_NEAR_COSINE/L2); upgrade the server",
            )
        )
    enabled = vector_option(options)
    if enabled is False:
        problems.append(
            Problem(
                ErrorCode.CONFIG_ERROR,
                f"the ArangoDB vector index feature is off; {option_hint(parsed)}",
            )
        )
    if parsed is not None and MIN_VERSION <= parsed < RENAMED_OPTION_VERSION:
        problems.append(
            Problem(
                ErrorCode.CONFIG_ERROR,
                f"ArangoDB {version} predates 3.12.6: sparse vector indexes are not supported, "
                "so the vector index can only be built while every archival document of a "
                "space carries its embedding; searches stay exact until then",
                fatal=False,
            )
        )
    return problems


# --- I/O ----------------------------------------------------------------------------------------------
def read_options(sys_db: Any) -> Mapping[str, Any] | None:
    """``GET /_admin/options`` or None when this user may not read it (401/403/404)."""
    with translated("guard.options"):
        try:
            options = sys_db.options()
        except ArangoServerError:
            return None
    return options if isinstance(options, Mapping) else None


def probe_vector_index(db: Any) -> tuple[bool, str]:
    """Create a throwaway vector index; (enabled, server message on failure)."""
    name = f"vcm_probe_{uuid.uuid4().hex[:12]}"
    with translated("guard.probe"):
        col = db.create_collection(name)
    try:
        with translated("guard.probe"):
            col.insert_many([{"v": [1.0, 0.0]}, {"v": [0.0, 1.0]}])
        try:
            col.add_index(
                {
                    "name": "probe",
                    "type": "vector",
                    "fields": ["v"],
                    "params": {"metric": "l2", "dimension": 2, "nLists": 1, "trainingIterations": 1},
                }
            )
        except IndexCreateError as exc:
            return False, str(getattr(exc, "error_message", None) or exc)
        return True, ""
    finally:
        # A leftover probe collection is harmless; never mask the real outcome.
        with contextlib.suppress(ArangoServerError):
            db.delete_collection(name, ignore_missing=True)


def run_guard(db: Any, sys_db: Any | None, *, has_vector_index: bool = False, probe: bool = True) -> GuardReport:
    """Check the server; raise :class:`ArangoConfigError` listing every fatal problem."""
    with translated("guard.version"):
        version = str(db.version())
    options = read_options(sys_db) if sys_db is not None else None
    problems = check_server(version, options)
    parsed = parse_version(version)
    enabled = vector_option(options)
    detected = "options"
    if enabled is None:
        if has_vector_index:
            enabled, detected = True, "existing-index"
        elif probe and parsed is not None and parsed >= MIN_VERSION:
            enabled, message = probe_vector_index(db)
            detected = "probe"
            if not enabled:
                problems.append(
                    Problem(
                        ErrorCode.CONFIG_ERROR,
                        "creating a vector index failed, so the vector index feature is off "
                        f"or unusable ({message}); {option_hint(parsed)}",
                    )
                )
        else:
            detected = "skipped"
    report = GuardReport(version, enabled, detected, problems)
    if report.fatal:
        raise ArangoConfigError(
            "ArangoDB cannot serve vcm: " + "; ".join(p.message for p in report.fatal),
            version=version,
            detected_by=detected,
        )
    return report


# --- UDS-only rollout guard (pure) ---------------------------------------------------------------------
ARANGO_TCP_PORT = 8529
ARANGOD_PROCESS = "arangod"
SOCKET_MODE = 0o660  # the most a socket may grant: read-write for its owner and group
SOCKET_DIR_MODE = 0o700  # the most its directory may grant: its owner only
# The design's check, for lines of `ss` output that do not parse as a listener.
_GREP_PATTERN = re.compile(rf":{ARANGO_TCP_PORT}|{ARANGOD_PROCESS}")
_SS_PROCESS = re.compile(r'\("([^"]*)",pid=')
_TCP_NETIDS = {"tcp", "tcp6", "mptcp"}
_PROC_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket: local address and port, and the processes holding it if known."""

    address: str  # as printed: "127.0.0.1", "[::]", "*", "0.0.0.0%lo"
    port: int | None  # None when not numeric ("*")
    processes: tuple[str, ...] = ()  # process names (`ss -p`); empty when not known
    line: str = ""  # the line it was parsed from

    def describe(self) -> str:
        where = f"{self.address}:{'*' if self.port is None else self.port}"
        return f"{where} ({', '.join(self.processes)})" if self.processes else where


@dataclass(frozen=True)
class FileStat:
    """What the guard needs of a path's ``stat``: type and permission bits, owner."""

    mode: int  # st_mode: file type and permission bits
    uid: int
    gid: int = 0

    @classmethod
    def of(cls, result: os.stat_result) -> FileStat:
        return cls(result.st_mode, result.st_uid, result.st_gid)

    @property
    def permissions(self) -> int:
        return stat.S_IMODE(self.mode)


def _split_address(local: str) -> tuple[str, int | None]:
    host, sep, port = local.rpartition(":")
    if not sep:
        return local, None
    return host, int(port) if port.isdigit() else None


def parse_ss(text: str) -> tuple[list[Listener], list[str]]:
    """``ss -lntp`` (also ``-ltn``, ``-Hlntp``, ``-lnp`` with its Netid column) -> TCP listeners.

    Returns the listeners and the lines that did not parse as one (headers and blank lines are
    neither). Rows are ``State Recv-Q Send-Q Local:Port Peer:Port [Process]``; ``users:(("arangod",
    pid=1,fd=12),...)`` in the last column gives the process names.
    """
    listeners: list[Listener] = []
    unparsed: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        fields = line.split()
        if fields[0] in ("State", "Netid"):
            continue
        if fields[0].lower() in _TCP_NETIDS:
            fields = fields[1:]
        elif fields[0].lower() in ("udp", "raw", "u_str", "u_seq", "u_dgr", "nl", "p_raw", "p_dgr", "sctp", "v_str"):
            continue  # not TCP (`ss -lnp` lists every family)
        if len(fields) < 5 or not fields[1].isdigit() or not fields[2].isdigit():
            unparsed.append(line)
            continue
        if fields[0] != "LISTEN":
            continue
        address, port = _split_address(fields[3])
        processes = tuple(_SS_PROCESS.findall(" ".join(fields[5:])))
        listeners.append(Listener(address, port, processes, line))
    return listeners, unparsed


def _proc_address(hex_address: str) -> str:
    """``0100007F`` -> ``127.0.0.1``; 32 hex digits -> an IPv6 address. The kernel prints each
    32-bit word of the address in host byte order."""
    raw = bytes.fromhex(hex_address)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(raw)
    return str(address) if address.version == 4 else f"[{address}]"


def parse_proc_net_tcp(text: str) -> list[Listener]:
    """``/proc/net/tcp`` or ``/proc/net/tcp6`` -> the listening sockets (state ``0A``)."""
    listeners: list[Listener] = []
    for raw in text.splitlines()[1:]:
        fields = raw.split()
        if len(fields) < 4 or fields[3] != _PROC_LISTEN:
            continue
        hex_address, _, hex_port = fields[1].partition(":")
        listeners.append(Listener(_proc_address(hex_address), int(hex_port, 16), (), raw.strip()))
    return listeners


def listener_problems(
    listeners: Iterable[Listener],
    *,
    unparsed: Iterable[str] = (),
    any_listener: bool = False,
    port: int = ARANGO_TCP_PORT,
    process: str = ARANGOD_PROCESS,
) -> list[Problem]:
    """TCP listeners that break UDS-only: on ``port``, or held by ``process`` (a substring, like
    the design's grep). ``any_listener``: every listener counts (a network namespace of arangod's
    own, where listeners cannot be attributed). ``unparsed`` lines count when the design's pattern
    matches them."""
    hint = "arangod must listen on its Unix socket only (no tcp:// or ssl:// --server.endpoint)"
    problems: list[Problem] = []
    for listener in listeners:
        if any_listener:
            why = "a TCP listener in arangod's network namespace"
        elif listener.port == port:
            why = f"a TCP listener on port {port}"
        elif any(process in name for name in listener.processes):
            why = f"{process} listens on TCP"
        else:
            continue
        problems.append(Problem(ErrorCode.CONFIG_ERROR, f"{why}: {listener.describe()}; {hint}"))
    for line in unparsed:
        if _GREP_PATTERN.search(line):
            problems.append(Problem(ErrorCode.CONFIG_ERROR, f"listener line mentions {process} or :{port}: {line!r}"))
    return problems


def ss_problems(text: str) -> list[Problem]:
    """The violations in ``ss -lntp`` output: the design's ``grep -E ':8529|arangod'``, per listener."""
    listeners, unparsed = parse_ss(text)
    return listener_problems(listeners, unparsed=unparsed)


def socket_problems(path: str, socket: FileStat | None, directory: FileStat | None, *, uid: int) -> list[Problem]:
    """The socket at ``path`` and its directory, stat-ed, against the UDS-only rules for ``uid``
    (the user that connects; it must own both)."""
    problems: list[Problem] = []

    def add(message: str) -> None:
        problems.append(Problem(ErrorCode.CONFIG_ERROR, message))

    parent = os.path.dirname(path) or "."
    if directory is None:
        add(f"socket directory {parent} does not exist")
    elif not stat.S_ISDIR(directory.mode):
        add(f"{parent} is not a directory")
    else:
        perms = directory.permissions
        if perms & ~SOCKET_DIR_MODE or not perms & stat.S_IXUSR:
            add(f"socket directory {parent} has mode {perms:04o}; it must be {SOCKET_DIR_MODE:04o}")
        if directory.uid != uid:
            add(f"socket directory {parent} belongs to uid {directory.uid}; it must belong to uid {uid}")
    if socket is None:
        add(f"no socket at {path}")
        return problems
    if not stat.S_ISSOCK(socket.mode):
        add(f"{path} is not a Unix socket")
        return problems
    perms = socket.permissions
    if perms & ~SOCKET_MODE or perms & 0o600 != 0o600:
        add(f"socket {path} has mode {perms:04o}; it must be {SOCKET_MODE:04o}")
    if socket.uid != uid:
        add(f"socket {path} belongs to uid {socket.uid}; it must belong to uid {uid}, the user that connects")
    return problems


def check_uds_only(
    listeners: str | Iterable[Listener],
    path: str,
    socket: FileStat | None,
    directory: FileStat | None,
    *,
    uid: int,
    any_listener: bool = False,
) -> list[Problem]:
    """Every rollout-guard violation, listeners first, then the socket and its directory.

    ``listeners``: ``ss -lntp`` output, or parsed listeners (``any_listener``: all of them count,
    as in arangod's own network namespace). ``socket``/``directory``: their stat, None if missing.
    """
    if isinstance(listeners, str):
        found = ss_problems(listeners)
    else:
        found = listener_problems(listeners, any_listener=any_listener)
    return found + socket_problems(path, socket, directory, uid=uid)


# --- UDS-only rollout guard (I/O) ----------------------------------------------------------------------
def read_proc_listeners(net_dir: str = "/proc/net") -> list[Listener]:
    """The TCP listeners of this process's network namespace. ``tcp`` must be readable; ``tcp6``
    may be missing (IPv6 off)."""
    with open(os.path.join(net_dir, "tcp"), encoding="ascii") as fh:
        listeners = parse_proc_net_tcp(fh.read())
    with contextlib.suppress(FileNotFoundError), open(os.path.join(net_dir, "tcp6"), encoding="ascii") as fh:
        listeners += parse_proc_net_tcp(fh.read())
    return listeners


def _stat(path: str, *, follow: bool) -> FileStat | None:
    try:
        return FileStat.of(os.stat(path) if follow else os.lstat(path))
    except FileNotFoundError:
        return None


def run_uds_guard(
    socket_path: str,
    *,
    uid: int | None = None,
    net_dir: str = "/proc/net",
    ss_output: str | None = None,
) -> list[Problem]:
    """The rollout guard's violations, empty when the deployment is UDS-only.

    Listeners come from ``ss_output`` (``ss -lntp``) when given, else from ``net_dir`` (then
    every listener counts: run it inside arangod's network namespace). ``uid`` defaults to this
    process's: the user that must be able to connect.
    """
    uid = os.getuid() if uid is None else uid
    problems: list[Problem] = []
    if ss_output is not None:
        problems += ss_problems(ss_output)
    else:
        try:
            problems += listener_problems(read_proc_listeners(net_dir), any_listener=True)
        except OSError as exc:
            problems.append(Problem(ErrorCode.CONFIG_ERROR, f"cannot read the TCP listeners in {net_dir}: {exc}"))
    try:
        socket = _stat(socket_path, follow=False)  # a symlink is not the socket
        directory = _stat(os.path.dirname(socket_path) or ".", follow=True)
    except OSError as exc:
        problems.append(Problem(ErrorCode.CONFIG_ERROR, f"cannot stat {socket_path}: {exc}"))
        return problems
    return problems + socket_problems(socket_path, socket, directory, uid=uid)
