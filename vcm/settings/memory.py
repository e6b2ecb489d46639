"""Settings of the memory the cold path builds: embeddings, chunking and ingestion, recall,
facts, the summarizer and drift, poisoning checks.
"""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vcm.settings.secrecy import check_url

EmbeddingBackend = Literal["auto", "torch", "onnx", "onnx-int8", "torch-bf16", "openvino"]
BatchBackend = Literal["auto", "same", "torch-bf16", "openvino"]
# Backends that run the ONNX export on the CPU (ONNX Runtime's CPU build, OpenVINO's CPU plugin).
CPU_BACKENDS = ("onnx", "onnx-int8", "openvino")


class EmbeddingSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = ""
    # What runs the model (vcm.tasks.embedding_onnx): "torch" (sentence-transformers), "onnx"
    # (the model exported once with torch.onnx, run by ONNX Runtime; its vectors match torch's to
    # cosine 1.0000, so they share torch's embedding version), "openvino" (the same export run by
    # OpenVINO, in bfloat16 where the CPU multiplies it natively: vcm.tasks.embedding_openvino;
    # MiniLM's cosine to float32 0.99997, the same version), "onnx-int8" (the export with
    # dynamically quantized int8 weights: its vectors are a version of their own) or "torch-bf16"
    # (vcm.tasks.embedding_bf16: the transformer in bfloat16 in torch). "auto": "openvino" where
    # the CPU multiplies bfloat16 natively and its vectors share the model's version, else "onnx"
    # ("torch" on an accelerator).
    backend: EmbeddingBackend = "auto"
    # What runs the cold path's batches (messages spooled, archival ingestion, an eviction's
    # summary and facts; queries keep `backend`): "auto" = a bfloat16 backend ("openvino", else
    # "torch-bf16") where the CPU multiplies bfloat16 natively and its vectors share the model's
    # version, else `backend`; "same" = `backend`; "openvino" or "torch-bf16" by name.
    batch_backend: BatchBackend = "auto"
    # Where ONNX exports are cached ("" = $XDG_CACHE_HOME/vcm/onnx, else ~/.cache/vcm/onnx): the
    # model's own folder may be read-only (an installed package).
    onnx_cache_dir: str = ""
    device: str = "cpu"
    batch_size: int = Field(32, ge=1, le=4096)
    threads: int = Field(0, ge=0, le=256)
    # ONNX Runtime backends: a short query runs, when no other task is runnable, on a second session of the
    # model whose threads spin within a run (vcm.tasks.embedding_onnx.OnnxRunner): ~1 ms less a
    # query on idle CPUs, a second copy of the model in a process that embeds queries.
    spin_when_idle: bool = True
    # ONNX Runtime backends, Linux: the model's weights in transparent huge pages once a session is open
    # (vcm.tasks.hugepages): fewer address translations per run, 0.2-0.4 ms less a single query's
    # embedding on a 2-core KVM guest (a pair: no change).
    huge_pages: bool = True
    # Embedded mode: the cold path's model work runs in a child process of the serving process
    # (vcm.workers.embedder_process), so it neither holds the API's GIL nor outranks its requests.
    subprocess: bool = True

    @model_validator(mode="after")
    def _onnx_on_cpu(self) -> Self:
        # vcm installs ONNX Runtime's CPU build; an accelerator needs the torch backend.
        if self.backend in CPU_BACKENDS and self.device != "cpu":
            raise ValueError(
                f'backend {self.backend!r} runs on the CPU only; use backend "torch" for device {self.device!r}'
            )
        return self


class ChunkingSettings(BaseModel):
    """How archival documents are cut into chunks and windowed for late chunking."""

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
    # Naive chunking breaks seed 000's late-chunking rule, so it is refused (POLICY_REFUSED, a
    # compliance_violation row and the vcm_compliance_violations alarm) unless allowed here; then
    # it is still recorded. `vcm doctor` reports this setting.
    allow_naive: bool = False
    # Upper bound on the nProbe a search_archival call may ask of the vector index (cells searched
    # per query): a larger value costs latency with no bound.
    max_n_probe: int = Field(64, ge=1, le=65536)
    # Suffix of the embedding version "<model_id>:<mode>:<suffix>"; bump it when chunking changes.
    version_suffix: str = Field("v1", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    # File name endings a folder walk picks up (files named explicitly are always read).
    extensions: list[str] = Field(default_factory=lambda: [".txt", ".md", ".markdown", ".rst"])
    # Bad-input guard: larger files / texts are refused before they are tokenised.
    max_document_bytes: int = Field(10_000_000, gt=0, le=1_000_000_000)
    # Documents embedded together: their model windows share batches.
    batch_documents: int = Field(16, ge=1, le=10_000)


class RecallSettings(BaseModel):
    """Message vectors for vector and hybrid recall search."""

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
    # Hybrid rankings spread across the conversation (vcm.store.diversity): a hit's score is
    # multiplied by diversity_penalty for every better hit within diversity_reach turns of it, so
    # one strong hit's neighbours do not fill the top of the list (1.0 or reach 0: off; off by
    # default: it lowers turn-level recall on LoCoMo, docs/recall-tuning.md).
    diversity_penalty: float = Field(1.0, ge=0.0, le=1.0)
    diversity_reach: int = Field(3, ge=0, le=1000)
    # Author anchoring (vcm.store.authors): when a query names some of the agent's message
    # authors (the messages' `name`), a hybrid ranking multiplies the other authors' messages by
    # this (1.0: off); and the query is embedded without those names. Chosen on LoCoMo,
    # docs/recall-tuning.md.
    other_author_weight: float = Field(0.93, ge=0.0, le=1.0)
    query_vector_without_authors: bool = True


PiiClass = Literal["email", "phone", "credit_card", "iban", "ssn", "ip_address"]


DEFAULT_PII: tuple[PiiClass, ...] = ("credit_card", "iban", "ssn")


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
    # Between these and the MATCH thresholds a write may or may not say the same: UNSURE, kept as a
    # shadow candidate linked to the fact it may duplicate until consolidation or a person settles
    # it. Equal to the MATCH thresholds: no UNSURE band.
    unsure_word_overlap: float = Field(0.7, gt=0.0, le=1.0)
    unsure_embedding_similarity: float = Field(0.85, gt=0.0, le=1.0)
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
    # Shadow facts (unconfirmed) in prompts and the Working Set: off, so only what consolidation
    # or an explicit write made active is injected.
    shadow_in_prompts: bool = False
    # Consolidation (beat): promote shadow facts whose evidence still supports them.
    consolidate_interval_s: float = Field(3600.0, ge=0.0, le=30 * 86400.0)

    @model_validator(mode="after")
    def _types(self) -> Self:
        for name, ttl in self.types.items():
            if not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", name) or ttl < 0:
                raise ValueError(f"facts.types: {name!r} must be a lower-case name with a lifetime >= 0")
        if self.unsure_word_overlap > self.word_overlap or self.unsure_embedding_similarity > self.embedding_similarity:
            raise ValueError(
                "facts.unsure_* thresholds must be at most the MATCH ones (word_overlap, embedding_similarity)"
            )
        return self


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
        check_url(self.llm_url, ("http://", "https://"), "llm_url")
        return self


class DriftSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threshold: float = Field(0.85, ge=-1.0, le=1.0)
    retry_mmr_lambda: float = Field(0.9, ge=0.0, le=1.0)
    retry_previous_share: float = Field(0.2, ge=0.0, le=1.0)


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
