"""The Celery side of vcm: app, queues and routes, reliability settings, signals, metrics, the
beat schedule and the in-process worker for embedded mode. No task logic lives here (see
``tasks``); nothing imports this package except process entry points.

Entry points::

    celery -A vcm.workers.app worker -Q hot -n hot@%h -P prefork -c 4      # evictions
    celery -A vcm.workers.app worker -Q cold -n cold@%h -c 2               # spooling, maintenance
    celery -A vcm.workers.app worker -Q ingest -n ingest@%h -c 1           # embeddings, ingestion
    celery -A vcm.workers.app beat                                         # exactly one
    scripts/flower                                                     # monitoring
"""
