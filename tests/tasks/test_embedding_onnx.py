"""The ONNX embedding backends: export and cache, parity with torch, late chunking's token
states, versions, and the setting's checks. The bundled MiniLM is exported once per session into
a temporary cache (a few seconds); the int8 export is slow-marked."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from vcm.errors import ConfigError
from vcm.settings import load_settings
from vcm.settings.memory import EmbeddingSettings
from vcm.tasks import embedding, embedding_onnx
from vcm.tasks.embedding import Embedder, bundled_model_path, get_embedder
from vcm.tasks.embedding_onnx import (
    PARITY_COSINE,
    OnnxEmbedder,
    OnnxRunner,
    cpus_idle,
    idle_enough,
    nice_of,
    niced_runnable_ids,
    pool,
    runnable_below,
    spin_allowed,
)
from vcm.tasks.ingest.late_chunking import LateChunker
from vcm.tasks.onnx_export import FILES, cache_folder, cache_root, ensure_export

pytestmark = pytest.mark.timeout(600)

TEXTS = ["The cat sat on the mat.", "ok", "What did Melanie paint last summer? " * 60, "Lisbon in March"]
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
# Two long texts of one token length (86), three short ones (3).
MIXED = ["ok", "What did Melanie paint last summer? " * 12, "yes", "What did Caroline paint last winter? " * 12, "fine"]


@pytest.fixture(scope="module")
def model_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the bundled model, so a test can change its files."""
    target = tmp_path_factory.mktemp("model") / "minilm"
    shutil.copytree(bundled_model_path(), target)
    return target


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def onnx(model_copy: Path, cache: Path) -> OnnxEmbedder:
    return OnnxEmbedder(EmbeddingSettings(model=str(model_copy), backend="onnx", onnx_cache_dir=str(cache)))


@pytest.fixture(scope="module")
def torch_embedder() -> Embedder:
    # The process-wide one the other model tests share (one load per session).
    return get_embedder(load_settings(environ={}).embedding.model_copy(update={"backend": "torch"}))


