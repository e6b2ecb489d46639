"""The embedding model in a process of its own, for embedded mode's in-process cold path.

In embedded mode one interpreter holds the API, the hot state (an in-process fakeredis) and the
cold path (a Celery worker thread, :mod:`vcm.workers.embedded`). The cold path's heavy work is the
embedding model: its forward passes keep both cores busy and take the GIL back between torch
operations, so while it ran the API's requests waited for the interpreter (append p99 ~100 ms
while spooled messages were embedded). Here the model runs in a child process instead:

* no GIL is shared with the API, so the API thread is never queued behind model code;
* the child runs at a lower CPU priority (``nice``), so when a request and the model both want
  the cores the OS scheduler serves the request first - a priority threads of one process
  cannot be given;
* everything else stays where it was: the cold path's logic and store writes run in the worker
  thread as before (the hot state is in-process memory, which a child could not reach without
  a server of its own, and embedded mode exists to need none).

Only the model moves: :class:`EmbedderProcess` is an :class:`~vcm.tasks.embedding.Embedder`
whose ``encode``, ``hidden_states`` and tokenizer calls are answered by the child. The tokenizer
goes too: its Python wrapper turns a long document's tokens into lists in one C call that holds
the GIL (77 ms for 1.7 MB of text), and in the child that costs the API nothing. Query embeddings
of API requests stay in the API process (the request's own short work; queueing them behind a
cold-path batch would make a search wait for it). Results cross the pipe as numpy arrays in raw
bytes, read with the GIL released and used in place, never unpickled element by element.

The child exits when its pipe closes (the parent exited or was killed); a child that died is
started again on the next call, whose caller (a cold-path task) sees an error and retries.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import numpy.typing as npt

from vcm.settings.memory import EmbeddingSettings
from vcm.tasks.embedding import Embedder, cache_key

log = logging.getLogger(__name__)

# The child's niceness: at 10 its CPU weight is about a tenth of the API's, so it takes the cores
# the API leaves idle and yields them when a request comes.
NICE = 10
START_TIMEOUT_S = 300.0  # loading a large model from disk can take minutes


class EmbedderProcess(Embedder):
    """An :class:`Embedder` whose model runs in a child process (see the module docstring).

    Deliberately does not call ``Embedder.__init__``: the model is loaded in the child only.
    Thread-safe: calls are serialised (the child runs one batch at a time anyway)."""

    def __init__(self, settings: EmbeddingSettings, *, nice: int = NICE) -> None:
        self._settings = settings
        self.backend = settings.backend
        self._nice = nice
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self._process: multiprocessing.process.BaseProcess | None = None
        self._tokenizer = _RemoteTokenizer(self)
        with self._lock:
            self._start()

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return self._call(("encode", list(texts)))["array"]

    def hidden_states(self, rows: Sequence[Sequence[int]], pad_id: int) -> list[npt.NDArray[np.float32]]:
        batch = self._call(("hidden", [[int(i) for i in r] for r in rows], pad_id))["array"]
        return [batch[i, : len(r)] for i, r in enumerate(rows)]

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the child (a later call starts a new one)."""
        with self._lock:
            self._stop(timeout_s)

    # --- the parent's side of the pipe ---------------------------------------------------------
    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")  # never fork a process that may hold torch threads
        parent, child = ctx.Pipe()
        process = ctx.Process(
            target=serve, args=(child, self._settings.model_dump(), self._nice), name="vcm-embedder", daemon=True
        )
        process.start()
        child.close()  # the child's end lives in the child only, so its exit closes our pipe
        if not parent.poll(START_TIMEOUT_S):
            process.kill()
            raise RuntimeError(f"the embedding process did not start within {START_TIMEOUT_S:.0f}s")
        try:
            status, meta = parent.recv()
        except EOFError:
            process.join(5)
            raise RuntimeError(f"the embedding process exited at start (exit code {process.exitcode})") from None
        if status != "ready":
            process.join(5)
            raise RuntimeError(f"the embedding process could not load the model: {meta}")
        self.backend = str(meta["backend"])  # batch_backend's choice, made in the child
        self.model_id = str(meta["model_id"])
        self.base_model_id = str(meta["base_model_id"])
        self.dimension = int(meta["dimension"])
        self.max_tokens = int(meta["max_tokens"])
        self.batch_size = int(meta["batch_size"])
        self._tokenizer.pad_token_id = meta["pad_token_id"]
        self._conn, self._process = parent, process
        log.info("embedding model %s runs in process %s (nice %+d)", self.model_id, process.pid, self._nice)

    def _call(self, request: tuple[Any, ...]) -> dict[str, npt.NDArray[Any]]:
        """Send a request; its named arrays (see :func:`_reply`)."""
        with self._lock:
            if self._conn is None:
                self._start()
            assert self._conn is not None
            try:
                self._conn.send(request)
                status, header = self._conn.recv()
                if status == "error":
                    raise RuntimeError(f"the embedding process failed: {header}")
                out: dict[str, npt.NDArray[Any]] = {}
                for name, shape, dtype in header:
                    data = self._conn.recv_bytes()  # a plain read, GIL released while it waits
                    out[name] = np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape)
                return out
            except (EOFError, OSError) as exc:
                exitcode = self._process.exitcode if self._process is not None else None
                self._stop(1.0)
                message = f"the embedding process died (exit code {exitcode}); it restarts on the next call"
                raise RuntimeError(message) from exc

    def _stop(self, timeout_s: float) -> None:
        conn, process = self._conn, self._process
        self._conn = self._process = None
        if conn is not None:
            with contextlib.suppress(OSError, ValueError):  # already gone
                conn.send(("stop",))
            conn.close()
        if process is not None:
            process.join(timeout_s)
            if process.is_alive():
                process.kill()
                process.join(timeout_s)


