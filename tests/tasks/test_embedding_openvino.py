"""The openvino backend: the ONNX export run by OpenVINO (bfloat16 where this CPU has it), its
parity with torch and the version it shares, late chunking's token states, the record of what
it was measured on, and runs from several threads at once."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from vcm.settings import load_settings
from vcm.settings.memory import EmbeddingSettings
from vcm.tasks import embedding_openvino, onnx_export
from vcm.tasks.embedding import Embedder, bundled_model_path, get_embedder
from vcm.tasks.embedding_onnx import PARITY_COSINE, OnnxEmbedder
from vcm.tasks.embedding_openvino import OpenVinoSession
from vcm.tasks.ingest.late_chunking import LateChunker
from vcm.tasks.onnx_export import ensure_export

pytestmark = pytest.mark.timeout(600)

TEXTS = ["The cat sat on the mat.", "ok", "What did Melanie paint last summer? " * 60, "Lisbon in March"]
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def ov(cache: Path) -> OnnxEmbedder:
    return OnnxEmbedder(EmbeddingSettings(backend="openvino", onnx_cache_dir=str(cache)))


@pytest.fixture(scope="module")
def torch_embedder() -> Embedder:
    return get_embedder(load_settings(environ={}).embedding.model_copy(update={"backend": "torch"}))


def test_openvino_vectors_share_the_models_version(ov: OnnxEmbedder, torch_embedder: Embedder, cache: Path) -> None:
    assert isinstance(ov.runner.session, OpenVinoSession) and ov.backend == "openvino"
    ours, theirs = ov.encode(TEXTS), torch_embedder.encode(TEXTS)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert (ours * theirs).sum(axis=1).min() >= PARITY_COSINE
    assert ov.parity >= PARITY_COSINE and ov.model_id == ov.base_model_id == MODEL_ID == torch_embedder.model_id
    # What the parity was measured on is recorded with it; the export file is the float32 one.
    record = onnx_export._read(ov.export.path.parent / "export.json")["backends"]["openvino"]
    assert record["runtime"] == embedding_openvino.runtime() and record["file"] == "model.onnx"
    assert record["runtime"]["precision"] == ("bf16" if embedding_openvino.native_bf16() else "f32")
    assert ov.export.path == ensure_export(str(bundled_model_path()), MODEL_ID, "onnx", str(cache)).path
    assert ov.encode([]).shape == (0, 384)


def test_openvino_token_states_serve_late_chunking(ov: OnnxEmbedder, torch_embedder: Embedder) -> None:
    rows = [[101, 2023, 2003, 1037, 3231, 102], [101, 7592, 102]]
    ours, theirs = ov.hidden_states(rows, 0), torch_embedder.hidden_states(rows, 0)
    assert [s.shape for s in ours] == [(6, 384), (3, 384)] and all(s.dtype == np.float32 for s in ours)
    for a, b in zip(ours, theirs, strict=True):
        cosines = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert cosines.min() > PARITY_COSINE
    text = "Alice moved to Lisbon. She loves the trams there. Bob visited her in March."
    settings = load_settings(environ={}).chunking
    late_o = np.vstack(LateChunker(ov).embed([LateChunker(ov).plan(text, settings)], "late"))
    late_t = np.vstack(LateChunker(torch_embedder).embed([LateChunker(torch_embedder).plan(text, settings)], "late"))
    assert (late_o * late_t).sum(axis=1).min() > PARITY_COSINE


def test_parity_is_measured_again_only_when_openvino_or_its_precision_changes(
    ov: OnnxEmbedder, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exported: list[str] = []
    real = onnx_export._export

    def counting(folder: Path, target: Path, backend: str, meta: dict[str, object]) -> dict[str, object]:
        exported.append(backend)
        return real(folder, target, backend, meta)

    monkeypatch.setattr(onnx_export, "_export", counting)
    source = str(bundled_model_path())
    assert ensure_export(source, MODEL_ID, "openvino", str(cache)).parity_min_cosine == ov.parity
    assert exported == []  # the record matches: nothing measured
    other = {**embedding_openvino.runtime(), "precision": "other"}
    monkeypatch.setattr(embedding_openvino, "runtime", lambda: other)
    again = ensure_export(source, MODEL_ID, "openvino", str(cache))
    assert exported == ["openvino"] and again.parity_min_cosine >= PARITY_COSINE
    assert onnx_export._read(again.path.parent / "export.json")["backends"]["openvino"]["runtime"] == other


def test_threads_embedding_at_once_each_get_their_own_vectors(ov: OnnxEmbedder) -> None:
    alone = {i: ov.encode([f"{t} {i}" for t in TEXTS]) for i in range(4)}
    got: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(3):
                got[i] = ov.encode([f"{t} {i}" for t in TEXTS])
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i, vectors in alone.items():  # one infer request per thread: no run sees another's inputs
        assert np.allclose(got[i], vectors, atol=1e-5)


@pytest.mark.parametrize(("threads", "cpus"), [(1, 2), (1, 1), (2, 4), (3, 2), (1, 64), (0, 8)])
def test_runs_on_set_threads_have_a_stream_each_of_the_cpus(ov: OnnxEmbedder, threads: int, cpus: int) -> None:
    """With ``threads`` set, runs of threads at once each take a stream of their own (they
    queued behind one another in one stream), each stream with ``threads`` of the cores OpenVINO
    counts; with the default, one stream has every core."""
    cores = int(embedding_openvino.open_session(ov.export.path, 0, cpus).compiled.get_property("INFERENCE_NUM_THREADS"))
    compiled = embedding_openvino.open_session(ov.export.path, threads, cpus).compiled
    streams = int(compiled.get_property("NUM_STREAMS"))
    assert streams == (max(1, min(cpus, cores) // threads) if threads else 1)
    if streams > 1:  # no stream left with fewer threads than a run asks for
        assert int(compiled.get_property("INFERENCE_NUM_THREADS")) == streams * threads


def test_the_compiled_model_is_cached_beside_the_export_and_dropped_with_it(ov: OnnxEmbedder, cache: Path) -> None:
    compiled = ov.export.path.parent / embedding_openvino.CACHE_FOLDER
    blobs = [f for f in compiled.iterdir() if f.is_file()]
    assert blobs, "OpenVINO wrote no compiled model next to the export"
    # A later session of the same export compiles from it, to the same vectors.
    again = OnnxEmbedder(EmbeddingSettings(backend="openvino", onnx_cache_dir=str(cache)))
    assert np.allclose(again.encode(TEXTS), ov.encode(TEXTS), atol=1e-6)
    # An export made again (here: its settings changed) leaves no compiled model of the old one.
    (compiled / "sentinel").write_text("of the old export")
    meta_path = ov.export.path.parent / "export.json"
    meta = onnx_export._read(meta_path)
    onnx_export._write_json(meta_path, {**meta, "format": -1})
    ensure_export(str(bundled_model_path()), MODEL_ID, "openvino", str(cache))
    assert not (compiled / "sentinel").exists()
