"""The ``openvino`` backend: the model's ONNX export (:mod:`vcm.tasks.onnx_export`, the same
``model.onnx`` as ``onnx``) run by OpenVINO, in bfloat16 where the CPU multiplies bfloat16 in
hardware (AVX-512 BF16, Intel AMX) and in float32 elsewhere.

Why: a short query's matrix products are most of its time, and OpenVINO runs them in bfloat16
with float32 accumulation at about twice the rate of float32 (an AVX-512 BF16 CPU: a padded pair
of LoCoMo turns 11.3 -> 8.1 ms p50 against ONNX Runtime's spinning float32 session; batches of
32 turns and late chunking's 256-token windows ~20 % faster than torch in bfloat16,
docs/benchmarks.md). Its runs release the interpreter lock, so an eviction's model work in two
threads runs side by side, which torch's Python between operators did not. MiniLM's smallest
probe cosine to float32 is 0.99997, far above :data:`~vcm.tasks.embedding_onnx.PARITY_COSINE`,
so its vectors share the model's embedding version; a model that falls below it gets a version of
its own (``+openvino``), as every backend does.

The session is shaped like ONNX Runtime's (``run(output names, feeds)``), so
:class:`~vcm.tasks.embedding_onnx.OnnxRunner` tokenizes, pools and normalises for both.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

BACKEND = "openvino"


@functools.cache
def _core() -> Any:
    import openvino as ov

    return ov.Core()


@functools.cache
def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware and OpenVINO runs it so: its ``BF16``
    capability, and on Linux AVX-512 BF16 or AMX among the CPU's flags (OpenVINO also reports
    ``BF16`` for AVX2-VNNI-2 client cores, which only convert it). Asked once per process; False
    where OpenVINO is not installed or cannot answer."""
    try:
        capabilities = _core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    except Exception:  # not installed, or its CPU plugin failed: ONNX Runtime instead
        return False
    flags = cpu_flags()
    return "BF16" in capabilities and (flags is None or bool(flags & {"avx512_bf16", "amx_bf16"}))


def cpu_flags(path: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    """The first CPU's feature flags (Linux); None where they cannot be read."""
    try:
        with path.open(encoding="ascii", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() == "flags":
                    return set(value.split())
    except OSError:
        return None
    return None


def precision() -> str:
    """The inference precision this CPU runs: bfloat16 where native (emulated it is several
    times slower than float32), else float32."""
    return "bf16" if native_bf16() else "f32"


def runtime() -> dict[str, str]:
    """What decides a run's numbers besides the export: recorded with the parity measured for it,
    so a new OpenVINO or another CPU class measures it again."""
    import openvino as ov

    return {"openvino": ov.get_version(), "precision": precision()}


class OpenVinoSession:
    """A compiled model behind ONNX Runtime's ``run`` (see the module docstring). One infer
    request per calling thread: a request is not safe to share between threads, a compiled model
    is, so request threads and the cold path's threads each run on their own."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        self._local = threading.local()

    def run(self, names: Sequence[str], feeds: Mapping[str, npt.NDArray[Any]]) -> list[npt.NDArray[np.float32]]:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self.compiled.create_infer_request()
        out = request.infer(dict(feeds))  # copies the outputs: the request's own are reused next run
        return [np.asarray(out[self.compiled.output(name)], dtype=np.float32) for name in names]


# Beside the export: the compiled model, which OpenVINO keys by the file, its own version and the
# compile settings; removed with the export when that is made again (vcm.tasks.onnx_export).
CACHE_FOLDER = "openvino-cache"


def open_session(path: Path, threads: int, cpus: int) -> OpenVinoSession:
    """The export compiled for the CPU, each run on ``threads`` threads (0: OpenVINO's default,
    one per core, in one stream: latency-first, a single query uses every thread). With
    ``threads`` set, one stream per ``threads`` of the ``cpus``: runs of several threads at once
    each take a stream of their own, as ONNX Runtime's runs each take their caller's thread. With
    one stream they queued: an eviction job's facts and its drift check embed at the same time
    (two batches of 48 turns on one thread each, 530 ms in turn and 290-330 ms side by side on
    two streams; one run alone is as fast on either). Threads are not pinned to cores: the cores
    are shared with the API's requests and the store's indexer, and pinning measured no faster (a
    padded pair 7.8 against 8.0 ms p50). The compiled model is cached next to the export: a
    process's first compile of MiniLM 0.34 s, each later one 0.08-0.09 s (every CLI command that
    embeds, every worker and embedded-mode model process starts with one)."""
    core = _core()
    streams = max(1, cpus // threads) if threads else 1
    config: dict[str, Any] = {
        "PERFORMANCE_HINT": "LATENCY",
        "NUM_STREAMS": str(streams),
        "INFERENCE_PRECISION_HINT": precision(),
        "ENABLE_CPU_PINNING": False,
        "CACHE_DIR": str(path.parent / CACHE_FOLDER),
    }
    if threads:
        config["INFERENCE_NUM_THREADS"] = streams * threads
    compiled = core.compile_model(str(path), "CPU", config)
    if streams > 1:
        # OpenVINO gives no more threads than the cores it counts (physical ones, under the latency
        # hint), and would share them out over the streams: fewer streams, so each run keeps ``threads``.
        fits = max(1, int(compiled.get_property("INFERENCE_NUM_THREADS")) // threads)
        if fits < streams:
            config |= {"NUM_STREAMS": str(fits), "INFERENCE_NUM_THREADS": fits * threads}
            compiled = core.compile_model(str(path), "CPU", config)
    return OpenVinoSession(compiled)