def test_a_model_a_process_loads_is_kept_out_of_the_cyclic_collector(
    model_copy: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The full passes of the collector walked torch's and transformers' objects in pauses of
    250-330 ms inside eviction jobs (tasks.embedding.settle_heap)."""
    # A key of its own (an ONNX embedder's thread count is part of its key), so it loads here.
    settings = EmbeddingSettings(model=str(model_copy), backend="onnx", onnx_cache_dir=str(cache), threads=3)
    before = gc.get_freeze_count()
    embedder = get_embedder(settings)
    frozen = gc.get_freeze_count()
    assert frozen > before
    tracked = {id(o) for o in gc.get_objects()}
    assert id(embedder) not in tracked and id(embedder.runner) not in tracked
    # A model already loaded costs no collection. (The freeze count itself may fall meanwhile:
    # the session's huge-page thread ends in the background and its frozen frames are freed.)
    settled: list[None] = []
    monkeypatch.setattr(embedding, "settle_heap", lambda: settled.append(None))
    assert get_embedder(settings) is embedder and settled == []


def test_onnx_matches_torch_sentence_vectors(onnx: OnnxEmbedder, torch_embedder: Embedder) -> None:
    ours, theirs = onnx.encode(TEXTS), torch_embedder.encode(TEXTS)
    assert ours.shape == theirs.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert (ours * theirs).sum(axis=1).min() > 0.999
    assert onnx.encode([]).shape == (0, 384)


def test_a_batch_runs_in_calls_of_similar_length_with_each_texts_own_vector(
    onnx: OnnxEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Long and short texts in one batch run in separate calls, each padded to its own longest,
    and every text gets the vector it gets alone, in its place."""
    runner = onnx.runner
    calls: list[tuple[tuple[int, int], bool]] = []  # each call's shape, and whether it may spin
    states = runner.states

    def recorded(ids: np.ndarray, mask: np.ndarray, *, eager: bool = True) -> np.ndarray:
        calls.append((ids.shape, eager))
        return states(ids, mask, eager=eager)

    monkeypatch.setattr(runner, "states", recorded)
    # The cut pays while the call's cost (per thread of the model) stays under the padding saved.
    monkeypatch.setattr(embedding_onnx, "CALL_TOKENS", 1)
    together = onnx.encode(MIXED)
    shapes = [shape for shape, _ in calls]
    assert len(shapes) == 2 and sorted(rows for rows, _ in shapes) == [2, 3]  # the long pair, the short three
    assert min(width for _, width in shapes) < 8  # the short ones are not padded to the long ones' width
    alone = np.concatenate([onnx.encode([t]) for t in MIXED])
    assert np.allclose(together, alone, atol=1e-5)
    # A short group of a long batch is no query: it never runs on the spinning session.
    calls.clear()
    onnx.encode([*MIXED, "What did Melanie paint last autumn? " * 12])  # 3 x 86 + 3 x 3 tokens: over 256
    onnx.encode(["ok", "fine"])
    assert [eager for _, eager in calls] == [False, False, True]
    ids, mask = runner.padded([[5, 6], [7]])  # BERT's tokenizer pads on the right, with its pad id
    assert ids.tolist() == [[5, 6], [7, runner.tokenizer.pad_token_id]] and mask.tolist() == [[1, 1], [1, 0]]


def test_torch_on_the_cpu_also_embeds_in_calls_of_similar_length(
    torch_embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    encode = torch_embedder._encode

    def recorded(batch: list[str], batch_size: int) -> np.ndarray:
        calls.append(batch)
        return encode(batch, batch_size)

    monkeypatch.setattr(torch_embedder, "_encode", recorded)
    # Lengths come from a copy of the Rust tokenizer: a call on the model's own would switch its
    # padding off under sentence-transformers' padded calls in other threads.
    counter = torch_embedder._length_counter()
    assert counter is not torch_embedder.model.tokenizer.backend_tokenizer
    long = "word " * 2000
    assert [len(e.ids) for e in counter.encode_batch(["ok", long])] == [3, torch_embedder.max_tokens]
    monkeypatch.setattr(embedding, "CALL_TOKENS", 1)  # as above: the cut pays on any number of threads
    together = torch_embedder.encode(MIXED)
    assert sorted(len(c) for c in calls) == [2, 3] and {len(t) for t in calls[0]} != {len(t) for t in calls[1]}
    alone = np.concatenate([torch_embedder.encode([t]) for t in MIXED])
    assert np.allclose(together, alone, atol=1e-5)


def test_attention_is_exported_in_its_eager_form(onnx: OnnxEmbedder) -> None:
    """SDPA's export guards every layer's masked softmax (IsNaN, Where), which ONNX Runtime ran
    5-12 % slower; the eager form is plain MatMul and Softmax, with the same vectors (above)."""
    import onnx as onnx_lib

    ops = [node.op_type for node in onnx_lib.load(str(onnx.export.path)).graph.node]
    assert ops.count("Softmax") == 6  # one per MiniLM layer
    assert "IsNaN" not in ops


def test_fp32_shares_torch_version(onnx: OnnxEmbedder, model_copy: Path) -> None:
    # The copy's id is its folder name, as torch's would be; parity was measured at export.
    assert onnx.parity >= PARITY_COSINE
    assert onnx.model_id == onnx.base_model_id == model_copy.name
    assert onnx.dimension == 384 and onnx.max_tokens == 256


def test_hidden_states_match_torch_for_late_chunking(onnx: OnnxEmbedder, torch_embedder: Embedder) -> None:
    rows = [[101, 2023, 2003, 1037, 3231, 102], [101, 7592, 102]]
    ours, theirs = onnx.hidden_states(rows, 0), torch_embedder.hidden_states(rows, 0)
    assert [s.shape for s in ours] == [(6, 384), (3, 384)]
    for a, b in zip(ours, theirs, strict=True):
        assert np.abs(a - b).max() < 1e-3
    # Late chunking end to end: the same chunk vectors from both backends.
    text = "Alice moved to Lisbon. She loves the trams there. Bob visited her in March."
    settings = load_settings(environ={}).chunking
    plan_o, plan_t = LateChunker(onnx).plan(text, settings), LateChunker(torch_embedder).plan(text, settings)
    assert plan_o.token_ids == plan_t.token_ids
    late_o = np.vstack(LateChunker(onnx).embed([plan_o], "late"))
    late_t = np.vstack(LateChunker(torch_embedder).embed([plan_t], "late"))
    assert (late_o * late_t).sum(axis=1).min() > 0.999


def test_export_cached_and_redone_when_the_model_changes(onnx: OnnxEmbedder, model_copy: Path, cache: Path) -> None:
    folder = cache_folder(cache, model_copy.name, model_copy.resolve())
    meta = json.loads((folder / "export.json").read_text())
    assert meta["opset"] and meta["torch"] and meta["pooling"] == ["mean"] and meta["normalize"] is True
    assert meta["backends"]["onnx"]["quantization"] is None
    exported = (folder / FILES["onnx"]).stat().st_mtime_ns
    # Unchanged model: the cached export is used as it is.
    again = ensure_export(str(model_copy), model_copy.name, "onnx", str(cache))
    assert again.path == folder / FILES["onnx"] and again.path.stat().st_mtime_ns == exported
    # A changed weight file (same size, new content): its checksum differs, so it is exported again.
    weights = model_copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    original = bytes(data)
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    try:
        ensure_export(str(model_copy), model_copy.name, "onnx", str(cache))
        redone = json.loads((folder / "export.json").read_text())
        assert redone["weights_sha256"] != meta["weights_sha256"]
        assert (folder / FILES["onnx"]).stat().st_mtime_ns != exported
    finally:
        weights.write_bytes(original)


def test_pooling_follows_the_model_config() -> None:
    states = np.array([[[1.0, 0.0], [3.0, 4.0], [9.0, 9.0]]], dtype=np.float32)
    mask = np.array([[1, 1, 0]], dtype=np.int64)  # the third token is padding
    assert pool(states, mask, ["mean"]).tolist() == [[2.0, 2.0]]
    assert pool(states, mask, ["cls"]).tolist() == [[1.0, 0.0]]
    assert pool(states, mask, ["max"]).tolist() == [[3.0, 4.0]]
    assert pool(states, mask, ["lasttoken"]).tolist() == [[3.0, 4.0]]
    assert pool(states, mask, ["cls", "mean"]).shape == (1, 4)
    with pytest.raises(ValueError, match="unknown pooling"):
        pool(states, mask, ["weighted"])


@pytest.mark.slow
def test_int8_has_a_version_of_its_own(model_copy: Path, cache: Path, torch_embedder: Embedder) -> None:
    int8 = OnnxEmbedder(EmbeddingSettings(model=str(model_copy), backend="onnx-int8", onnx_cache_dir=str(cache)))
    # Measured at export: int8 vectors are close to torch's but not interchangeable with them.
    assert int8.parity < PARITY_COSINE
    assert int8.model_id == f"{model_copy.name}+onnx-int8"
    assert (int8.encode(TEXTS) * torch_embedder.encode(TEXTS)).sum(axis=1).min() > 0.8
    meta = json.loads((cache_folder(cache, model_copy.name, model_copy.resolve()) / "export.json").read_text())
    assert meta["backends"]["onnx-int8"]["quantization"]["method"] == "quantize_dynamic"


def test_bad_backend_setting_refused() -> None:
    with pytest.raises(ConfigError, match=r"embedding\.backend.*VCM_EMBEDDING__BACKEND"):
        load_settings(environ={"VCM_EMBEDDING__BACKEND": "tensorrt"})
    with pytest.raises(ConfigError, match="runs on the CPU only"):
        load_settings(environ={"VCM_EMBEDDING__BACKEND": "onnx", "VCM_EMBEDDING__DEVICE": "cuda"})
    assert load_settings(environ={"VCM_EMBEDDING__BACKEND": "onnx-int8"}).embedding.backend == "onnx-int8"


def test_unwritable_cache_is_a_config_error(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    with pytest.raises(ConfigError, match="onnx_cache_dir"):
        ensure_export(str(bundled_model_path()), MODEL_ID, "onnx", str(blocked))


def test_cache_root_default_is_the_users_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root("") == tmp_path / "vcm" / "onnx"
    assert cache_root("/srv/x") == Path("/srv/x")


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield


def test_a_tokenizer_that_agrees_runs_without_torch(onnx: OnnxEmbedder, model_copy: Path, cache: Path) -> None:
    """The export records whether the model's tokenizer.json, read as a plain fast tokenizer,
    tokenizes as the model's own class; then a process running the export imports no torch
    (AutoTokenizer did, through transformers' configuration code: ~2 s at every start)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    assert onnx.export.fast_tokenizer and type(onnx.tokenizer) is PreTrainedTokenizerFast
    own = AutoTokenizer.from_pretrained(str(onnx.export.tokenizer_folder))
    for text in TEXTS:
        assert onnx.tokenizer(text)["input_ids"] == own(text)["input_ids"]
    # Current with the model's files first (a test above changed and restored a weight file).
    assert ensure_export(str(model_copy), model_copy.name, "onnx", str(cache)).fast_tokenizer
    settings = f"model={str(model_copy)!r}, backend='onnx', onnx_cache_dir={str(cache)!r}"
    loaded = "'torch' in sys.modules, 'transformers.models.auto' in sys.modules"
    probe = (
        "import json, sys\n"
        "from vcm.settings.memory import EmbeddingSettings\n"
        "from vcm.tasks.embedding_onnx import OnnxEmbedder\n"
        f"e = OnnxEmbedder(EmbeddingSettings({settings}))\n"
        f"print(json.dumps([e.encode(['ok']).shape[1], {loaded}]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=240, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == [384, False, False]


def test_a_tokenizer_its_config_overrides_keeps_the_models_class(tmp_path: Path, cache: Path) -> None:
    """A BERT whose tokenizer_config.json says no lower-casing while its tokenizer.json lower-cases:
    the model's own class rebuilds the normaliser, a plain read would not, so the export keeps
    AutoTokenizer (and its vectors still match torch's)."""
    from transformers import AutoTokenizer

    model = tmp_path / "cased"
    shutil.copytree(bundled_model_path(), model)
    config = model / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "do_lower_case": False}))
    export = ensure_export(str(model), model.name, "onnx", str(cache))
    assert export.fast_tokenizer is False
    embedder = OnnxEmbedder(EmbeddingSettings(model=str(model), backend="onnx", onnx_cache_dir=str(cache)))
    own = AutoTokenizer.from_pretrained(str(export.tokenizer_folder))
    assert embedder.tokenizer("Caroline")["input_ids"] == own("Caroline")["input_ids"]
    assert embedder.parity >= PARITY_COSINE


@pytest.mark.parametrize(
    ("running", "threads", "cpus", "idle"),
    [(1, 2, 2, True), (2, 2, 2, False), (1, 1, 1, True), (3, 2, 4, True), (4, 2, 4, False), (1, 4, 2, False)],
)
def test_a_run_spins_only_when_its_threads_each_find_a_cpu(running: int, threads: int, cpus: int, idle: bool) -> None:
    assert idle_enough(running, threads, cpus) is idle


def test_cpus_idle_reads_the_kernels_runnable_count(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real_open = open

    def reading(text: str) -> None:
        fake = tmp_path / "loadavg"
        fake.write_text(text)
        monkeypatch.setattr(
            "builtins.open", lambda path, *a, **k: real_open(fake if path == "/proc/loadavg" else path, *a, **k)
        )

    niced = {"runnable": 0}
    monkeypatch.setattr("vcm.tasks.embedding_onnx.niced_runnable_threads", lambda: niced["runnable"])
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    reading("0.10 0.20 0.30 1/136 4242\n")
    assert cpus_idle(2) is True
    reading("0.10 0.20 0.30 2/136 4242\n")
    assert cpus_idle(2) is False
    niced["runnable"] = 1  # the other runnable task is one of this process's background threads
    assert cpus_idle(2) is True
    reading("0.10 0.20 0.30 3/136 4242\n")  # and one more, of normal priority
    assert cpus_idle(2) is False
    reading("garbled\n")  # unreadable: sleep, as without the setting
    assert cpus_idle(1) is False


@pytest.mark.parametrize(
    ("stat", "nice", "below"),
    [
        (b"4242 (python) R 1 4242 4242 0 -1 4194560 9 0 0 0 3 1 0 0 30 10 14 0 7 0 0", 0, True),
        (b"4242 (python) S 1 4242 4242 0 -1 4194560 9 0 0 0 3 1 0 0 30 10 14 0 7 0 0", 0, False),  # asleep
        (b"4242 (python) R 1 4242 4242 0 -1 4194560 9 0 0 0 3 1 0 0 20 0 14 0 7 0 0", 0, False),  # as the caller
        (b"4242 (python) R 1 4242 4242 0 -1 4194560 9 0 0 0 3 1 0 0 30 10 14 0 7 0 0", 10, False),
        (b"77 (a (b) R c) R 1 77 77 0 -1 4194560 9 0 0 0 3 1 0 0 39 19 1 0 7 0 0", 5, True),  # a name with ") R"
        (b"77 (cut", 0, False),  # unreadable lines count as not runnable
        (b"77 (x) R 1 2", 0, False),
    ],
)
def test_a_stat_line_says_whether_a_thread_is_runnable_below_the_callers_priority(
    stat: bytes, nice: int, below: bool
) -> None:
    assert runnable_below(stat, nice) is below


@pytest.mark.parametrize(
    ("stat", "nice"),
    [
        (b"4242 (python) R 1 4242 4242 0 -1 4194560 9 0 0 0 3 1 0 0 30 10 14 0 7 0 0", 10),
        (b"77 (a (b) R c) S 1 77 77 0 -1 4194560 9 0 0 0 3 1 0 0 20 -5 1 0 7 0 0", -5),
        (b"77 (cut", None),
        (b"77 (x) R 1 2", None),
    ],
)
def test_a_stat_line_gives_the_threads_nice_value(stat: bytes, nice: int | None) -> None:
    assert nice_of(stat) == nice


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads Linux's /proc/self/task")
def test_threads_known_to_run_at_the_callers_priority_are_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading every thread's stat file took ~1 ms a query in a process of 80 threads: a thread
    read once at the caller's priority or above is read again only after NICE_KNOWN_S."""
    monkeypatch.setattr("vcm.tasks.embedding_onnx.NICE_SCAN_MAX_THREADS", 10_000)
    monkeypatch.setattr("vcm.tasks.embedding_onnx._NICE", embedding_onnx._NiceValues())
    read: list[str] = []
    real = embedding_onnx.read_stat
    monkeypatch.setattr("vcm.tasks.embedding_onnx.read_stat", lambda tid: read.append(tid) or real(tid))
    stop = threading.Event()
    lowered: list[int] = []

    def lower_then_wait() -> None:
        with contextlib.suppress(OSError):
            me = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + 10))
            lowered.append(me)
        stop.wait()

    waiting = [threading.Thread(target=stop.wait, daemon=True) for _ in range(20)]
    niced = threading.Thread(target=lower_then_wait, daemon=True)
    for t in [*waiting, niced]:
        t.start()
    try:
        deadline = time.monotonic() + 10
        while not lowered and niced.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        if not lowered or mine >= 19:
            pytest.skip("no thread can run at a lower priority here")
        plain = {str(t.native_id) for t in waiting}
        niced_runnable_ids()
        assert plain | {str(lowered[0])} <= set(read)  # the first scan reads every thread
        read.clear()
        niced_runnable_ids()
        assert not plain & set(read)  # at this thread's priority: not read again
        assert str(lowered[0]) in read  # below it: read at every scan, since it may be runnable
        monkeypatch.setattr("vcm.tasks.embedding_onnx.NICE_KNOWN_S", 0.0)
        read.clear()
        niced_runnable_ids()
        assert plain <= set(read)  # their values trusted no longer
    finally:
        stop.set()
        for t in [*waiting, niced]:
            t.join()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads Linux's /proc/self/task")
