"""Settings of the processes and the services they reach: workers, maintenance, durability,
the clients' sync, the API, metrics, the store.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from vcm.settings.secrecy import redact_url


class WorkerSettings(BaseModel):
    """Celery reliability knobs (see ``workers/config.py`` for why each matters)."""

    model_config = ConfigDict(extra="forbid")

    result_backend: str = ""
    broker_prefix: str = Field("", max_length=64, pattern=r"^[A-Za-z0-9:_.-]*$")
    result_expires_s: int = Field(86400, ge=60, le=30 * 86400)
    visibility_timeout_s: int = Field(3600, ge=5, le=7 * 86400)
    restore_interval_s: int = Field(10, ge=1, le=3600)
    task_time_limit_s: int = Field(300, ge=1, le=86400)
    task_soft_time_limit_s: int = Field(270, ge=1, le=86400)
    max_retries: int = Field(8, ge=0, le=100)
    retry_backoff_s: float = Field(2.0, gt=0.0, le=3600.0)
    retry_backoff_max_s: int = Field(120, ge=1, le=86400)
    max_deliveries: int = Field(5, ge=1, le=1000)
    soft_shutdown_timeout_s: float = Field(30.0, ge=0.0, le=3600.0)
    eta_task_limit: int = Field(1000, ge=1, le=1_000_000)
    dispatch_retries: int = Field(2, ge=0, le=10)
    metrics_port: int = Field(0, ge=0, le=65535)
    preload_embedder: bool = True
    # RabbitMQ: a publish returns once the broker holds the message (publisher confirms). Off, a
    # dispatch lost in a broker crash is repaired by the sweeper (batches, spools) but an ingestion
    # job's document is lost; on, each publish waits a round trip (docs/capacity.md §3).
    amqp_confirm_publish: bool = True

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, redact_url(value) if name == "result_backend" and isinstance(value, str) else value

    @model_validator(mode="after")
    def _limits(self) -> Self:
        if self.task_soft_time_limit_s >= self.task_time_limit_s:
            raise ValueError("task_soft_time_limit_s must be below task_time_limit_s")
        longest = self.task_time_limit_s + self.retry_backoff_max_s
        if self.visibility_timeout_s <= longest:
            # A message unacknowledged for longer than this is handed to another worker.
            raise ValueError(
                f"visibility_timeout_s ({self.visibility_timeout_s}) must exceed task_time_limit_s + "
                f"retry_backoff_max_s ({longest}), or running and waiting tasks are delivered twice"
            )
        return self


class MaintenanceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sweep_interval_s: float = Field(60.0, gt=0.0, le=86400.0)
    sweep_grace_s: float = Field(120.0, gt=0.0, le=86400.0)
    redrive_dead_letters_after_s: float = Field(3600.0, ge=0.0, le=30 * 86400.0)
    expire_interval_s: float = Field(3600.0, gt=0.0, le=30 * 86400.0)
    recall_ttl_s: int = Field(0, ge=0, le=100 * 365 * 86400)


class DurabilitySettings(BaseModel):
    """How appended messages reach the store, the source of truth (see vcm.durable)."""

    model_config = ConfigDict(extra="forbid")

    # write_through: the append is acknowledged after the store holds the message.
    # write_behind: the cold path spools it (Redis, with AOF, is the log until then).
    # auto: write_through when the hot state is in-process (embedded), which dies with the process.
    messages: Literal["auto", "write_through", "write_behind"] = "auto"
    # Write-behind's loss window, per agent: an append that finds the agent's backlog (appends
    # acknowledged, not yet in the store) older than this, or larger than the next, writes the
    # backlog through before it is acknowledged; the API also writes through a backlog older than
    # this when no append comes (0 turns that bound off).
    write_behind_max_s: float = Field(2.0, ge=0.0, le=3600.0)
    write_behind_max_messages: int = Field(500, ge=0, le=1_000_000)
    # Message and batch ids reserved in the store ahead of use, so a rebuilt agent never reuses one.
    id_reserve: int = Field(1024, ge=16, le=1_000_000)
    # Default lifetime of a snapshot (0 keeps it until deleted).
    snapshot_ttl_s: int = Field(30 * 86400, ge=0, le=10 * 365 * 86400)
    # Periodic snapshots of every agent by beat (0: none).
    snapshot_interval_s: float = Field(0.0, ge=0.0, le=30 * 86400.0)


class SyncSettings(BaseModel):
    """Agents whose memory is cached by client instances on many machines: the change feed those
    instances follow and the sync status they report (:mod:`vcm.service.replicas`, :mod:`vcm.sync`)."""

    model_config = ConfigDict(extra="forbid")

    # Changes kept per agent in its feed (a Redis stream, trimmed approximately). A client that
    # falls further behind than this is told so (a gap) and drops its whole cache of the agent.
    feed_maxlen: int = Field(1000, ge=10, le=1_000_000)
    # A feed with no change for this long is dropped (a client resuming later sees a gap).
    feed_ttl_s: int = Field(7 * 86400, ge=60, le=365 * 86400)
    # How often an open change stream looks for new changes (one XRANGE; the notification latency).
    poll_s: float = Field(0.1, ge=0.01, le=60.0)
    # A change stream ends after this long; the client reconnects from the last change it saw.
    max_stream_s: float = Field(300.0, ge=1.0, le=86400.0)
    # Sync status records of instances that stopped reporting are dropped after this long.
    instance_ttl_s: int = Field(86400, ge=60, le=30 * 86400)
    # At most this many instances are listed per agent (the longest silent go first).
    max_instances: int = Field(100, ge=1, le=100_000)


class ApiSettings(BaseModel):
    """The HTTP API (``vcm serve``)."""

    model_config = ConfigDict(extra="forbid")

    # Bearer token of the operator. SecretStr keeps it out of reprs, dumps and logs. "" = `vcm
    # serve` generates one at start and prints it once to stderr; create_app refuses to build an
    # app without one.
    admin_token: SecretStr = SecretStr("")
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    # Bad-input guard: bodies above this are refused (413) before they are read into memory.
    # Above ingest.max_document_bytes so that a whole document still fits, JSON-escaped.
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)

    @field_validator("admin_token")
    @classmethod
    def _strong(cls, value: SecretStr) -> SecretStr:
        secret = value.get_secret_value()
        if secret and (len(secret) < 16 or not secret.isprintable() or secret != secret.strip()):
            # The message must not echo the value.
            raise ValueError("admin_token must be at least 16 printable characters without surrounding spaces")
        return value


class MetricsSettings(BaseModel):
    """vcm's Prometheus metrics (``GET /metrics`` on the API, ``[worker] metrics_port`` on workers)."""

    model_config = ConfigDict(extra="forbid")

    # Token gauges per agent (label ``agent``). Off for deployments with many agents: each agent is
    # one more series per part; vcm_context_occupancy_ratio still shows the fleet without labels.
    per_agent: bool = True
    # At most this many agents have per-agent series at once in one process; the agent updated
    # longest ago loses its series first, so a fleet of many agents cannot grow the exposition
    # without bound (0 = no per-agent series at all).
    max_agent_series: int = Field(1000, ge=0, le=1_000_000)
    # Whether GET /metrics on the API needs the admin token (Prometheus then sends it as a bearer
    # token: ``authorization.credentials_file``). On by default: per-agent series name agent ids,
    # and a token must never reveal whether another agent exists.
    require_admin: bool = True
    # Stored items (messages, archival chunks, blocks) an agent may hold before the alert
    # VcmAgentOverMemoryQuota fires (compose/alerts.yml); 0 = no quota. When set, /metrics counts
    # each agent's items at scrape (vcm_agent_memory_items; at most max_agent_series agents).
    memory_quota_items: int = Field(0, ge=0, le=10**12)


