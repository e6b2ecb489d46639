"""The entry point of ``celery -A vcm.workers.app`` (worker, beat, Flower).

The one place such a process reads its settings: importing this module wires the process
(:func:`vcm.workers.build.build`), which is what Celery's ``-A`` expects of it. Nothing in the
package imports it; library code and tests call :func:`~vcm.workers.build.build` with settings.
"""

from __future__ import annotations

from vcm.settings import get_settings
from vcm.workers.build import build

app = build(get_settings()).app
