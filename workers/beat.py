"""The beat schedule: periodic maintenance. Run exactly one ``celery -A vcm.workers.app beat``
(several would each enqueue every entry; harmless because the tasks are idempotent, but wasteful).
Embedded mode runs the same schedule in process (:func:`vcm.workers.embedded.embedded_beat`).
"""

from __future__ import annotations

from typing import Any

from vcm.settings import Settings
from vcm.types import MaintenanceJob
from vcm.workers import names

# The job each entry runs (vcm.types.MaintenanceJob; vcm.tasks.maintenance.JOBS does it). The
# entry names stay as they were: a beat's schedule file remembers entries by name.
ENTRY_JOBS: dict[str, MaintenanceJob] = {
    "sweep-evictions": MaintenanceJob.SWEEP,
    "expire-recall": MaintenanceJob.EXPIRE,
    "snapshot-agents": MaintenanceJob.SNAPSHOT,
    "consolidate-facts": MaintenanceJob.CONSOLIDATE,
}


def schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    m, d, f = settings.maintenance, settings.durability, settings.facts
    optional: dict[str, dict[str, Any]] = {}
    if d.snapshot_interval_s > 0:  # periodic snapshots of every agent, when asked for
        optional["snapshot-agents"] = {"task": names.SNAPSHOT, "schedule": d.snapshot_interval_s}
    if f.consolidate_interval_s > 0:  # shadow facts through the replay test (SHADOW -> ACTIVE)
        optional["consolidate-facts"] = {"task": names.CONSOLIDATE, "schedule": f.consolidate_interval_s}
    return {
        # First look of the eviction sweeper; the second look follows sweep_grace_s later.
        "sweep-evictions": {"task": names.SWEEP, "schedule": m.sweep_interval_s},
        # Recall TTL: delete messages past expires_at (no-op while recall_ttl_s is 0); expired
        # snapshots, state keys and facts go with the same sweep.
        "expire-recall": {"task": names.EXPIRE, "schedule": m.expire_interval_s},
        **optional,
    }
