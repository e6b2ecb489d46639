"""The torch-bf16 backend and the cold path's choice of backend for its batches
(``[embedding] batch_backend``): parity with float32, one embedding version with the queries'
backend, late chunking's token states, and which embedder each setting gives."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from vcm.errors import ConfigError
from vcm.settings import load_settings
from vcm.settings.memory import EmbeddingSettings
from vcm.tasks import embedding_bf16
from vcm.tasks.embedding import Embedder, get_embedder
from vcm.tasks.embedding_bf16 import BACKEND, Bf16Embedder, batch_embedder
from vcm.tasks.embedding_onnx import PARITY_COSINE
from vcm.tasks.ingest.late_chunking import LateChunker

pytestmark = pytest.mark.timeout(600)

TEXTS = [
    "I went camping with the kids at the lake last weekend.",
    "ok",
    "What books has Melanie read? " * 40,  # past the model's window: truncated alike
    "Der Zug nach Berlin fährt um 14:05 ab.",
]


@pytest.fixture(scope="module")
def torch_embedder() -> Embedder:
    return get_embedder(load_settings(environ={}).embedding.model_copy(update={"backend": "torch"}))


@pytest.fixture(scope="module")
def bf16() -> Embedder:
    return get_embedder(load_settings(environ={}).embedding.model_copy(update={"backend": BACKEND}))


def test_bf16_vectors_are_the_float32_ones_to_the_parity_tolerance(bf16: Embedder, torch_embedder: Embedder) -> None:
    assert isinstance(bf16, Bf16Embedder)
    ours, theirs = bf16.encode(TEXTS), torch_embedder.encode(TEXTS)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)  # normalised in float32
    cosines = (ours * theirs).sum(axis=1)
    assert cosines.min() >= PARITY_COSINE
    assert not np.array_equal(ours, theirs)  # it did run in bfloat16
    # Close enough to share the model's embedding version with torch's and ONNX Runtime's vectors.
    assert bf16.parity >= PARITY_COSINE
    assert bf16.model_id == bf16.base_model_id == torch_embedder.model_id
    assert bf16.encode([]).shape == (0, 384)


def test_bf16_token_states_serve_late_chunking(bf16: Embedder, torch_embedder: Embedder) -> None:
    rows = [[101, 2023, 2003, 1037, 3231, 102], [101, 7592, 102]]
    ours, theirs = bf16.hidden_states(rows, 0), torch_embedder.hidden_states(rows, 0)
    assert [s.shape for s in ours] == [(6, 384), (3, 384)] and all(s.dtype == np.float32 for s in ours)
    for a, b in zip(ours, theirs, strict=True):  # each token's state points where float32's does
        cosines = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert cosines.min() > PARITY_COSINE
    text = "Alice moved to Lisbon. She loves the trams there. Bob visited her in March."
    settings = load_settings(environ={}).chunking
    plan_b, plan_t = LateChunker(bf16).plan(text, settings), LateChunker(torch_embedder).plan(text, settings)
    late_b = np.vstack(LateChunker(bf16).embed([plan_b], "late"))
    late_t = np.vstack(LateChunker(torch_embedder).embed([plan_t], "late"))
    assert (late_b * late_t).sum(axis=1).min() > PARITY_COSINE


@dataclass
class _Made:
    backend: str
    model_id: str
    base_model_id: str = "m"
    parity: float = 1.0


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """batch_embedder's loads, recorded: a bf16 embedder at parity ``_PARITY["value"]`` (its
    version of its own below the tolerance), any other the model's version; no earlier choice."""
    calls: list[str] = []
    monkeypatch.setattr(embedding_bf16, "_chosen", {})

    def fake(settings: EmbeddingSettings) -> _Made:
        calls.append(settings.backend)
        if settings.backend == BACKEND:
            parity = _PARITY["value"]
            return _Made(BACKEND, "m" if parity >= PARITY_COSINE else f"m+{BACKEND}", parity=parity)
        return _Made(settings.backend, "m")

    monkeypatch.setattr(embedding_bf16, "get_embedder", fake)
    return calls


_PARITY = {"value": 0.99986}


@pytest.mark.parametrize(
    ("backend", "batch", "native", "expected"),
    [
        ("onnx", "auto", True, BACKEND),
        ("torch", "auto", True, BACKEND),
        ("onnx", "auto", False, "onnx"),  # emulated bfloat16 is slower than float32
        ("onnx", "same", True, "onnx"),
        ("onnx-int8", "auto", True, "onnx-int8"),  # its queries read a version of its own
        ("onnx", BACKEND, False, BACKEND),  # asked for by name: used even where emulated
        (BACKEND, "same", True, BACKEND),
    ],
)
def test_batch_backend_picks_the_cold_paths_embedder(
    made: list[str], monkeypatch: pytest.MonkeyPatch, backend: str, batch: str, native: bool, expected: str
) -> None:
    monkeypatch.setattr(embedding_bf16, "native_bf16", lambda: native)
    got = batch_embedder(EmbeddingSettings(backend=backend, batch_backend=batch))  # type: ignore[arg-type]
    assert got.backend == expected and got.model_id == "m"


def test_bf16_batches_whose_vectors_would_not_be_found_are_not_used(
    made: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedding_bf16, "native_bf16", lambda: True)
    monkeypatch.setitem(_PARITY, "value", 0.99)
    # auto: falls back to the queries' backend, so recall still finds every vector.
    got = batch_embedder(EmbeddingSettings(backend="onnx", batch_backend="auto"))
    assert got.backend == "onnx" and made == [BACKEND, "onnx"]
    # Decided once: the cold path asks on every model call.
    assert batch_embedder(EmbeddingSettings(backend="onnx", batch_backend="auto")) is got and len(made) == 2
    # Asked for by name: refused at load, naming the setting.
    with pytest.raises(ConfigError, match="batch_backend"):
        batch_embedder(EmbeddingSettings(backend="onnx", batch_backend=BACKEND))
    with pytest.raises(ConfigError, match="batch_backend"):
        batch_embedder(EmbeddingSettings(backend="onnx-int8", batch_backend=BACKEND))


def test_batch_backend_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="batch_backend"):
        EmbeddingSettings(batch_backend="fast")  # type: ignore[arg-type]
    assert load_settings(environ={}).embedding.batch_backend == "auto"
    assert load_settings(environ={"VCM_EMBEDDING__BATCH_BACKEND": "same"}).embedding.batch_backend == "same"
