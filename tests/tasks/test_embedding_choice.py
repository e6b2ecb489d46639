"""The cold path's choice of backend for its batches (``[embedding] batch_backend``) and the
query backend ``"auto"`` decides: which embedder each setting gives on CPUs with and without
bfloat16 arithmetic, and that a backend whose vectors would be a version of their own is never
picked by "auto" and refused by name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from vcm.errors import ConfigError
from vcm.settings import load_settings
from vcm.settings.memory import EmbeddingSettings
from vcm.tasks import embedding, embedding_choice
from vcm.tasks.embedding_choice import batch_embedder
from vcm.tasks.embedding_onnx import PARITY_COSINE

OV, BF16 = "openvino", "torch-bf16"


@dataclass
class _Made:
    backend: str
    model_id: str
    base_model_id: str = "m"
    parity: float = 1.0


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The choice's loads, recorded: a bfloat16 embedder at the parity in ``_PARITY`` (a version
    of its own below the tolerance), any other the model's version; no earlier choice."""
    calls: list[str] = []
    monkeypatch.setattr(embedding_choice, "_chosen", {})

    def fake(settings: EmbeddingSettings) -> _Made:
        calls.append(settings.backend)
        backend = embedding_choice.resolved_backend(settings)  # as get_embedder resolves "auto"
        parity = _PARITY.get(backend, 1.0)
        return _Made(backend, "m" if parity >= PARITY_COSINE else f"m+{backend}", parity=parity)

    monkeypatch.setattr(embedding_choice, "get_embedder", fake)
    return calls


_PARITY: dict[str, float | None] = {OV: 0.99997, BF16: 0.99986}


def _native(monkeypatch: pytest.MonkeyPatch, *backends: str) -> None:
    monkeypatch.setattr(embedding_choice, "native", lambda backend: backend in backends)


@pytest.mark.parametrize(
    ("backend", "batch", "native", "expected"),
    [
        ("onnx", "auto", (OV, BF16), OV),  # OpenVINO first: faster, and free of the GIL
        ("torch", "auto", (OV, BF16), OV),
        ("onnx", "auto", (BF16,), BF16),  # no OpenVINO bfloat16 (not installed): torch's
        ("onnx", "auto", (), "onnx"),  # emulated bfloat16 is slower than float32
        ("onnx", "same", (OV, BF16), "onnx"),
        (OV, "auto", (OV, BF16), OV),  # batches as it queries
        (BF16, "auto", (OV, BF16), BF16),
        ("onnx-int8", "auto", (OV, BF16), "onnx-int8"),  # its queries read a version of their own
        ("onnx", BF16, (), BF16),  # asked for by name: used even where emulated
        ("onnx", OV, (), OV),  # by name: float32 where the CPU has no bfloat16
        (OV, BF16, (OV, BF16), BF16),
    ],
)
def test_batch_backend_picks_the_cold_paths_embedder(
    made: list[str],
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    batch: str,
    native: tuple[str, ...],
    expected: str,
) -> None:
    _native(monkeypatch, *native)
    got = batch_embedder(EmbeddingSettings(backend=backend, batch_backend=batch))  # type: ignore[arg-type]
    assert got.backend == expected and got.model_id == "m"


