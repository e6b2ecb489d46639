"""The ONNX backends of the embedder (``[embedding] backend = "onnx" | "onnx-int8"``, and
``"openvino"``, which runs the same export in OpenVINO: :mod:`vcm.tasks.embedding_openvino`).

The model's transformer, exported once (:mod:`vcm.tasks.onnx_export`), runs in ONNX Runtime on
``[embedding] threads`` intra-op threads; its output is the token-level last hidden state, so
late chunking's :meth:`~vcm.tasks.embedding.Embedder.hidden_states` is the session's output as
it is, and a sentence embedding is those states pooled here in numpy exactly as the model's
Pooling module is configured (mean, CLS, max, mean/sqrt(length), last token), then
L2-normalised (the Normalize module, or ``encode``'s ``normalize_embeddings`` - ``encode``
always returns unit vectors, as the torch backend's does). Tokenisation is the model's own Hugging
Face tokenizer with the model's window (``max_seq_length``) as truncation, as sentence-transformers
does it. torch is needed only to make the export, never to run it.

Why: one short query embeds in about half torch's time in fp32 and several times faster in int8,
with no Python between operators (docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from vcm.settings.memory import EmbeddingSettings
from vcm.tasks import hugepages
from vcm.tasks.embedding import Embedder, model_identity
from vcm.tasks.embedding_batches import CALL_TOKENS, length_groups
from vcm.tasks.onnx_export import ensure_export

log = logging.getLogger(__name__)

# Backends whose sentence vectors match torch's at least this closely (the smallest cosine over
# the export's probe texts) share torch's embedding version; others get "+<backend>" after the
# model id, so recall never compares vectors of two spaces. Measured: fp32 1.00000, int8 ~0.91.
PARITY_COSINE = 0.999


class OnnxRunner:
    """An ONNX Runtime session of an export, its tokenizer and the model's pooling.

    Its pool threads sleep between operators: where other work shares the cores, a pool that
    spins waits on peers the scheduler has put aside (a LoCoMo turn: 6.1 -> ~8 ms p50 with one
    busy process on 2 cores, 5.8-9.6 -> 8.8-13 ms with two). When the CPUs are idle, though,
    waking a sleeping thread before every operator is much of a short query's time. So with
    ``spin_when_idle`` a short input (:data:`EAGER_MAX_TOKENS`) runs, when no other task is
    runnable (:func:`cpus_idle`), on a second session of the model whose threads spin within a
    run and stop when it ends (``session.force_spinning_stop``: nothing spins between runs): on
    2 idle cores a turn 4.3 -> 3.6 ms, a padded pair 6.5 -> 5.5 ms. The second session is
    opened (in a thread) at the second such run and holds a second copy of the model (MiniLM:
    ~96 MB), so only a process that embeds short queries on more than one thread pays for it."""

    def __init__(
        self,
        session: Any,
        tokenizer: Any,
        pooling: Sequence[str],
        normalize: bool,
        max_seq_length: int,
        *,
        eager: Callable[[], Any] | None = None,
        threads: int = 1,
    ):
        self.session = session
        self.tokenizer = tokenizer
        self.pooling = tuple(pooling)
        self.normalize = normalize
        self.max_seq_length = max_seq_length
        self._open_eager = eager  # opens the spinning session; None: never used
        self._eager: Any = None
        self._opening: threading.Thread | None = None
        self._short_runs = 0  # short runs on idle CPUs so far (see EAGER_AFTER_RUNS)
        self._eager_lock = threading.Lock()
        self.threads = threads  # the sessions' intra-op threads (the caller's included)

    @classmethod
    def open(
        cls,
        path: Path,
        tokenizer_folder: Path,
        meta: Mapping[str, Any],
        *,
        threads: int,
        spin_when_idle: bool = False,
        huge_pages: bool = False,
        openvino: bool = False,
    ) -> OnnxRunner:
        """``openvino``: the export runs in OpenVINO (:mod:`vcm.tasks.embedding_openvino`),
        whose thread pool has no spinning session to switch to and lays out its own memory."""
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        tokenizer = _tokenizer(tokenizer_folder, plain=bool(meta.get("fast_tokenizer")))
        used = threads or usable_cpus()
        eager = None
        if openvino:
            from vcm.tasks import embedding_openvino

            session: Any = embedding_openvino.open_session(path, threads, usable_cpus())
        else:
            # The first session serves a request: its pages are collapsed in a thread, not in it.
            session = open_session(path, threads, spin=False, huge_pages="background" if huge_pages else "")
            # One thread has no pool to spin (a Celery worker's model); a CPU quota makes the kernel's
            # runnable count, which is the host's, say nothing of this process's share (spin_allowed).
            if spin_when_idle and used > 1 and spin_allowed():
                eager = functools.partial(
                    open_session, path, threads, spin=True, huge_pages="now" if huge_pages else ""
                )
        return cls(
            session, tokenizer, meta["pooling"], bool(meta["normalize"]), int(meta["max_seq_length"]), eager=eager,
            threads=used,
        )  # fmt: skip

    def states(
        self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64], *, eager: bool = True
    ) -> npt.NDArray[np.float32]:
        """The last hidden states of a padded batch, (rows, tokens, dimension); ``eager``: a short
        one may run on the spinning session."""
        session = self.session
        if eager and self._open_eager is not None and ids.size <= EAGER_MAX_TOKENS and cpus_idle(self.threads):
            self._short_runs += 1
            if self._short_runs >= EAGER_AFTER_RUNS:
                session = self._eager_session() or session
        out = session.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask})[0]
        return np.asarray(out, dtype=np.float32)

    def _eager_session(self) -> Any:
        """The spinning session, or None while it is being opened: the first call starts opening
        it in a thread (a model load, off the request's time), and runs until then stay asleep.
        Not a daemon thread: a process leaving while ONNX Runtime builds a session aborts."""
        if self._eager is None and self._opening is None:
            with self._eager_lock:
                if self._opening is None:
                    self._opening = threading.Thread(target=self._open, name="vcm-onnx-spinning")
                    self._opening.start()
        return self._eager

    def _open(self) -> None:
        opener = self._open_eager
        if opener is None:
            return
        try:
            self._eager = opener()
        except Exception:  # out of memory, a file gone: keep running on the sleeping session
            log.warning("the spinning ONNX Runtime session could not be opened; queries stay asleep", exc_info=True)
            self._open_eager = None

    def encode(self, texts: Sequence[str], *, batch_size: int) -> npt.NDArray[np.float32]:
        """Pooled (and normalised where the model normalises) sentence vectors, one per text,
        embedded in batches of similar token length (:func:`vcm.tasks.embedding_batches.length_groups`)."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        rows: list[list[int]] = self.tokenizer(list(texts), truncation=True, max_length=self.max_seq_length)[
            "input_ids"
        ]
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
        # A short group of a long batch is no query: only a call short as a whole may spin.
        short = sum(len(r) for r in rows) <= EAGER_MAX_TOKENS
        parts: list[npt.NDArray[np.float32]] = []
        for start, end in length_groups([len(rows[i]) for i in order], batch_size, CALL_TOKENS * self.threads):
            ids, mask = self.padded([rows[i] for i in order[start:end]])
            parts.append(pool(self.states(ids, mask, eager=short), mask, self.pooling))
        pooled = np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)
        out = np.empty_like(pooled)
        out[order] = pooled
        return normalized(out) if self.normalize else out

    def padded(self, rows: Sequence[Sequence[int]]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Token rows padded to the longest, on the tokenizer's side, and their attention mask:
        what the tokenizer's own ``padding=True`` gives."""
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id or 0
        ids = np.full((len(rows), width), pad, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        left = self.tokenizer.padding_side == "left"
        for i, r in enumerate(rows):
            at = slice(width - len(r), width) if left else slice(0, len(r))
            ids[i, at] = r
            mask[i, at] = 1
        return ids, mask


HugePages = Literal["", "now", "background"]


def open_session(path: Path, threads: int, *, spin: bool, huge_pages: HugePages = "") -> Any:
    """An ONNX Runtime session of the export on ``threads`` intra-op threads (0: one per core);
    ``spin``: its threads spin within a run, stopping at its end (see :class:`OnnxRunner`).
    ``huge_pages``: "now" or "background" puts the weights it loads in huge pages
    (:mod:`vcm.tasks.hugepages`), before returning or in a thread of lower priority; "": not."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads  # 0: ONNX Runtime's default, one per physical core
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    if spin:  # within a run only: a pool spinning between runs takes CPU from everything else
        options.add_session_config_entry("session.force_spinning_stop", "1")
    before = hugepages.snapshot() if huge_pages else None
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    if before is not None and huge_pages == "background":
        # A daemon: the collapse is only an optimisation, and a process may leave before it ends.
        threading.Thread(target=hugepages.advise_since, args=(before, 10), name="vcm-huge-pages", daemon=True).start()
    elif before is not None:
        hugepages.advise_since(before)
    return session


# The most tokens (rows x padded length) a run may have to go to the spinning session: a query
# or two (a build embeds a turn and its name-free form together), not the cold path's batches.
EAGER_MAX_TOKENS = 256
# The spinning session is opened from the second short run on idle CPUs: a one-shot command (one
# query, then exit) neither loads a second copy of the model nor waits for one at its exit.
EAGER_AFTER_RUNS = 2


def cpus_idle(threads: int) -> bool:
    """Whether a run on ``threads`` threads would find a CPU for each: the kernel's count of
    runnable tasks now (``/proc/loadavg``, the caller itself included) plus the run's other
    threads within the CPUs this process may use. This process's own runnable threads of a
    lower priority (the embedded store's indexer and index upkeep, nice +10) are not counted:
    beside a spinning pool they get about a tenth of a core (the scheduler's weight for nice 10
    is 110 against 1024), and a third of a replay's builds met a tantivy commit and stayed
    asleep (10.8 against 7.3 ms p50 a run). False where the count cannot be read."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            running = int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return False
    cpus = usable_cpus()
    if idle_enough(running, threads, cpus):
        return True
    return idle_enough(running - niced_runnable_threads(), threads, cpus)


# Past this many threads a process's scan is not made: the spin check then counts every
# runnable task, as without it. A serving process holds ~60-100 (the server's worker threads, the
# models' pools, tantivy's).
NICE_SCAN_MAX_THREADS = 1000
# How long a thread's nice value, once read, is trusted: a thread at the caller's priority or
# above is not read again (reading every thread's stat file took ~1 ms a query at 80 threads,
# ~12 us each), so one that lowers its own priority later is seen within this time.
NICE_KNOWN_S = 5.0


@dataclasses.dataclass
class _NiceValues:
    """The nice value of each of this process's threads as last read (thread id -> nice), and
    when every thread was last read. One scan at a time (~40 us; every NICE_KNOWN_S ~12 us a
    thread): a request thread that finds another scanning does without."""

    values: dict[str, int] = dataclasses.field(default_factory=dict)
    read_all_at: float = 0.0
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


_NICE = _NiceValues()


def niced_runnable_threads() -> int:
    """How many of this process's other threads are runnable at a lower priority than the
    caller's (:func:`niced_runnable_ids`)."""
    return len(niced_runnable_ids())


def niced_runnable_ids() -> list[int]:
    """This process's other threads runnable at a lower priority than the caller's (Linux
    ``/proc/self/task``; none elsewhere, or past :data:`NICE_SCAN_MAX_THREADS`). Only the threads
    not known to run at the caller's priority or above are read (:data:`NICE_KNOWN_S`)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return []
    if len(tids) > NICE_SCAN_MAX_THREADS:
        return []
    me = threading.get_native_id()
    try:
        mine = os.getpriority(os.PRIO_PROCESS, me)  # Linux: the thread's own nice value
    except OSError:
        return []
    if not _NICE.lock.acquire(blocking=False):
        return []  # another thread is scanning: none subtracted, so the check errs towards sleeping
    try:
        return _scan(tids, str(me), mine)
    finally:
        _NICE.lock.release()


def _scan(tids: list[str], me: str, mine: int) -> list[int]:
    known = _NICE.values
    now = time.monotonic()
    read_all = now - _NICE.read_all_at >= NICE_KNOWN_S
    if read_all:
        present = set(tids)
        _NICE.read_all_at = now
        _NICE.values = known = {tid: nice for tid, nice in known.items() if tid in present}  # ended: forgotten
    found = []
    for tid in tids:
        if tid == me or (not read_all and known.get(tid, mine + 1) <= mine):
            continue
        stat = read_stat(tid)
        if stat is None:  # the thread ended meanwhile
            continue
        nice = nice_of(stat)
        if nice is not None:
            known[tid] = nice
        if runnable_below(stat, mine):
            found.append(int(tid))
    return found


def read_stat(tid: str) -> bytes | None:
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as f:
            return f.read()
    except OSError:
        return None


def _stat_fields(stat: bytes) -> list[bytes]:
    """The fields of a ``/proc/<pid>/task/<tid>/stat`` line after the command name, which may hold
    spaces and parentheses (fields are counted after its last ``)``): the state first."""
    return stat[stat.rindex(b")") + 2 :].split()


def nice_of(stat: bytes) -> int | None:
    """The nice value of a stat line (its 19th field); None for a line it cannot read (pure)."""
    try:
        return int(_stat_fields(stat)[16])
    except (ValueError, IndexError):
        return None


def runnable_below(stat: bytes, nice: int) -> bool:
    """Whether a ``/proc/<pid>/task/<tid>/stat`` line is of a runnable thread whose nice value is
    above ``nice`` (pure; False for a line it cannot read). The state is the 3rd field, the nice
    value the 19th."""
    try:
        fields = _stat_fields(stat)
        return fields[0] == b"R" and int(fields[16]) > nice
    except (ValueError, IndexError):
        return False


def spin_allowed(cgroup: Path = Path("/sys/fs/cgroup/cpu.max")) -> bool:
    """Whether :func:`cpus_idle` can speak for this process: Linux's runnable count is readable
    and no CPU quota (cgroup v2 ``cpu.max``) caps the process, since under one the count is the
    host's while the quota is the process's, and spinning would spend the quota."""
    if not Path("/proc/loadavg").is_file():
        return False
    try:
        quota = cgroup.read_text(encoding="ascii").split()[0]
    except (OSError, IndexError):
        return True  # no cgroup v2 controller here: no quota
    return quota == "max"


def idle_enough(running: int, threads: int, cpus: int) -> bool:
    """``running`` runnable tasks (the caller among them) and a run's ``threads`` (the caller
    one of them) fit ``cpus`` (pure)."""
    return running - 1 + threads <= cpus


def usable_cpus() -> int:
    """The CPUs this process may run on (hyper-threads counted, so for ONNX Runtime's default of
    one thread per physical core the spin check errs towards sleeping)."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux only
    return max(1, len(affinity(0)) if affinity is not None else os.cpu_count() or 1)


def _tokenizer(folder: Path, *, plain: bool) -> Any:
    """The model's Hugging Face tokenizer. ``plain``: its ``tokenizer.json`` as a plain fast
    tokenizer, which the export found to tokenize as the model's own class does: AutoTokenizer
    imports torch through transformers' model configuration code, ~2 s at the start of every
    process that embeds (a CLI command, a server, a worker), and running the export needs none."""
    if plain:
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(str(folder))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def pool(states: npt.NDArray[np.float32], mask: npt.NDArray[np.int64], modes: Sequence[str]) -> npt.NDArray[np.float32]:
    """sentence-transformers' Pooling in numpy: each mode's vector, concatenated in order."""
    m = mask[..., None].astype(np.float32)
    lengths = np.clip(m.sum(axis=1), 1e-9, None)
    parts = []
    for mode in modes:
        if mode == "cls":
            parts.append(states[:, 0])
        elif mode == "max":
            parts.append(np.where(m > 0, states, np.float32(-1e9)).max(axis=1))
        elif mode == "mean":
            parts.append((states * m).sum(axis=1) / lengths)
        elif mode == "mean_sqrt_len_tokens":
            parts.append((states * m).sum(axis=1) / np.sqrt(lengths))
        elif mode == "lasttoken":
            last = mask.sum(axis=1).astype(np.int64) - 1  # right padding: the last real token
            parts.append(states[np.arange(len(states)), np.maximum(last, 0)])
        else:
            raise ValueError(f"unknown pooling mode {mode!r}")
    return np.concatenate(parts, axis=1).astype(np.float32)


def normalized(v: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms: npt.NDArray[np.float32] = np.clip(np.linalg.norm(v, axis=1, keepdims=True), 1e-12, None)
    return (v / norms).astype(np.float32)


class OnnxEmbedder(Embedder):
    """An :class:`~vcm.tasks.embedding.Embedder` on ONNX Runtime (see the module docstring)."""

    def __init__(self, settings: EmbeddingSettings) -> None:
        source, base = model_identity(settings.model)
        export = ensure_export(source, base, settings.backend, settings.onnx_cache_dir)
        meta = {
            "pooling": export.pooling, "normalize": export.normalize, "max_seq_length": export.max_seq_length,
            "fast_tokenizer": export.fast_tokenizer,
        }  # fmt: skip
        self.runner = OnnxRunner.open(
            export.path,
            export.tokenizer_folder,
            meta,
            threads=settings.threads,
            spin_when_idle=settings.spin_when_idle,
            huge_pages=settings.huge_pages,
            openvino=settings.backend == "openvino",
        )
        self.export = export
        self.backend = settings.backend
        self.base_model_id = base
        self.parity = export.parity_min_cosine
        self.model_id = base if export.parity_min_cosine >= PARITY_COSINE else f"{base}+{settings.backend}"
        self.batch_size = settings.batch_size
        self.dimension = export.dimension
        self.max_tokens = export.max_seq_length

    @property
    def tokenizer(self) -> Any:
        return self.runner.tokenizer

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return normalized(self.runner.encode(list(texts), batch_size=self.batch_size))

    def hidden_states(self, rows: Sequence[Sequence[int]], pad_id: int) -> list[npt.NDArray[np.float32]]:
        width = max(len(r) for r in rows)
        ids = np.full((len(rows), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = r
            mask[i, : len(r)] = 1
        states = self.runner.states(ids, mask)
        return [states[i, : len(r)] for i, r in enumerate(rows)]
