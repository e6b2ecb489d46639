"""Bootstrap ArangoDB for the compose stack: the vcm database and its two users.

Run once per ``docker compose up`` by the ``arangodb-init`` service (``compose/start-init``), from
the vcm image, over the Unix socket, as ``root``. It uses vcm's own connection code
(:mod:`vcm.store.arango.client`), so it reaches the server exactly as the API and workers will.

Environment::

    VCM_STORE_URL         arango+unix://<rw user>:<rw password>@/run/arangodb/arangod.sock/<database>
                          (the URL the app uses: socket, database and read-write credentials)
    ARANGO_ROOT_PASSWORD  root's password (the arangodb image sets it when its volume is new)
    ARANGO_RW_USER        the user vcm writes with, default vcm_rw
    ARANGO_RW_PASSWORD
    ARANGO_RO_USER        the read-only user, default vcm_ro
    ARANGO_RO_PASSWORD
    ARANGO_INIT_WAIT_S    how long to retry while the server is not answering, default 60
    ARANGO_INIT_NET_DIR   where the TCP listener tables are, default /proc/net (a test seam)

What it does, each step idempotent (so it runs on every start, and a password changed in ``.env``
takes effect at the next ``up``):

0. once the server answers on the socket, the UDS-only rollout guard
   (:func:`vcm.store.arango.guard.run_uds_guard`): no TCP listener in this network namespace, which
   compose makes arangod's (``network_mode: service:arangodb``), and the socket mode 0660 in a
   0700 directory, both owned by this process's uid (10001, arangod's too). Any violation stops
   the job before it creates anything;
1. create the database if it is missing;
2. create each user, or reset its password to the environment's value, and activate it;
3. grant the read-write user ``rw`` on the database (Administrate: vcm's bootstrap creates the
   collections, indexes, views and graph) and ``rw`` on its collections; the read-only user
   ``ro`` on both; neither user gets access to ``_system``;
4. read the grants back, and log in as both users to prove the passwords work.

Exit status: 0 done, 1 the server refused (credentials, grants), 2 bad configuration, 3 the
rollout guard found the stack not UDS-only. Passwords are never printed.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from arango.exceptions import DatabaseCreateError

from vcm.errors import StoreUnavailable, VcmError
from vcm.store.arango.client import Connection, connect, parse_url
from vcm.store.arango.errors import DUPLICATE_NAME, ArangoConfigError, is_error, translated
from vcm.store.arango.guard import run_uds_guard

ROOT_USER = "root"
SYSTEM_DATABASE = "_system"
DEFAULT_WAIT_S = 60.0
DEFAULT_NET_DIR = "/proc/net"


class InitConfigError(Exception):
    """The environment does not describe a usable setup; the message says what to fix."""


@dataclass(frozen=True)
class User:
    name: str
    password: str
    grant: str  # "rw" | "ro": on the database and (default) on all its collections


@dataclass(frozen=True)
class InitConfig:
    socket_url: str  # arango+unix:///path/arangod.sock, without credentials or database
    socket_path: str
    database: str
    root_password: str
    rw: User
    ro: User
    wait_s: float = DEFAULT_WAIT_S
    net_dir: str = DEFAULT_NET_DIR  # the listener tables the rollout guard reads


PLACEHOLDER = "change-me"  # the .env.example values: never deploy them


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value:
        raise InitConfigError(f"{name} is not set (see .env.example)")
    if name.endswith("PASSWORD") and PLACEHOLDER in value:
        raise InitConfigError(f"{name} still holds the .env.example placeholder; generate one (openssl rand -hex 24)")
    return value


def config_from_env(env: Mapping[str, str]) -> InitConfig:
    """Read and cross-check the environment; raise :class:`InitConfigError` naming the variable."""
    url = _required(env, "VCM_STORE_URL")
    try:
        target = parse_url(url)
    except ArangoConfigError as exc:
        raise InitConfigError(f"VCM_STORE_URL: {exc.message}") from None
    if target.socket_path is None:
        raise InitConfigError("VCM_STORE_URL must be an arango+unix:// URL (the stack reaches ArangoDB by its socket)")
    database = target.database or ""
    if not database or database == SYSTEM_DATABASE:
        raise InitConfigError("VCM_STORE_URL must name the database after the socket path, e.g. .../arangod.sock/vcm")
    rw = User(env.get("ARANGO_RW_USER") or "vcm_rw", _required(env, "ARANGO_RW_PASSWORD"), "rw")
    ro = User(env.get("ARANGO_RO_USER") or "vcm_ro", _required(env, "ARANGO_RO_PASSWORD"), "ro")
    if ROOT_USER in (rw.name, ro.name):
        raise InitConfigError("ARANGO_RW_USER and ARANGO_RO_USER must not be root")
    if rw.name == ro.name:
        raise InitConfigError("ARANGO_RW_USER and ARANGO_RO_USER must be two different users")
    # The app logs in with the credentials inside VCM_STORE_URL: they must be the read-write user's.
    # A password with URL syntax in it (@ / : ? #) would not survive the URL: use a hex password.
    if (target.username, target.password) != (rw.name, rw.password):
        raise InitConfigError(
            "VCM_STORE_URL does not carry ARANGO_RW_USER / ARANGO_RW_PASSWORD as its credentials; "
            "use URL-safe passwords (e.g. `openssl rand -hex 24`)"
        )
    try:
        wait_s = float(env.get("ARANGO_INIT_WAIT_S") or DEFAULT_WAIT_S)
    except ValueError:
        raise InitConfigError("ARANGO_INIT_WAIT_S must be a number of seconds") from None
    return InitConfig(
        socket_url=f"arango+unix://{target.socket_path}",
        socket_path=target.socket_path,
        database=database,
        root_password=_required(env, "ARANGO_ROOT_PASSWORD"),
        rw=rw,
        ro=ro,
        wait_s=wait_s,
        net_dir=env.get("ARANGO_INIT_NET_DIR") or DEFAULT_NET_DIR,
    )


def connect_root(
    cfg: InitConfig, *, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic
) -> Connection:
    """Root's handle on ``_system``, retried while the server does not answer (not on 401)."""
    deadline = clock() + cfg.wait_s
    while True:
        try:
            return connect(cfg.socket_url, username=ROOT_USER, password=cfg.root_password, database=SYSTEM_DATABASE)
        except StoreUnavailable as exc:
            if exc.details.get("http_status") in (401, 403) or clock() >= deadline:
                raise
            log(f"ArangoDB not answering yet ({exc.message}); retrying")
            sleep(1.0)


