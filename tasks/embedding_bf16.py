"""The ``torch-bf16`` backend: the model's transformer in bfloat16 in torch, on CPUs that multiply
bfloat16 in hardware (Intel AMX, AVX-512 BF16). The cold path's choice of backend for its batches
is :mod:`vcm.tasks.embedding_choice`.

Why: the model's work is matrix products, which fp32 runs at the vector units' rate; AMX tiles run
bfloat16 products about 8x faster on the same core (``scripts/bench_ingest.py``: late-chunked
archival ingestion 3.7x the chunks/s of fp32 on one thread, docs/benchmarks.md). A short query
gains nothing (there the cost is per operator, where ONNX Runtime is quickest), so the serving
process's query model keeps ``[embedding] backend``, and batches run here by name or where
OpenVINO's bfloat16 (:mod:`vcm.tasks.embedding_openvino`: faster, and free of the interpreter
lock) is missing (``[embedding] batch_backend``).

The transformer's weights and activations are bfloat16; its token states are turned back into
float32 before pooling and normalisation, so late chunking's pooled token states and the
sentence vectors are pooled in float32. On load the vectors of
:data:`~vcm.tasks.onnx_export.PROBE_TEXTS` are compared with the same model's in float32: at a
smallest cosine of :data:`~vcm.tasks.embedding_onnx.PARITY_COSINE` or more (MiniLM: 0.9999) they
share the model's embedding version, so the batches' vectors and the queries' are one space;
below it they are a version of their own.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import numpy as np

from vcm.tasks.embedding import Embedder
from vcm.tasks.embedding_onnx import PARITY_COSINE
from vcm.tasks.onnx_export import PROBE_TEXTS

log = logging.getLogger(__name__)

BACKEND = "torch-bf16"


@functools.cache
def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware. Elsewhere bfloat16 is emulated, several
    times slower than float32, so ``batch_backend = "auto"`` does not pick it. Asked once per
    process: torch's answer takes ~0.1 s, and the cold path asks on every model call."""
    import torch

    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


class Bf16Embedder(Embedder):
    """An :class:`~vcm.tasks.embedding.Embedder` whose transformer runs in bfloat16 (see the
    module docstring); ``parity`` is the smallest probe cosine to float32."""

    backend = BACKEND

    def __init__(self, model: str = "", device: str = "cpu", batch_size: int = 32, threads: int = 0) -> None:
        import torch

        super().__init__(model, device, batch_size, threads)
        reference = super().encode(PROBE_TEXTS)
        transformer: Any = self.model[0]
        transformer.auto_model.to(torch.bfloat16)
        # Pooling and normalisation read the token states in float32 (module docstring).
        transformer.register_forward_hook(_states_in_fp32)
        ours = self.encode(PROBE_TEXTS)
        self.parity = float(np.min(np.sum(reference * ours, axis=1)))
        if self.parity < PARITY_COSINE:
            self.model_id = f"{self.base_model_id}+{BACKEND}"
        log.info("%s runs in bfloat16: smallest probe cosine to float32 %.5f", self.base_model_id, self.parity)


def _states_in_fp32(module: Any, args: Any, features: dict[str, Any]) -> dict[str, Any]:
    features["token_embeddings"] = features["token_embeddings"].float()
    return features