def test_auto_batches_follow_the_backend_auto_resolves_to(made: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    _native(monkeypatch, OV, BF16)
    monkeypatch.setattr(embedding_choice, "resolved_backend", lambda s: OV if s.backend == "auto" else s.backend)
    assert batch_embedder(EmbeddingSettings(backend="auto")).backend == OV and made == ["auto"]
    monkeypatch.setattr(embedding_choice, "_chosen", {})
    monkeypatch.setattr(embedding_choice, "resolved_backend", lambda s: "onnx" if s.backend == "auto" else s.backend)
    # auto found OpenVINO missing, failing or off the version: not tried again, torch's bfloat16 is.
    assert batch_embedder(EmbeddingSettings(backend="auto")).backend == BF16 and made[1:] == [BF16]


def test_bf16_batches_whose_vectors_would_not_be_found_are_not_used(
    made: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _native(monkeypatch, OV, BF16)
    monkeypatch.setitem(_PARITY, OV, 0.99)
    # auto: the next bfloat16 backend whose vectors share the version.
    got = batch_embedder(EmbeddingSettings(backend="onnx", batch_backend="auto"))
    assert got.backend == BF16 and made == [OV, BF16]
    monkeypatch.setitem(_PARITY, BF16, 0.99)
    monkeypatch.setattr(embedding_choice, "_chosen", {})
    made.clear()
    # None does: the queries' backend, so recall still finds every vector.
    got = batch_embedder(EmbeddingSettings(backend="onnx", batch_backend="auto"))
    assert got.backend == "onnx" and made == [OV, BF16, "onnx"]
    # Decided once: the cold path asks on every model call.
    assert batch_embedder(EmbeddingSettings(backend="onnx", batch_backend="auto")) is got and len(made) == 3
    # Asked for by name: refused at load, naming the setting.
    for name in (OV, BF16):
        with pytest.raises(ConfigError, match="batch_backend"):
            batch_embedder(EmbeddingSettings(backend="onnx", batch_backend=name))  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="batch_backend"):
            batch_embedder(EmbeddingSettings(backend="onnx-int8", batch_backend=name))  # type: ignore[arg-type]


def test_a_batch_backend_by_name_must_share_the_queries_version(
    made: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _native(monkeypatch, OV, BF16)
    monkeypatch.setitem(_PARITY, OV, 0.99)  # OpenVINO's queries: a version of their own
    with pytest.raises(ConfigError, match="version of its own"):
        batch_embedder(EmbeddingSettings(backend=OV, batch_backend=BF16))
    assert made == [OV]  # torch's bfloat16 was not even loaded


def test_a_runtime_that_fails_to_load_is_passed_over_or_named(made: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    _native(monkeypatch, OV, BF16)
    real = embedding_choice.get_embedder

    def failing(settings: EmbeddingSettings) -> object:
        if settings.backend == OV:
            raise ImportError("no openvino", name="openvino")
        return real(settings)

    monkeypatch.setattr(embedding_choice, "get_embedder", failing)
    assert batch_embedder(EmbeddingSettings(backend="onnx")).backend == BF16  # auto: the next one
    with pytest.raises(ConfigError, match="needs the openvino package"):
        batch_embedder(EmbeddingSettings(backend="onnx", batch_backend=OV))


def test_batch_backend_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="batch_backend"):
        EmbeddingSettings(batch_backend="fast")  # type: ignore[arg-type]
    assert load_settings(environ={}).embedding.batch_backend == "auto"
    assert load_settings(environ={"VCM_EMBEDDING__BATCH_BACKEND": "same"}).embedding.batch_backend == "same"
    assert load_settings(environ={"VCM_EMBEDDING__BATCH_BACKEND": OV}).embedding.batch_backend == OV


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``get_embedder``'s loads for "auto", recorded: OpenVINO at the parity in ``_PARITY``."""
    calls: list[str] = []
    monkeypatch.setattr(embedding, "_resolved", {})
    monkeypatch.setattr(embedding, "_cache", {})

    class Fake(_Made):
        def __init__(self, settings: EmbeddingSettings) -> None:
            calls.append(settings.backend)
            parity = _PARITY.get(settings.backend, 1.0)
            if parity is None:
                raise RuntimeError("an operator this runtime lacks")
            super().__init__(
                settings.backend, "m" if parity >= PARITY_COSINE else f"m+{settings.backend}", parity=parity
            )

    from vcm.tasks import embedding_onnx

    monkeypatch.setattr(embedding_onnx, "OnnxEmbedder", Fake)
    monkeypatch.setattr(embedding, "settle_heap", lambda: None)
    return calls


@pytest.mark.parametrize(
    ("native", "parity", "expected"),
    [(True, 0.99997, OV), (True, 0.99, "onnx"), (False, 1.0, "onnx"), (True, None, "onnx")],  # None: fails to load
)
def test_backend_auto_is_openvino_where_its_bfloat16_keeps_the_version(
    loads: list[str], monkeypatch: pytest.MonkeyPatch, native: bool, parity: float | None, expected: str
) -> None:
    from vcm.tasks import embedding_openvino

    monkeypatch.setattr(embedding_openvino, "native_bf16", lambda: native)
    monkeypatch.setitem(_PARITY, OV, parity)
    settings = EmbeddingSettings(backend="auto")
    got = embedding.get_embedder(settings)
    assert got.backend == expected and got.model_id == "m"
    # Decided once per process, and an OpenVINO model it will not run is not kept.
    assert embedding.get_embedder(settings) is got and loads.count(expected) == 1
    assert all(key[0] != OV for key in embedding._cache) or expected == OV
    assert embedding.resolved_backend(EmbeddingSettings(backend="auto", device="cuda")) == "torch"
    assert embedding.resolved_backend(EmbeddingSettings(backend="onnx-int8")) == "onnx-int8"


def test_backend_setting_names_auto_and_openvino() -> None:
    assert load_settings(environ={}).embedding.backend == "auto"
    assert load_settings(environ={"VCM_EMBEDDING__BACKEND": OV}).embedding.backend == OV
    with pytest.raises(ValueError, match="CPU only"):
        EmbeddingSettings(backend=OV, device="cuda")
    EmbeddingSettings(backend="auto", device="cuda")  # resolves to torch there


@pytest.mark.parametrize(
    ("flags", "native"),
    [("fpu avx512f avx512_bf16 avx512_vnni", True), ("fpu amx_bf16 amx_tile", True), ("fpu avx2 avx_vnni", False)],
)
def test_bfloat16_counts_as_native_only_with_avx512_bf16_or_amx(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: str, native: bool
) -> None:
    """OpenVINO's BF16 capability also covers AVX2-VNNI-2 client cores, which only convert it."""
    from vcm.tasks import embedding_openvino

    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    assert embedding_openvino.cpu_flags(info) == set(flags.split())
    assert embedding_openvino.cpu_flags(tmp_path / "missing") is None

    class Core:
        def get_property(self, device: str, name: str) -> list[str]:
            return ["BF16", "FP32"]

    monkeypatch.setattr(embedding_openvino, "_core", lambda: Core())
    monkeypatch.setattr(embedding_openvino, "cpu_flags", lambda: set(flags.split()))
    embedding_openvino.native_bf16.cache_clear()
    try:
        assert embedding_openvino.native_bf16() is native
    finally:
        embedding_openvino.native_bf16.cache_clear()