def test_a_request_thread_that_finds_another_scanning_does_without(monkeypatch: pytest.MonkeyPatch) -> None:
    """One scan at a time over the shared nice values (two at once could change the dict one of
    them iterates, failing the query): a thread that finds a scan under way counts no thread of
    a lower priority, without waiting, so its check errs towards the sleeping session."""
    monkeypatch.setattr("vcm.tasks.embedding_onnx.NICE_SCAN_MAX_THREADS", 10_000)
    monkeypatch.setattr("vcm.tasks.embedding_onnx._NICE", embedding_onnx._NiceValues())
    during: list[tuple[list[int], float]] = []
    readers: set[int] = set()
    real = embedding_onnx.read_stat

    def reading(tid: str) -> bytes | None:
        readers.add(threading.get_ident())
        if not during and threading.current_thread() is threading.main_thread():
            # another request thread checks while this scan reads its first file
            other: list[list[int]] = []
            t0 = time.monotonic()
            checker = threading.Thread(target=lambda: other.append(niced_runnable_ids()))
            checker.start()
            checker.join(timeout=5)
            during.append((other[0], time.monotonic() - t0))
        return real(tid)

    monkeypatch.setattr("vcm.tasks.embedding_onnx.read_stat", reading)
    niced_runnable_ids()
    assert during and during[0][0] == [] and during[0][1] < 1.0  # answered at once, nothing subtracted
    assert readers == {threading.get_ident()}  # the other thread read no file
    assert embedding_onnx._NICE.values  # the first scan completed and remembered what it read
    assert not embedding_onnx._NICE.lock.locked()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads Linux's /proc/self/task")
