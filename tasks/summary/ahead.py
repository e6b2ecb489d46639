"""Work of a summary that runs in threads while the summary's Python runs: the drift check's
embeddings (:class:`DriftTexts`) and any other value known early (:class:`Ahead`, the loss score's
room). The model's runs and the tokenizer's counts release the GIL, so they share the cores with
the selection (see :mod:`vcm.tasks.summary.recursive`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar, cast

from vcm.tasks.summary import units
from vcm.tasks.summary.memo import JobVectors
from vcm.tasks.summary.request import Params, Request
from vcm.tasks.summary.selection import Vectors, stratified_pick

log = logging.getLogger(__name__)

T = TypeVar("T")


class DriftTexts:
    """The drift check's embeddings (:func:`_cosine`), made in threads while the job's Python runs.
    The model releases the GIL (OpenVINO's and ONNX Runtime's runs, embedded mode's wait on its
    model process), so the embedding and the Python share the cores:

    * the source side, at most ``max_candidates`` of the pool's units, the most salient of each
      stretch, is known before the selection starts and is embedded while it runs (at a 128k
      window the check's model work was ~300 ms after the selection's ~170 ms);
    * the summary side, as many of the picked units' lines, one of each stretch, is embedded
      while the draft is rendered, guarded and scored (:meth:`summary_ahead`; ~150 ms of model
      work beside ~170 ms of Python at 128k).

    The threads run one after the other (the embedder is not shared between them), and only for
    an embedder that keeps what it embeds (:class:`JobVectors`): the check then reads the vectors
    back in one call."""

    def __init__(self, request: Request, params: Params, pool: Sequence[units.Unit]) -> None:
        self.texts = [u.line for u in pool]
        self.limit = params.max_candidates
        rows = stratified_pick([float(bool(u.body)) for u in pool], self.limit)
        self.sample = [self.texts[i] for i in rows]
        self._embed = request.embed
        self._ahead = isinstance(request.embed, JobVectors)  # an embedder that keeps what it embeds
        self._threads: list[threading.Thread] = []
        self._summary: list[str] | None = None
        if self.sample:
            self._start(self.sample, "vcm-drift-source")

    def lines(self, lines: Sequence[str]) -> list[str]:
        """The summary side of ``lines``: one of each stretch, at most ``max_candidates``."""
        return [lines[i] for i in stratified_pick([0.0] * len(lines), self.limit)]

    def summary_ahead(self, lines: Sequence[str]) -> None:
        """Embed the summary side of ``lines`` (the picked units' lines, in row order) now, in a
        thread after the source's; :meth:`vectors` uses them when the draft keeps those lines."""
        if self._ahead and self._summary is None:
            self._summary = self.lines(lines)
            if self._summary:
                self._start([*self.sample, *self._summary], "vcm-drift-summary")

    def _start(self, texts: list[str], name: str) -> None:
        if not self._ahead:
            return
        after = self._threads[-1] if self._threads else None
        thread = threading.Thread(target=self._run, args=(texts, after), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _run(self, texts: list[str], after: threading.Thread | None) -> None:
        if after is not None:
            after.join()
        try:
            self._embed(texts)
        except Exception as exc:  # the check embeds them again, and meets the failure there
            log.debug("drift texts not embedded ahead: %r", exc)

    def join(self) -> None:
        for thread in self._threads:
            thread.join()

    def vectors(self, lines: Sequence[str]) -> Vectors:
        """The sample's rows, then those of ``lines``' summary side, in one call once the threads
        have ended (taken from what they embedded when they embedded these lines)."""
        self.join()
        return self._embed([*self.sample, *self.lines(lines)])


class Ahead(Generic[T]):
    """``work()`` run in a thread of its own from now on; :meth:`result` waits for its value (its
    failure is raised there, in the caller's thread)."""

    def __init__(self, work: Callable[[], T], name: str) -> None:
        self._work = work
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._work()
        except BaseException as exc:  # raised again by result(), in the caller's thread
            self._error = exc

    def join(self) -> None:
        self._thread.join()

    def result(self) -> T:
        self.join()
        if self._error is not None:
            raise self._error
        return cast(T, self._value)
