"""Portable export and import (:mod:`vcm.api.routes.portable`, docs/portable.md)."""

from __future__ import annotations

from pydantic import BaseModel


class ImportOut(BaseModel):
    agent_id: str  # the agent created (the file's, or the one asked for with as_id)
    source_agent_id: str  # the agent the file was exported from
    export_id: str  # the file's header id: importing it again answers this reply, replayed
    counts: dict[str, int]  # records imported, by kind (blocks, messages, facts, chunks, ...)
    ingest_jobs: list[str]  # documents without usable vectors, queued for ingestion again (GET .../jobs/{id})
    message_vectors: str  # "embedded", "not embedded: run vcm reembed" or "none"
    replayed: bool  # True: the file had been imported before; nothing was written
