"""Moved to :mod:`vcm.service.lifecycle` and :mod:`vcm.service.snapshots`. This name stays only
while the API's routes (being split into ``vcm.api.routes``) still import it from here; import
from :mod:`vcm.service` instead, then delete this module."""

from vcm.service.snapshots import new_snapshot_id

__all__ = ["new_snapshot_id"]
