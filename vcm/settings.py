"""Typed settings: ``config/default.toml``, then an optional ``VCM_CONFIG`` file, then ``VCM_*``
environment variables. Invalid values fail at start with :class:`ConfigError` naming the setting."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Self
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError

from vcm import config as vcm_config
from vcm.errors import ConfigError

DEFAULT_CONFIG = vcm_config.path("default.toml")
ENV_PREFIX = "VCM_"
ENV_NESTED = "__"
# Variables under the prefix that are not settings: the config path and test-only knobs.
_ENV_IGNORED = ("VCM_CONFIG", "VCM_TEST_")
# Variables of the command line's clients (`--token`, `--api`), exactly these names: not settings.
_ENV_CLIENT = frozenset({"VCM_TOKEN", "VCM_API_URL"})


class TokenSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    encoding: str = ""
    download: bool = False
    per_message: int = Field(3, ge=0, le=64)
    per_name: int = Field(1, ge=0, le=64)
    reply_priming: int = Field(3, ge=0, le=64)


class BudgetSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    output_reserve: float = Field(0.10, ge=0.0, lt=0.9)
    # Held back from the hot context for the memory the context builder injects per call
    # (state header, sticky facts, relevant memory, skills): it lowers max like output_reserve.
    memory_reserve: float = Field(0.0, ge=0.0, lt=0.5)
    warning: float = Field(0.70, gt=0.0, lt=1.0)
    flush: float = Field(0.90, gt=0.0, le=1.0)
    target: float = Field(0.50, gt=0.0, lt=1.0)
    pinned_cap: float = Field(0.25, ge=0.0, lt=1.0)
    summary_cap: float = Field(0.15, gt=0.0, lt=1.0)
    max_content_chars: int = Field(400_000, gt=0, le=50_000_000)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.output_reserve + self.memory_reserve >= 1.0 - self.target:
            raise ValueError("output_reserve + memory_reserve must leave room above target")
        if not self.target < self.warning < self.flush:
            raise ValueError(f"need target < warning < flush, got {self.target} / {self.warning} / {self.flush}")
        if self.pinned_cap + self.summary_cap >= self.target:
            # Otherwise a flush could never bring occupancy down to target.
            raise ValueError(
                f"pinned_cap + summary_cap ({self.pinned_cap} + {self.summary_cap}) "
                f"must stay below target ({self.target})"
            )
        return self


class ChatSettings(BaseModel):
    """The OpenAI-compatible model vcm calls for chat and /v1/chat/completions."""

    model_config = ConfigDict(extra="forbid")

    # e.g. http://127.0.0.1:8000/v1 ; "" = no model: the chat routes answer LLM_UNAVAILABLE.
    base_url: str = ""
    # Sent upstream; "" = the model the request names (/v1/chat/completions) or the agent's.
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = Field(120.0, gt=0.0, le=3600.0)
    max_retries: int = Field(2, ge=0, le=10)
    max_message_chars: int = Field(100_000, ge=1, le=10_000_000)
    # One turn at a time per agent: a second waits this long for the first, then gets CONFLICT.
    turn_wait_s: float = Field(15.0, ge=0.0, le=3600.0)
    # The turn lock's lifetime, renewed while the turn runs: frees an agent whose process died.
    turn_hold_s: float = Field(60.0, ge=1.0, le=86400.0)


class HeartbeatSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_depth: int = Field(8, ge=1, le=1000)
    max_duration_s: float = Field(60.0, gt=0.0, le=86400.0)
    token_floor: int = Field(256, ge=0)
    rate_per_s: float = Field(3.0, gt=0.0, le=10_000.0)
    cooldown_ms: int = Field(750, ge=0, le=3_600_000)


class EmbeddingSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = ""
    device: str = "cpu"
    batch_size: int = Field(32, ge=1, le=4096)
    threads: int = Field(0, ge=0, le=256)
    # Embedded mode: the cold path's model work runs in a child process of the serving process
    # (vcm.workers.embedder_process), so it neither holds the API's GIL nor outranks its requests.
    subprocess: bool = True


class ChunkingSettings(BaseModel):
    """How archival documents are cut into chunks and windowed for late chunking (issue 4)."""

    model_config = ConfigDict(extra="forbid")

    # Chunk size in model tokens; must fit the embedding model's window (checked at use).
    target_tokens: int = Field(128, ge=8, le=8192)
    # Whole trailing sentences of the previous chunk repeated at the start of the next one.
    overlap_tokens: int = Field(0, ge=0, le=4096)
    # Overlap between the model windows a long document is split into; a token's embedding
    # comes from the window where it has more context, so larger means more context per token
    # at the cost of running the model over those tokens twice. 16 keeps late chunking within
    # ~7 % of naive model work; on LoCoMo, 0..64 measured alike and 128 ~2 points better at ~2x.
    window_overlap_tokens: int = Field(16, ge=0, le=4096)

    @model_validator(mode="after")
    def _overlap_below_target(self) -> Self:
        if self.overlap_tokens >= self.target_tokens:
            raise ValueError(
                f"overlap_tokens ({self.overlap_tokens}) must be below target_tokens ({self.target_tokens})"
            )
        return self


class IngestSettings(BaseModel):
    """Archival ingestion of documents and folders."""

    model_config = ConfigDict(extra="forbid")

    # "late" embeds chunks in their document's context; "naive" (each chunk alone) is only for
    # comparison and is recorded as a compliance_violation event.
    mode: Literal["late", "naive"] = "late"
    # Suffix of the embedding version "<model_id>:<mode>:<suffix>"; bump it when chunking changes.
    version_suffix: str = Field("v1", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    # File name endings a folder walk picks up (files named explicitly are always read).
    extensions: list[str] = Field(default_factory=lambda: [".txt", ".md", ".markdown", ".rst"])
    # Bad-input guard: larger files / texts are refused before they are tokenised.
    max_document_bytes: int = Field(10_000_000, gt=0, le=1_000_000_000)
    # Documents embedded together: their model windows share batches.
    batch_documents: int = Field(16, ge=1, le=10_000)


class RecallSettings(BaseModel):
    """Message vectors for vector and hybrid recall search (issue 7)."""

    model_config = ConfigDict(extra="forbid")

    # Embed every spooled message on the cold path; off: recall search has BM25 only.
    vectors: bool = True
    # "late": a message is read between its neighbouring turns (late chunking), so "Sure, see
    # you then!" carries what it answers; "single": the message alone (for comparison).
    context_mode: Literal["late", "single"] = "late"
    # Turns before a message read as its context (late mode).
    context_turns: int = Field(3, ge=0, le=64)
    # Turns after it: the message is embedded once they have arrived (0: at once, before-only).
    context_after: int = Field(3, ge=0, le=64)


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
    # Message and batch ids reserved in the store ahead of use, so a rebuilt agent never reuses one.
    id_reserve: int = Field(1024, ge=16, le=1_000_000)
    # Default lifetime of a snapshot (0 keeps it until deleted).
    snapshot_ttl_s: int = Field(30 * 86400, ge=0, le=10 * 365 * 86400)
    # Periodic snapshots of every agent by beat (0: none).
    snapshot_interval_s: float = Field(0.0, ge=0.0, le=30 * 86400.0)


PiiClass = Literal["email", "phone", "credit_card", "iban", "ssn", "ip_address"]
DEFAULT_PII: tuple[PiiClass, ...] = ("credit_card", "iban", "ssn")


class SyncSettings(BaseModel):
    """Agents whose memory is cached by client instances on many machines: the change feed those
    instances follow and the sync status they report (:mod:`vcm.replicas`, :mod:`vcm.sync`)."""

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


class FactSettings(BaseModel):
    """Structured memory (vcm.facts): types, dedup thresholds, the policy guard."""

    model_config = ConfigDict(extra="forbid")

    # Fact type -> default lifetime in seconds (0: never expires). More types may be added.
    types: dict[str, int] = Field(
        default_factory=lambda: {
            "sticky": 0,
            "preference": 90 * 86400,
            "project": 30 * 86400,
            "learned": 30 * 86400,
            # The working set's (seed 002): session-scale lifetimes.
            "goal": 86400,
            "question": 86400,
            "action": 86400,
            "risk": 86400,
            "constraint": 7 * 86400,
            "entity": 7 * 86400,
            "relation": 7 * 86400,
        }
    )
    max_value_chars: int = Field(4000, ge=16, le=100_000)
    max_tags: int = Field(32, ge=0, le=1000)
    # A write is the same fact when its words overlap this much (Jaccard) or its embedding is
    # this close (cosine) to one of the agent's facts of the same scope and type.
    word_overlap: float = Field(0.8, gt=0.0, le=1.0)
    embedding_similarity: float = Field(0.92, gt=0.0, le=1.0)
    # PII classes the guard refuses without a justification (secrets are always refused).
    pii: list[PiiClass] = Field(default_factory=lambda: list(DEFAULT_PII))
    # Extraction of shadow facts from each eviction batch before it leaves the context.
    extract_on_eviction: bool = True
    # "extractive" (offline heuristics) or "llm" (an OpenAI-compatible chat endpoint, falling
    # back to extractive on any failure).
    extractor: Literal["extractive", "llm"] = "extractive"
    llm_url: str = ""
    llm_model: str = ""
    llm_api_key_env: str = "OPENAI_API_KEY"
    llm_timeout_s: float = Field(20.0, gt=0.0, le=600.0)
    # Consolidation (beat): promote shadow facts whose evidence still supports them.
    consolidate_interval_s: float = Field(3600.0, ge=0.0, le=30 * 86400.0)

    @model_validator(mode="after")
    def _types(self) -> Self:
        for name, ttl in self.types.items():
            if not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", name) or ttl < 0:
                raise ValueError(f"facts.types: {name!r} must be a lower-case name with a lifetime >= 0")
        return self


class ContextSettings(BaseModel):
    """The context builder's layers (vcm.prompt.layers): token budgets as shares of the window."""

    model_config = ConfigDict(extra="forbid")

    identity: bool = True  # a line with today's date, the agent and the user's name
    user_name: str = Field("", max_length=200)
    tools_hint: float = Field(0.01, ge=0.0, le=0.2)
    state: float = Field(0.04, ge=0.0, le=0.3)
    sticky: float = Field(0.03, ge=0.0, le=0.3)
    memory: float = Field(0.08, ge=0.0, le=0.5)
    skills: float = Field(0.04, ge=0.0, le=0.3)
    # Relevant memory: at most this many facts and recalled messages (hybrid search on the latest
    # user message; messages still in the FIFO and facts already shown are left out).
    memory_facts: int = Field(5, ge=0, le=100)
    memory_messages: int = Field(5, ge=0, le=100)
    # A directory of skill files (.md with YAML front matter); "" = none.
    skills_dir: str = ""


class SummarizerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["extractive", "llm"] = "extractive"
    mmr_lambda: float = Field(0.7, ge=0.0, le=1.0)
    previous_share: float = Field(0.4, ge=0.0, le=1.0)
    salience_boost: float = Field(0.25, ge=0.0, le=1.0)
    max_sentence_chars: int = Field(400, ge=40, le=20_000)
    max_candidates: int = Field(48, ge=8, le=100_000)
    llm_url: str = ""
    llm_model: str = ""
    llm_api_key_env: str = "OPENAI_API_KEY"
    llm_timeout_s: float = Field(20.0, gt=0.0, le=600.0)

    @model_validator(mode="after")
    def _llm(self) -> Self:
        if self.kind == "llm" and not (self.llm_url and self.llm_model):
            raise ValueError("summarizer kind 'llm' needs llm_url and llm_model")
        _check_url(self.llm_url, ("http://", "https://"), "llm_url")
        return self


class DriftSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threshold: float = Field(0.85, ge=-1.0, le=1.0)
    retry_mmr_lambda: float = Field(0.9, ge=0.0, le=1.0)
    retry_previous_share: float = Field(0.2, ge=0.0, le=1.0)


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


class PoisoningSettings(BaseModel):
    """The memory-poisoning filter on retrieved text (:mod:`vcm.poisoning`)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    # Names of built-in patterns to switch off (see vcm/poisoning.py for the list).
    disable: list[str] = Field(default_factory=list)
    # More patterns: name -> regular expression (matched case-insensitively).
    extra: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _compiles(self) -> Self:
        from vcm.poisoning import patterns  # pure; imported here to keep settings import-light

        patterns(self.disable, self.extra)
        return self


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


def _check_url(value: str, schemes: tuple[str, ...], name: str) -> str:
    if value and not value.startswith(schemes):
        raise ValueError(f"{name} must start with one of {', '.join(schemes)}")
    return value


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    redis_url: str = ""
    broker_url: str = "memory://"
    # "" = sqlite under data_dir (embedded mode's store survives restarts there).
    store_url: str = ""
    # "" = the user's data directory ($XDG_DATA_HOME/vcm, else ~/.local/share/vcm).
    data_dir: str = ""
    default_model: str = "gpt-4o-mini"
    idempotency_ttl_s: int = Field(86400, ge=60, le=30 * 86400)
    log_level: str = "INFO"
    models: dict[str, int] = Field(default_factory=dict)
    tokens: TokenSettings = Field(default_factory=TokenSettings)
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    heartbeat: HeartbeatSettings = Field(default_factory=HeartbeatSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    maintenance: MaintenanceSettings = Field(default_factory=MaintenanceSettings)
    durability: DurabilitySettings = Field(default_factory=DurabilitySettings)
    sync: SyncSettings = Field(default_factory=SyncSettings)
    facts: FactSettings = Field(default_factory=FactSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    chat: ChatSettings = Field(default_factory=ChatSettings)
    summarizer: SummarizerSettings = Field(default_factory=SummarizerSettings)
    drift: DriftSettings = Field(default_factory=DriftSettings)
    chunking: ChunkingSettings = Field(default_factory=ChunkingSettings)
    recall: RecallSettings = Field(default_factory=RecallSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    poisoning: PoisoningSettings = Field(default_factory=PoisoningSettings)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        # redis+cluster:// (rediss+cluster://) names seed nodes of a Redis Cluster (vcm.hotpath.connection).
        _check_url(
            self.redis_url,
            ("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://"),
            "redis_url",
        )
        _check_url(
            self.broker_url,
            ("memory://", "redis://", "rediss://", "amqp://", "pyamqp://"),
            "broker_url",
        )
        if not self.store_url:
            self.store_url = f"sqlite:///{Path(self.data_path()).resolve() / 'vcm.db'}"
        _check_url(self.store_url, ("sqlite://", "arango+"), "store_url")
        for model, window in self.models.items():
            if not 256 <= window <= 10_000_000:
                raise ValueError(f"models.{model}: window {window} outside 256..10000000")
        if self.default_model not in self.models:
            raise ValueError(f"default_model {self.default_model!r} is not in [models]")
        if self.maintenance.sweep_grace_s >= self.worker.visibility_timeout_s:
            # The sweeper's confirmation is a countdown task; past the visibility timeout it would
            # be delivered twice (celery.md 1.3).
            raise ValueError("maintenance.sweep_grace_s must stay below worker.visibility_timeout_s")
        return self

    def __repr_args__(self) -> Any:
        # URLs may carry a password from the environment; reprs end up in logs and tracebacks.
        for name, value in super().__repr_args__():
            yield name, redact_url(value) if name in URL_SETTINGS and isinstance(value, str) else value

    def data_path(self) -> str:
        """Where embedded mode keeps its files (the SQLite store and its indexes)."""
        if self.data_dir:
            return os.path.expanduser(self.data_dir)
        base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
        return os.path.join(base, "vcm")

    def window_for(self, model: str) -> int:
        try:
            return self.models[model]
        except KeyError:
            raise ConfigError(
                f"unknown model {model!r}; add its window to [models] in the config",
                setting="models",
            ) from None


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist", setting="VCM_CONFIG") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}", setting=str(path)) from None


# Secrets that must come from the environment, never from a config file on disk.
SECRET_SETTINGS = ("store.password", "store.ro_password", "api.admin_token")
# URLs whose userinfo must carry no password in a config file (put it in the environment instead).
URL_SETTINGS = ("redis_url", "broker_url", "store_url", "worker.result_backend")


def _lookup(data: Mapping[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def secrets_in_file(data: Mapping[str, Any]) -> list[str]:
    """Settings of a config file that hold a secret (names only, never values)."""
    found = [name for name in SECRET_SETTINGS if _lookup(data, name) not in (None, "")]
    for name in URL_SETTINGS:
        value = _lookup(data, name)
        if isinstance(value, str) and urlsplit(value).password:
            found.append(name)
    return found


def redact_url(url: str) -> str:
    """``scheme://user:secret@host`` -> ``scheme://user:***@host``; other URLs unchanged."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _refuse_secrets(data: Mapping[str, Any], path: Path) -> None:
    found = secrets_in_file(data)
    if found:
        env = ", ".join(ENV_PREFIX + n.upper().replace(".", ENV_NESTED) for n in found)
        raise ConfigError(
            f"config file {path} holds a secret in {', '.join(found)}: secrets come only from the "
            f"environment ({env}); remove it from the file",
            setting=found[0],
        )


