"""The torch-bf16 backend: parity with float32, one embedding version with the queries' backend,
late chunking's token states (the choice of batch backend: test_embedding_choice.py)."""

from __future__ import annotations

import numpy as np
import pytest

from vcm.settings import load_settings
from vcm.tasks.embedding import Embedder, get_embedder
from vcm.tasks.embedding_bf16 import BACKEND, Bf16Embedder
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
