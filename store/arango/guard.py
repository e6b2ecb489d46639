"""Startup guard: refuse to run against an ArangoDB that cannot serve vcm.

vcm needs **3.12.4 or newer** (vector indexes and ``APPROX_NEAR_*`` arrived in 3.12.4) started
with the vector index feature on. The option is ``--experimental-vector-index`` on 3.12.4 and
3.12.5 and ``--vector-index`` from 3.12.6, where the old name stays an alias
(reference/arangodb.md §0, §1.1).

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
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Mapping
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