def rollout_guard(cfg: InitConfig) -> list[str]:
    """Step 0: the UDS-only rollout guard's violations (empty: UDS only)."""
    return [p.message for p in run_uds_guard(cfg.socket_path, net_dir=cfg.net_dir)]


def bootstrap(sys_db: Any, cfg: InitConfig) -> list[str]:
    """Steps 1-3 on root's ``_system`` handle; returns what was done, one line per step."""
    done: list[str] = []
    with translated("init.database"):
        if sys_db.has_database(cfg.database):
            done.append(f"database {cfg.database}: exists")
        else:
            try:
                sys_db.create_database(cfg.database)
                done.append(f"database {cfg.database}: created")
            except DatabaseCreateError as exc:
                if not is_error(exc, DUPLICATE_NAME):  # created concurrently: fine
                    raise
                done.append(f"database {cfg.database}: exists")
    for user in (cfg.rw, cfg.ro):
        with translated("init.user"):
            if sys_db.has_user(user.name):
                sys_db.update_user(user.name, password=user.password, active=True)
                done.append(f"user {user.name}: password reset")
            else:
                sys_db.create_user(user.name, password=user.password, active=True)
                done.append(f"user {user.name}: created")
            sys_db.update_permission(user.name, user.grant, cfg.database)
            sys_db.update_permission(user.name, user.grant, cfg.database, collection="*")
            done.append(f"user {user.name}: {user.grant} on {cfg.database} and its collections")
    return done


def verify(conn: Connection, cfg: InitConfig) -> None:
    """Step 4: the grants read back as set, and both users can log in to the database."""
    sys_db = conn.rw
    for user in (cfg.rw, cfg.ro):
        with translated("init.verify"):
            got = sys_db.permission(user.name, cfg.database)
        if got != user.grant:
            raise StoreUnavailable(f"user {user.name} has {got!r} on {cfg.database}, expected {user.grant!r}")
    check = connect(
        cfg.socket_url,
        username=cfg.rw.name,
        password=cfg.rw.password,
        ro_username=cfg.ro.name,
        ro_password=cfg.ro.password,
        database=cfg.database,
    )
    check.close()


def log(message: str) -> None:
    print(f"arango-init: {message}", file=sys.stderr, flush=True)


def main(env: Mapping[str, str] | None = None) -> int:
    try:
        cfg = config_from_env(os.environ if env is None else env)
    except InitConfigError as exc:
        log(f"configuration error: {exc}")
        return 2
    try:
        conn = connect_root(cfg)
    except VcmError as exc:
        hint = ""
        if exc.details.get("http_status") == 401:
            hint = " (ARANGO_ROOT_PASSWORD is applied only when the arango_data volume is first created)"
        log(f"cannot log in as root: {exc.message}{hint}")
        return 1
    try:
        violations = rollout_guard(cfg)
        for line in violations:
            log(f"rollout guard: {line}")
        if violations:
            log("refusing to set up a stack that is not UDS-only")
            return 3
        log(f"rollout guard: ok (no TCP listener; {cfg.socket_path} and its directory private to uid {os.getuid()})")
        for line in bootstrap(conn.rw, cfg):
            log(line)
        verify(conn, cfg)
    except VcmError as exc:
        log(f"failed: {exc.message}")
        return 1
    finally:
        conn.close()
    log(f"ok: {cfg.database} ready for {cfg.rw.name} (rw) and {cfg.ro.name} (ro)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
