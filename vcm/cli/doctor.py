"""``vcm doctor``: is every dependency of this process reachable and safely configured?

Each check reports (name, ok, detail) and never raises, so one run lists every problem; secrets
in the details are redacted before printing.
"""

from __future__ import annotations

import argparse
from typing import Any

from vcm.settings import Settings, get_settings


def doctor_checks(settings: Settings, *, strict: bool) -> list[tuple[str, bool, str]]:
    """(check, ok, detail) for each dependency; used by ``vcm doctor``."""
    results: list[tuple[str, bool, str]] = []

    def check(name: str, fn: Any) -> None:
        try:
            detail = fn()
            results.append((name, True, str(detail)))
        except Exception as exc:  # a doctor reports every failure, whatever its type
            results.append((name, False, f"{type(exc).__name__}: {exc}"))

    from vcm.hotpath.connection import connect

    check(
        "redis",
        lambda: "embedded fakeredis" if not settings.redis_url else f"PING {connect(settings.redis_url).ping()}",
    )

    def broker() -> str:
        if settings.broker_url.startswith("memory://"):
            return "memory:// (in-process worker)"
        from kombu.connection import Connection

        with Connection(settings.broker_url, connect_timeout=3) as conn:  # type: ignore[no-untyped-call]
            conn.ensure_connection(max_retries=1)
        return settings.broker_url.split("@")[-1]

    check("broker", broker)

    guard: list[tuple[str, bool, str]] = []

    def store() -> str:
        from vcm.workers.runtime import open_configured_store

        s = open_configured_store(settings)
        try:
            h = s.health()
            if not h.ok:
                raise RuntimeError(f"unhealthy: {dict(h.details)}")
            report = getattr(s, "guard_report", None)
            if report is not None:
                guard.append(("arango guard", True, guard_summary(report)))
            return f"{h.backend} ok"
        finally:
            s.close()

    check("store", store)
    results += maintenance_checks(settings)
    if settings.store_url.startswith("arango") and not guard:
        # The adapter runs the guard when it opens; a refused server fails the store check with
        # the guard's own message.
        guard.append(("arango guard", False, "not run: the store did not open (see the store check)"))
    results += guard

    def model() -> str:
        from vcm.tasks.embedding import get_embedder

        e = get_embedder(settings.embedding)
        return f"{e.model_id} dim={e.dimension} max_tokens={e.max_tokens}"

    check("embedding model", model)
    results.append(chunking_check(settings, strict=strict))
    if settings.store_url.startswith("arango"):
        results.append(transport_check(settings, strict=strict))
        results.append(users_check(settings, strict=strict))
    secrets = secret_values(settings)
    return [(name, ok, redact(detail, secrets)) for name, ok, detail in results]


def job_interval_s(settings: Settings, job: str) -> float:
    """How often beat runs ``job`` (0: it does not)."""
    return {
        "expire": settings.maintenance.expire_interval_s,
        "sweep": settings.maintenance.sweep_interval_s,
        "consolidate": settings.facts.consolidate_interval_s,
        "snapshot": settings.durability.snapshot_interval_s,
    }.get(job, 0.0)


