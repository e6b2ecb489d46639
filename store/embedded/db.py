"""SQLite connections and transactions for the embedded store.

One connection per thread (sqlite3 connections must not be shared while in use) and per
process (a connection inherited through fork is unusable). Writers take ``BEGIN IMMEDIATE`` so
the write lock is held from the first read of a read-check-write sequence: that, plus WAL and a
busy timeout, is what makes optimistic-locking checks safe across threads and processes.
Every sqlite3 error leaves this module as :class:`~vcm.errors.StoreUnavailable`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from vcm.errors import StoreUnavailable, VcmError
from vcm.store.embedded.schema import CONNECTION_PRAGMAS, ensure_schema

T = TypeVar("T")

# Below SQLite's smallest default limit on bound parameters (999 before 3.32).
IN_CHUNK = 900


class Database:
    def __init__(self, path: str, *, busy_timeout_s: float) -> None:
        self.path = path
        self._busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._closed = False
        with self.guard("open the database"):
            ensure_schema(self.conn())

    def conn(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreUnavailable("the store is closed; open a new EmbeddedStore")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            return conn
        conn = sqlite3.connect(
            self.path,
            timeout=self._busy_timeout_s,
            isolation_level=None,  # we issue BEGIN/COMMIT ourselves
            check_same_thread=False,  # only so close() may close it from another thread
        )
        conn.row_factory = sqlite3.Row
        for pragma in CONNECTION_PRAGMAS:
            conn.execute(pragma)
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
        self._local.conn = conn
        self._local.pid = os.getpid()
        with self._all_lock:
            self._all.append(conn)
        return conn

    @contextlib.contextmanager
    def guard(self, action: str) -> Iterator[None]:
        """Map sqlite3 errors to StoreUnavailable with an actionable message."""
        try:
            yield
        except VcmError:
            raise
        except sqlite3.Error as exc:
            hint = (
                "another writer held the database longer than the busy timeout; retry"
                if "locked" in str(exc) or "busy" in str(exc)
                else "check the database file and disk"
            )
            raise StoreUnavailable(f"could not {action}: {exc}; {hint}", path=self.path) from exc

    @contextlib.contextmanager
    def write(self, action: str) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed on success, rolled back on any exception."""
        with self.guard(action):
            conn = self.conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                # SQLite may already have rolled back (e.g. disk full); a second ROLLBACK
                # would raise and hide the original error.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextlib.contextmanager
    def read(self, action: str) -> Iterator[sqlite3.Connection]:
        """A read snapshot: every statement inside sees the same committed state."""
        with self.guard(action):
            conn = self.conn()
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    def query(self, action: str, sql: str, params: Any = ()) -> list[sqlite3.Row]:
        with self.guard(action):
            return list(self.conn().execute(sql, params).fetchall())

    def close(self) -> None:
        self._closed = True
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()


def meta_get(conn: sqlite3.Connection, key: str) -> str:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    if row is None:
        raise StoreUnavailable(f"database meta row {key!r} is missing; the file is damaged")
    return str(row[0])


def meta_int(conn: sqlite3.Connection, key: str) -> int:
    return int(meta_get(conn, key))


def meta_set(conn: sqlite3.Connection, key: str, value: str | int) -> None:
    conn.execute("UPDATE meta SET value = ? WHERE key = ?", (str(value), key))


def meta_add(conn: sqlite3.Connection, key: str, delta: int) -> int:
    row = conn.execute(
        "UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE key = ? RETURNING value",
        (delta, key),
    ).fetchone()
    return int(row[0])


def chunked(items: Sequence[T], size: int = IN_CHUNK) -> list[list[T]]:
    """Slices for ``IN (...)`` lists that stay under SQLite's bound-parameter limit."""
    return [list(items[i : i + size]) for i in range(0, len(items), size)]