class _RemoteTokenizer:
    """The child's tokenizer, called across the pipe. Answers what
    :class:`~vcm.tasks.ingest.late_chunking.LateChunker` asks of a Hugging Face tokenizer - a call on one
    text, and ``pad_token_id`` - with each field an int64 numpy array (``offset_mapping`` of shape
    (n, 2)) instead of lists."""

    def __init__(self, owner: EmbedderProcess) -> None:
        self._owner = owner
        self.pad_token_id: int | None = None

    def __call__(self, text: str, **kwargs: Any) -> dict[str, npt.NDArray[Any]]:
        return self._owner._call(("tokenize", text, kwargs))


class EmbedderProcesses:
    """One :class:`EmbedderProcess` per embedding configuration, started on first use (the model
    loads when the cold path first needs it, as in-process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[tuple[str, ...], EmbedderProcess] = {}

    def get(self, settings: EmbeddingSettings) -> Embedder:
        key = cache_key(settings)
        with self._lock:
            found = self._running.get(key)
            if found is None:
                found = self._running[key] = EmbedderProcess(settings)
            return found

    def close(self) -> None:
        with self._lock:
            running, self._running = list(self._running.values()), {}
        for one in running:
            one.close()


# --- the child --------------------------------------------------------------------------------
def serve(conn: Connection, settings: dict[str, Any], nice: int) -> None:
    """The child's loop: load the model, say so, then answer requests until the pipe closes."""
    with contextlib.suppress(OSError):  # not permitted here: run at the parent's priority
        os.nice(nice)
    from vcm.tasks.embedding_choice import batch_embedder

    try:
        # Batches only here: a spinning session for short queries would be a second model copy.
        embedder = batch_embedder(EmbeddingSettings.model_validate({**settings, "spin_when_idle": False}))
        meta = {
            "backend": embedder.backend,
            "model_id": embedder.model_id,
            "base_model_id": embedder.base_model_id,
            "dimension": embedder.dimension,
            "max_tokens": embedder.max_tokens,
            "batch_size": embedder.batch_size,
            "pad_token_id": embedder.tokenizer.pad_token_id,
        }
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", meta))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if request[0] == "stop":
            return
        try:
            arrays = {name: np.ascontiguousarray(a) for name, a in _answer(embedder, request).items()}
        except Exception as exc:  # reported to the caller, whose task retries; the child goes on
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            continue
        conn.send(("ok", [(name, a.shape, a.dtype.str) for name, a in arrays.items()]))
        for a in arrays.values():
            conn.send_bytes(a.data.cast("B"))


def _answer(embedder: Embedder, request: tuple[Any, ...]) -> dict[str, npt.NDArray[Any]]:
    op = request[0]
    if op == "encode":
        return {"array": embedder.encode(request[1])}
    if op == "tokenize":
        encoding = embedder.tokenizer(request[1], **request[2])
        return {name: np.asarray(value, dtype=np.int64) for name, value in encoding.items()}
    if op == "hidden":
        rows, pad_id = request[1], request[2]
        states = embedder.hidden_states(rows, pad_id)
        # One padded block (the states are views of one already): a single send, no pickling.
        width = max(len(r) for r in rows)
        block = np.zeros((len(rows), width, states[0].shape[1]), dtype=np.float32)
        for i, state in enumerate(states):
            block[i, : len(state)] = state
        return {"array": block}
    raise ValueError(f"unknown request {op!r}")