def test_busy_threads_of_a_lower_priority_are_counted_and_others_are_not(monkeypatch: pytest.MonkeyPatch) -> None:
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    if mine >= 19:
        pytest.skip("this test runs at nice 19: no thread can run at a lower priority")
    # The models other tests of this process loaded hold their pools' threads (one per core).
    monkeypatch.setattr("vcm.tasks.embedding_onnx.NICE_SCAN_MAX_THREADS", 10_000)
    stop = threading.Event()
    started = threading.Barrier(3, timeout=10)
    tids: dict[int, int] = {}  # nice added -> thread id

    def busy(nice: int) -> None:
        me = threading.get_native_id()
        try:
            os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + nice))
        except OSError:  # a sandbox that refuses it: the main thread skips
            started.abort()
            return
        tids[nice] = me
        started.wait()
        while not stop.is_set():
            pass

    threads = [threading.Thread(target=busy, args=(n,), daemon=True) for n in (10, 0)]
    for t in threads:
        t.start()
    try:
        try:
            started.wait()
        except threading.BrokenBarrierError:
            pytest.skip("this sandbox refuses to lower a thread's priority")
        below = {10: False, 0: False}
        counted: set[int] = set()
        deadline = time.monotonic() + 10
        while not (below[10] and tids[10] in counted) and time.monotonic() < deadline:
            for nice, tid in tids.items():
                below[nice] |= runnable_below(Path(f"/proc/self/task/{tid}/stat").read_bytes(), mine)
            counted.update(niced_runnable_ids())
        # The niced spinner is seen runnable below this thread's priority, and counted; the one
        # at this thread's priority never is.
        assert below == {10: True, 0: False}
        assert tids[10] in counted and tids[0] not in counted
    finally:
        stop.set()
        for t in threads:
            t.join()


