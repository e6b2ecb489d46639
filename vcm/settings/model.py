"""The settings root: every section, the top-level URLs and models, and their cross-checks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vcm.errors import ConfigError
from vcm.settings.context import BudgetSettings, ChatSettings, ContextSettings, HeartbeatSettings, TokenSettings
from vcm.settings.memory import (
    ChunkingSettings,
    DriftSettings,
    EmbeddingSettings,
    FactSettings,
    IngestSettings,
    PoisoningSettings,
    RecallSettings,
    SummarizerSettings,
)
from vcm.settings.runtime import (
    ApiSettings,
    DurabilitySettings,
    MaintenanceSettings,
    MetricsSettings,
    StoreSettings,
    SyncSettings,
    WorkerSettings,
)
from vcm.settings.secrecy import URL_SETTINGS, check_url, redact_url


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
        check_url(
            self.redis_url,
            ("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://"),
            "redis_url",
        )
        check_url(
            self.broker_url,
            ("memory://", "redis://", "rediss://", "amqp://", "pyamqp://"),
            "broker_url",
        )
        if not self.store_url:
            self.store_url = f"sqlite:///{Path(self.data_path()).resolve() / 'vcm.db'}"
        check_url(self.store_url, ("sqlite://", "arango+"), "store_url")
        for model, window in self.models.items():
            if not 256 <= window <= 10_000_000:
                raise ValueError(f"models.{model}: window {window} outside 256..10000000")
        if self.default_model not in self.models:
            raise ValueError(f"default_model {self.default_model!r} is not in [models]")
        if self.maintenance.sweep_grace_s >= self.worker.visibility_timeout_s:
            # The sweeper's confirmation is a countdown task; past the visibility timeout it would
            # be delivered twice (docs/reference/celery.md 1.3).
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
