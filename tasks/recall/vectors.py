"""Message embeddings for vector recall, computed on the cold path, in conversational context.

A turn alone ("Sure, see you then!") says little; the same turn read after its neighbours says
a lot. ``late`` mode embeds each message by late chunking (:mod:`vcm.tasks.ingest.late_chunking`): the
model reads the preceding turns and the message as one document, and the message's vector is
the mean of *its own* tokens' outputs, which have attended to the context. The context is
causal (only earlier turns: later ones do not exist yet when a message is spooled) and left-
truncated to the model window. ``single`` mode embeds the message text alone (baseline).

The planning is pure (:func:`plan_in_context`); the model runs in :class:`MessageVectorizer`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from vcm.tasks.ingest.chunking import ChunkSpan, plan_windows
from vcm.tasks.ingest.late_chunking import DocumentPlan, LateChunker

ContextMode = Literal["late", "single"]
CONTEXT_MODES: tuple[ContextMode, ...] = ("late", "single")
Vectors = npt.NDArray[np.float32]
SEPARATOR = "\n"


@dataclass(frozen=True)
class Turn:
    seq: int
    text: str


def message_text(content: str, name: str | None = None) -> str:
    """What is embedded for a message: its content, after its author's name when it has one."""
    return f"{name}: {content}" if name and not content.startswith(f"{name}:") else content


def context_turns(history: Sequence[Turn], target: Turn, n: int) -> list[str]:
    """Texts of the ``n`` turns before ``target`` (by ``seq``), oldest first, duplicates once."""
    earlier = sorted({t.seq: t for t in history if t.seq < target.seq}.values(), key=lambda t: t.seq)
    return [t.text for t in earlier[-n:]] if n > 0 else []


def later_turns(history: Sequence[Turn], target: Turn, n: int) -> list[str]:
    """Texts of the ``n`` turns after ``target`` (by ``seq``), oldest first, duplicates once."""
    later = sorted({t.seq: t for t in history if t.seq > target.seq}.values(), key=lambda t: t.seq)
    return [t.text for t in later[:n]] if n > 0 else []


def ready_targets(window: Sequence[Turn], spooled: Sequence[Turn], after: int) -> list[Turn]:
    """The turns whose ``after`` following turns have now all arrived: for each spooled turn,
    the one ``after`` places before it in ``window`` (by ``seq``). With ``after`` 0, the spooled
    turns themselves."""
    if after <= 0:
        return list(spooled)
    ordered = sorted({t.seq: t for t in [*window, *spooled]}.values(), key=lambda t: t.seq)
    position = {t.seq: i for i, t in enumerate(ordered)}
    picked = {ordered[position[t.seq] - after].seq for t in spooled if position[t.seq] >= after}
    return [t for t in ordered if t.seq in picked]


def plan_in_context(
    context: Sequence[str],
    target: str,
    token_ids: Sequence[int],
    offsets: Sequence[tuple[int, int]],
    *,
    max_window: int,
    window_overlap: int = 16,
    after: Sequence[str] = (),
) -> DocumentPlan | None:
    """A late-chunking plan whose one chunk is ``target``'s tokens, read between ``context``
    (before) and ``after``.

    ``token_ids``/``offsets`` tokenise ``SEPARATOR.join([*context, target, *after])``. The plan
    keeps at most ``max_window`` tokens around the target: half the room left over on each side,
    a side that needs less giving the rest to the other (so without ``after`` the context is cut
    from the left); a target longer than the window is windowed on its own. None when the target
    has no tokens.
    """
    text = SEPARATOR.join([*context, target, *after])
    char_start = len(SEPARATOR.join([*context, target])) - len(target)
    char_end = char_start + len(target)
    inside = [i for i, (a, b) in enumerate(offsets) if b > a and char_start <= a < char_end]
    if not inside:
        return None
    first, end = inside[0], inside[-1] + 1
    if end - first > max_window:
        start, stop = first, end
    else:
        room = max_window - (end - first)
        right = min(len(token_ids) - end, max(room // 2, room - first))
        start, stop = max(0, first - (room - right)), end + right
    ids = tuple(int(t) for t in token_ids[start:stop])
    offs = tuple((int(a), int(b)) for a, b in offsets[start:stop])
    chunk = ChunkSpan(0, first - start, end - start, char_start, char_end)
    windows = plan_windows(len(ids), max_window, min(window_overlap, max_window - 1))
    return DocumentPlan(text, ids, offs, (chunk,), tuple(windows))


class Vectorizer(Protocol):
    """What the spooler needs of a message vectorizer (:class:`MessageVectorizer`, or a lazy or
    stand-in one)."""

    @property
    def version(self) -> str: ...

    @property
    def context(self) -> int: ...

    @property
    def after(self) -> int: ...

    def embed(self, history: Sequence[Turn], targets: Sequence[Turn]) -> list[Vectors | None]: ...


class MessageVectorizer:
    """Embeds messages (in ``late`` mode with up to ``context`` turns before and ``after`` turns
    after them), batched."""

    def __init__(self, chunker: LateChunker, *, mode: ContextMode = "late", context: int = 6, after: int = 0) -> None:
        if mode not in CONTEXT_MODES:
            raise ValueError(f"mode must be one of {', '.join(CONTEXT_MODES)}")
        if context < 0 or after < 0:
            raise ValueError("context and after must be >= 0")
        self.chunker = chunker
        self.mode: ContextMode = mode
        self.context = context if mode == "late" else 0
        self.after = after if mode == "late" else 0
        sides = f"{self.context}+{self.after}" if self.after else f"{self.context}"
        self.version = f"{chunker.embedder.model_id}:{mode}{sides}:v1"

    def embed(self, history: Sequence[Turn], targets: Sequence[Turn]) -> list[Vectors | None]:
        """One unit vector per target (None for a target with no text); ``history`` holds the
        turns available as context (the targets themselves may be among them)."""
        if self.mode == "single":
            texts = [t.text for t in targets if t.text.strip()]
            encoded = iter(self.chunker.embedder.encode(texts))
            return [next(encoded) if t.text.strip() else None for t in targets]
        pool = [*history, *targets]
        plans: list[DocumentPlan | None] = []
        for target in targets:
            before = context_turns(pool, target, self.context)
            later = later_turns(pool, target, self.after)
            ids, offsets = self.chunker.tokenize(SEPARATOR.join([*before, target.text, *later]))
            plans.append(
                plan_in_context(before, target.text, ids, offsets, max_window=self.chunker.max_window, after=later)
            )
        real = [p for p in plans if p is not None]
        vectors = iter(self.chunker.embed_late(real))
        return [next(vectors)[0] if p is not None else None for p in plans]