def test_short_queries_on_idle_cpus_run_on_the_spinning_session(
    monkeypatch: pytest.MonkeyPatch, model_copy: Path, cache: Path, onnx: OnnxEmbedder
) -> None:
    monkeypatch.setattr("vcm.tasks.embedding_onnx.spin_allowed", lambda: True)
    settings = EmbeddingSettings(model=str(model_copy), backend="onnx", onnx_cache_dir=str(cache), threads=2)
    spinning = OnnxEmbedder(settings)
    runner = spinning.runner
    idle = {"now": False}
    monkeypatch.setattr("vcm.tasks.embedding_onnx.cpus_idle", lambda threads: idle["now"])
    used: list[str] = []
    monkeypatch.setattr(runner, "session", _Recording(runner.session, used, "sleeping"))
    query = ["What did Melanie paint last summer?", "What did paint last summer?"]
    expected = onnx.encode(query)
    assert np.allclose(spinning.encode(query), expected, atol=1e-6)  # busy CPUs: the sleeping session
    assert used == ["sleeping"] and runner._opening is None  # not even being opened
    idle["now"] = True
    assert np.allclose(spinning.encode(query), expected, atol=1e-6)  # one idle query: nothing opened
    assert runner._opening is None
    assert np.allclose(spinning.encode(query), expected, atol=1e-6)  # the second: runs asleep while it opens
    assert runner._opening is not None
    runner._opening.join(timeout=60)
    config = runner._eager.get_session_options().get_session_config_entry
    assert config("session.intra_op.allow_spinning") == "1" and config("session.force_spinning_stop") == "1"
    asleep = runner.session._session.get_session_options().get_session_config_entry
    assert asleep("session.intra_op.allow_spinning") == "0"
    runner._eager = _Recording(runner._eager, used, "spinning")
    assert np.allclose(spinning.encode(query), expected, atol=1e-6)  # the same vectors, spinning
    long = [TEXTS[2], "Lisbon in March. " + TEXTS[2]]  # past EAGER_MAX_TOKENS: a batch stays asleep
    assert np.allclose(spinning.encode(long), onnx.encode(long), atol=1e-6)
    assert used == ["sleeping", "sleeping", "sleeping", "spinning", "sleeping"]
    # Off, on one thread (no pool to spin: a worker's model), or under a CPU quota: never opened.
    for update in ({"spin_when_idle": False}, {"threads": 1}):
        assert OnnxEmbedder(settings.model_copy(update=update)).runner._open_eager is None
    monkeypatch.setattr("vcm.tasks.embedding_onnx.spin_allowed", lambda: False)
    assert OnnxEmbedder(settings).runner._open_eager is None


