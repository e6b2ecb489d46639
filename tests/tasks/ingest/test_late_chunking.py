"""Late chunking (vcm.tasks.ingest.late_chunking): pure pooling, and the real bundled MiniLM on small texts."""

from __future__ import annotations

import numpy as np
import pytest

from vcm.errors import ConfigError
from vcm.settings import load_settings
from vcm.settings.memory import ChunkingSettings
from vcm.tasks.embedding import Embedder, get_embedder
from vcm.tasks.embedding_onnx import PARITY_COSINE
from vcm.tasks.ingest.chunking import Window, plan_windows
from vcm.tasks.ingest.late_chunking import DocumentPlan, LateChunker, pool_spans

PAGE = "Larry Page grew up in Michigan and studied computer science at Stanford. He founded it in 1998."


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    # get_embedder caches per process, so every test module shares one model load (~10 s).
    return get_embedder(load_settings(environ={}).embedding)


@pytest.fixture(scope="module")
def chunker(embedder: Embedder) -> LateChunker:
    return LateChunker(embedder)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- pooling (pure) -------------------------------------------------------------------------


def test_pool_spans_uses_each_token_from_its_keeping_window_only() -> None:
    # 10 tokens, windows of 6 with 2 overlapping; prefix of 1 special row per window.
    windows = plan_windows(10, 6, 2)
    assert len(windows) == 2
    rng = np.random.default_rng(0)
    truth = rng.normal(size=(10, 4))
    outputs = []
    for w in windows:
        rows = truth[w.start : w.end].copy()
        # Poison the outputs this window does not keep: pooling must never read them.
        for t in range(w.start, w.end):
            if not w.keep_start <= t < w.keep_end:
                rows[t - w.start] = 1e6
        outputs.append(np.vstack([np.full((1, 4), -1e6), rows, np.full((1, 4), -1e6)]))
    spans = [(0, 3), (3, 7), (7, 10)]
    pooled = pool_spans(outputs, windows, spans, prefix=1)
    for (a, b), vec in zip(spans, pooled, strict=True):
        mean = truth[a:b].mean(axis=0)
        np.testing.assert_allclose(vec, mean / np.linalg.norm(mean), rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(pooled, axis=1), 1.0, rtol=1e-6)


def test_pool_spans_handles_overlapping_chunks_and_single_window() -> None:
    truth = np.arange(1, 25, dtype=np.float64).reshape(6, 4)
    pooled = pool_spans([truth], [Window(0, 6, 0, 6)], [(0, 4), (2, 6)], prefix=0)
    expected = truth[2:6].mean(axis=0)
    np.testing.assert_allclose(pooled[1], expected / np.linalg.norm(expected), rtol=1e-6)
    with pytest.raises(ValueError):
        pool_spans([truth], [Window(0, 6, 0, 6), Window(0, 6, 0, 6)], [(0, 1)], prefix=0)


# --- the real model -----------------------------------------------------------------------


def _plan(chunker: LateChunker, text: str, **chunking: int) -> DocumentPlan:
    return chunker.plan(text, ChunkingSettings(**chunking))


def test_special_tokens_wrap_windows_as_the_model_expects(chunker: LateChunker, embedder: Embedder) -> None:
    assert (chunker.prefix, chunker.suffix) == ((101,), (102,))  # [CLS] ... [SEP]
    assert chunker.max_window == embedder.max_tokens - 2
    text = "The quick brown fox jumps over the lazy dog."
    plan = _plan(chunker, text, target_tokens=64)
    [hidden] = chunker._forward([chunker._wrap(plan, plan.windows[0])])
    # sentence-transformers' own token embeddings of the text (the torch backend, whatever the
    # configured one): same rows, specials included.
    torch_model = get_embedder(load_settings(environ={}).embedding.model_copy(update={"backend": "torch"})).model
    reference = torch_model.encode(text, output_value="token_embeddings", convert_to_numpy=True)
    # Row by row the same states: to float32's last digits on a float32 backend (the ONNX tests
    # hold that), to the parity tolerance where the default runs in bfloat16 (OpenVINO).
    reference = np.asarray(reference)
    assert hidden.shape == reference.shape
    cosines = (hidden * reference).sum(axis=1) / np.linalg.norm(hidden, axis=1) / np.linalg.norm(reference, axis=1)
    assert cosines.min() > PARITY_COSINE
    # A one-chunk document pooled with its special rows equals the model's sentence embedding.
    full = hidden.mean(axis=0)
    assert _cos(full, embedder.encode([text])[0]) > 0.9999