class StoreSettings(BaseModel):
    """Credentials and transport rules of the store (the ArangoDB adapter; see docs/operations.md).

    Passwords come only from the environment (``VCM_STORE__PASSWORD``,
    ``VCM_STORE__RO_PASSWORD``): a config file that holds one is refused at start.
    """

    model_config = ConfigDict(extra="forbid")

    # Refuse TCP: only arango+unix:// may be opened (the adapter and `vcm doctor --strict` check).
    uds_only: bool = False
    # Read-write user: writes and schema bootstrap. "" = the user in store_url.
    username: str = ""
    password: SecretStr = SecretStr("")
    # Read-only user: searches, gets, event queries. "" = reads use the read-write user.
    ro_username: str = ""
    ro_password: SecretStr = SecretStr("")
    # Create the TTL index on messages.expires_at so the server deletes expired recall itself
    # (used when maintenance.recall_ttl_s > 0; the beat's expire task runs either way).
    server_ttl_index: bool = True
    # Embedded store: how many not-yet-indexed message-vector changes a recall query scans exactly
    # beside the agent's message index (the newest; the index is built and caught up off the
    # query path). Past it a query leaves the oldest out and says so (stats.partial, metric
    # vcm_recall_partial_searches). The first query after a restart or a bulk load reads them all
    # (5 000: ~0.2 s at load average 9 on 2 cores); later ones read only the rows new since.
    recall_tail_limit: int = Field(5_000, ge=1, le=10_000_000)