def test_a_spinning_session_that_cannot_open_leaves_queries_asleep(
    monkeypatch: pytest.MonkeyPatch, onnx: OnnxEmbedder
) -> None:
    runner = OnnxRunner(onnx.runner.session, onnx.runner.tokenizer, onnx.runner.pooling, onnx.runner.normalize,
                        onnx.runner.max_seq_length, eager=_no_memory, threads=2)  # fmt: skip
    monkeypatch.setattr("vcm.tasks.embedding_onnx.cpus_idle", lambda threads: True)
    first = runner.encode(["Lisbon in March"], batch_size=8)
    runner.encode(["Lisbon in March"], batch_size=8)
    assert runner._opening is not None
    runner._opening.join(timeout=10)
    assert runner._open_eager is None and runner._eager is None  # given up, logged
    assert np.allclose(runner.encode(["Lisbon in March"], batch_size=8), first, atol=1e-6)


def _no_memory() -> object:
    raise MemoryError("no room for a second copy of the model")


@pytest.mark.parametrize(("cpu_max", "allowed"), [("max 100000\n", True), ("200000 100000\n", False), (None, True)])
def test_a_cpu_quota_turns_spinning_off(tmp_path: Path, cpu_max: str | None, allowed: bool) -> None:
    cgroup = tmp_path / "cpu.max"
    if cpu_max is not None:
        cgroup.write_text(cpu_max)
    assert spin_allowed(cgroup) is allowed


class _Recording:
    """A session whose runs are noted by name."""

    def __init__(self, session: object, used: list[str], name: str) -> None:
        self._session, self._used, self._name = session, used, name

    def run(self, *args: object, **kwargs: object) -> object:
        self._used.append(self._name)
        return self._session.run(*args, **kwargs)  # type: ignore[attr-defined]