def maintenance_checks(settings: Settings, now: float | None = None) -> list[tuple[str, bool, str]]:
    """When each maintenance job last ran, from the store's audit rows (this process shares
    nothing else with the server in embedded mode). Informational: a job that never ran is not a
    failure (a fresh install), but one overdue says so."""
    import time
    from datetime import UTC, datetime

    from vcm.service.maintenance import IDLE_RECORD_S, last_runs
    from vcm.workers.runtime import open_configured_store

    now = time.time() if now is None else now
    try:
        s = open_configured_store(settings)
    except Exception as exc:  # the store check reports why
        return [("maintenance", False, f"not read: {type(exc).__name__}: {exc}")]
    try:
        runs = last_runs(s, now)
    except Exception as exc:
        return [("maintenance", False, f"not read: {type(exc).__name__}: {exc}")]
    finally:
        s.close()
    found: list[tuple[str, bool, str]] = []
    for run in runs:
        interval = job_interval_s(settings, run.job)
        every = f"every {interval:g}s" if interval > 0 else "not scheduled"
        if run.at is None:
            found.append((f"maintenance {run.job}", True, f"no run recorded ({every})"))
            continue
        stamp = datetime.fromtimestamp(run.at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        age = max(0.0, now - run.at)
        overdue = interval > 0 and age > 2 * interval + IDLE_RECORD_S
        counts = ", ".join(f"{k}={v}" for k, v in run.outcome.items() if k not in ("job", "outcome", "trigger"))
        detail = f"last ran {stamp} ({age:.0f}s ago, {run.outcome.get('trigger', '?')}; {every}): {counts}"
        found.append((f"maintenance {run.job}", True, detail + ("; OVERDUE: is a beat running?" if overdue else "")))
    return found


def chunking_check(settings: Settings, *, strict: bool) -> tuple[str, bool, str]:
    """Late chunking compliance: naive chunking refused unless ``[ingest] allow_naive``."""
    ingest = settings.ingest
    if not ingest.allow_naive:
        if ingest.mode == "naive":
            return ("late chunking", False, "[ingest] mode = naive but allow_naive = false: every ingestion is refused")
        return ("late chunking", True, "enforced: naive chunking refused ([ingest] allow_naive = false)")
    detail = (
        f"naive chunking ALLOWED ([ingest] allow_naive = true, mode = {ingest.mode}): each naive document is a "
        "compliance violation (zero propagation)"
    )
    return ("late chunking", not strict, detail)


def transport_check(settings: Settings, *, strict: bool) -> tuple[str, bool, str]:
    """The UDS guard: a TCP store endpoint fails when ``store.uds_only`` is set or ``--strict``."""
    unix = settings.store_url.startswith("arango+unix")
    if unix:
        return "arango transport", True, "Unix domain socket"
    if settings.store.uds_only:
        return "arango transport", False, "TCP endpoint in use but store.uds_only is set: use arango+unix://"
    return "arango transport", not strict, "TCP (use arango+unix:// for UDS-only deployments)"


def users_check(settings: Settings, *, strict: bool) -> tuple[str, bool, str]:
    """Reads should go through a read-only user; ``--strict`` fails when they do not."""
    from urllib.parse import urlsplit

    rw = settings.store.username or urlsplit(settings.store_url).username or "?"
    ro = settings.store.ro_username
    if ro and ro != rw:
        return "arango users", True, f"writes as {rw}, reads as {ro} (read-only)"
    return "arango users", not strict, f"reads use the read-write user {rw}: set store.ro_username and its password"


def guard_summary(report: Any) -> str:
    """One line from a :class:`vcm.store.arango.guard.GuardReport` (non-fatal problems included)."""
    state = {True: "on", False: "off", None: "unknown"}[report.vector_index]
    line = f"ArangoDB {report.version}, vector index {state} (by {report.detected_by})"
    notes = [p.message for p in report.problems if not p.fatal]
    return line + ("; " + "; ".join(notes) if notes else "")


def secret_values(settings: Settings) -> list[str]:
    """Every secret the settings hold, so that no report prints one."""
    from urllib.parse import urlsplit

    values = [
        settings.store.password.get_secret_value(),
        settings.store.ro_password.get_secret_value(),
        settings.api.admin_token.get_secret_value(),
    ]
    for url in (settings.redis_url, settings.broker_url, settings.store_url, settings.worker.result_backend):
        password = urlsplit(url).password
        if password:
            values.append(password)
    return [v for v in values if v]


def redact(text: str, secrets: list[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def cmd_doctor(args: argparse.Namespace) -> int:
    checks = doctor_checks(get_settings(), strict=args.strict)
    width = max(len(name) for name, _, _ in checks)
    for name, ok, detail in checks:
        print(f"{'ok ' if ok else 'FAIL'} {name:<{width}}  {detail}")
    return 0 if all(ok for _, ok, _ in checks) else 1


def add_command(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check Redis, broker, store, model and the ArangoDB guards")
    p.add_argument("--strict", action="store_true", help="also fail on a TCP ArangoDB endpoint")
    p.set_defaults(func=cmd_doctor)