def test_chunks_carry_their_document_context(chunker: LateChunker, embedder: Embedder) -> None:
    plan = _plan(chunker, PAGE, target_tokens=16)
    assert [plan.chunk_text(c) for c in plan.chunks] == [
        "Larry Page grew up in Michigan and studied computer science at Stanford.",
        "He founded it in 1998.",
    ]
    [late] = chunker.embed([plan], "late")
    [naive] = chunker.embed([plan], "naive")
    assert late.shape == naive.shape == (2, embedder.dimension)
    np.testing.assert_allclose(np.linalg.norm(late, axis=1), 1.0, rtol=1e-5)
    # The pronoun chunk knows who "he" is only when embedded in context.
    query = embedder.encode(["Larry Page"])[0]
    assert float(late[1] @ query) > float(naive[1] @ query) + 0.05
    assert _cos(late[1], naive[1]) < 0.95  # late is not the naive embedding in disguise


def test_embedding_is_deterministic_and_independent_of_batch_company(chunker: LateChunker) -> None:
    plan = _plan(chunker, PAGE, target_tokens=16)
    other = _plan(chunker, "Completely unrelated words about a cooking recipe with garlic. " * 30)
    [first] = chunker.embed([plan])
    [again] = chunker.embed([plan])
    np.testing.assert_array_equal(first, again)
    together = chunker.embed([other, plan, other])
    np.testing.assert_allclose(together[1], first, atol=1e-5)  # padding must not leak into outputs


def test_long_document_goes_through_macro_windows(chunker: LateChunker) -> None:
    sentences = [f"Report {i}: the {['red', 'green', 'blue'][i % 3]} team shipped feature {i}." for i in range(120)]
    text = " ".join(sentences)
    plan = _plan(chunker, text, target_tokens=48, window_overlap_tokens=32)
    assert len(plan.token_ids) > 3 * chunker.max_window
    assert len(plan.windows) >= 4
    assert all(w.tokens <= chunker.max_window for w in plan.windows)
    assert any(  # some chunk straddles a window cut and still gets one vector
        any(c.start < w.keep_end < c.end for w in plan.windows[:-1]) for c in plan.chunks
    )
    [late] = chunker.embed([plan])
    assert late.shape == (len(plan.chunks), chunker.embedder.dimension)
    assert np.all(np.isfinite(late))
    np.testing.assert_allclose(np.linalg.norm(late, axis=1), 1.0, rtol=1e-5)
    # Chunk text and offsets agree for every chunk.
    for c in plan.chunks:
        assert plan.chunk_text(c) == text[c.char_start : c.char_end]
        assert plan.chunk_text(c).strip() == plan.chunk_text(c)


def test_window_choice_barely_moves_a_chunk_far_from_window_edges(chunker: LateChunker) -> None:
    # The same chunk embedded inside a one-window prefix of the document and inside the long
    # document agree closely when it sits well within its window either way.
    body = " ".join(f"Note {i} says the meeting moved to room {i + 10}." for i in range(60))
    short = _plan(chunker, body[:600], target_tokens=32)
    long = _plan(chunker, body, target_tokens=32)
    assert len(short.windows) == 1 and len(long.windows) > 1
    [a] = chunker.embed([short])
    [b] = chunker.embed([long])
    # Chunk 2 is in the first window of both documents and far from its right edge.
    assert short.chunks[2] == long.chunks[2]
    assert long.chunks[2].end < long.windows[0].keep_end - 64
    assert _cos(a[2], b[2]) > 0.97


def test_unicode_offsets_map_chunks_back_to_text(chunker: LateChunker) -> None:
    text = "Café naïve — ünïcode 😀 works.\nZürich is in Switzerland. 日本語 text too!"
    plan = _plan(chunker, text, target_tokens=8)
    texts = [plan.chunk_text(c) for c in plan.chunks]
    assert texts[0].startswith("Café") and texts[-1].endswith("too!")
    assert all(t and t == text[c.char_start : c.char_end] for t, c in zip(texts, plan.chunks, strict=True))


def test_chunk_size_must_fit_the_model_window(chunker: LateChunker) -> None:
    with pytest.raises(ConfigError) as info:
        _plan(chunker, PAGE, target_tokens=300)
    assert info.value.details["setting"] == "chunking.target_tokens"
    with pytest.raises(ConfigError):
        _plan(chunker, PAGE, window_overlap_tokens=254)
    with pytest.raises(ValueError):
        chunker.embed([_plan(chunker, PAGE)], "sentence")  # type: ignore[arg-type]


def test_a_text_without_tokens_plans_nothing(chunker: LateChunker) -> None:
    plan = _plan(chunker, "   \n\t ")
    assert plan.chunks == () and plan.windows == ()
    assert chunker.embed([plan])[0].shape == (0, chunker.embedder.dimension)