def _describe(exc: PydanticValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if not loc:
            parts.append(f"invalid settings: {err['msg']}")
            continue
        env = ENV_PREFIX + ENV_NESTED.join(str(p) for p in err["loc"]).upper()
        parts.append(f"invalid setting {loc} (env {env}): {err['msg']}")
    return "; ".join(parts)


def _env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """``VCM_BUDGET__WARNING=0.8`` -> {"budget": {"warning": "0.8"}}; pydantic coerces types."""
    out: dict[str, Any] = {}
    for name, value in environ.items():
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper.startswith(_ENV_IGNORED) or upper in _ENV_CLIENT:
            continue
        path = upper.removeprefix(ENV_PREFIX).lower().split(ENV_NESTED)
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {name} conflicts with another", setting=name)
        node[path[-1]] = value
    return out


def load_settings(overrides: Mapping[str, Any] | None = None, *, environ: Mapping[str, str] | None = None) -> Settings:
    """Defaults TOML < ``VCM_CONFIG`` file < ``VCM_*`` environment < explicit overrides."""
    env = os.environ if environ is None else environ
    data = _read_toml(DEFAULT_CONFIG)
    _refuse_secrets(data, DEFAULT_CONFIG)
    extra = env.get(ENV_PREFIX + "CONFIG")
    if extra:
        own = _read_toml(Path(extra))
        _refuse_secrets(own, Path(extra))
        data = _deep_merge(data, own)
    data = _deep_merge(data, _env_values(env))
    if overrides:
        data = _deep_merge(data, dict(overrides))
    try:
        return Settings.model_validate(data)
    except PydanticValidationError as exc:
        raise ConfigError(_describe(exc)) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings, loaded once at start."""
    return load_settings()
