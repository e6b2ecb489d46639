"""Message embeddings for vector recall, computed on the cold path, in conversational context.

A turn alone ("Sure, see you then!") says little; the same turn read after its neighbours says
a lot. ``late`` mode embeds each message by late chunking (:mod:`tasks.late_chunking`): the
model reads the preceding turns and the message as one document, and the message's vector is
the mean of *its own* tokens' outputs, which have attended to the context. The context is
causal (only earlier turns: later ones do not exist yet when a message is spooled) and left-
truncated to the model window. ``single`` mode embeds the message text alone (baseline).

The planning is pure (:func:`plan_in_context`); the model runs in :class:`MessageVectorizer`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from tasks.chunking import ChunkSpan, plan_windows
from tasks.late_chunking import DocumentPlan, LateChunker

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


def plan_in_context(
    context: Sequence[str],
    target: str,
    token_ids: Sequence[int],
    offsets: Sequence[tuple[int, int]],
    *,
    max_window: int,
    window_overlap: int = 16,
) -> DocumentPlan | None:
    """A late-chunking plan whose one chunk is ``target``'s tokens, read after ``context``.

    ``token_ids``/``offsets`` tokenise ``SEPARATOR.join([*context, target])``. The plan keeps at
    most ``max_window`` tokens ending at the target's last token (context cut from the left); a
    target longer than the window is windowed on its own. None when the target has no tokens.
    """
    text = SEPARATOR.join([*context, target])
    char_start = len(text) - len(target)
    inside = [i for i, (a, b) in enumerate(offsets) if b > a and a >= char_start]
    if not inside:
        return None
    first, end = inside[0], inside[-1] + 1
    start = max(0, end - max_window) if end - first <= max_window else first
    ids = tuple(int(t) for t in token_ids[start:end])
    offs = tuple((int(a), int(b)) for a, b in offsets[start:end])
    chunk = ChunkSpan(0, first - start, end - start, char_start, len(text))
    windows = plan_windows(len(ids), max_window, min(window_overlap, max_window - 1))
    return DocumentPlan(text, ids, offs, (chunk,), tuple(windows))


class MessageVectorizer:
    """Embeds messages (with their preceding turns as context in ``late`` mode), batched."""

    def __init__(self, chunker: LateChunker, *, mode: ContextMode = "late", context: int = 6) -> None:
        if mode not in CONTEXT_MODES:
            raise ValueError(f"mode must be one of {', '.join(CONTEXT_MODES)}")
        if context < 0:
            raise ValueError("context must be >= 0")
        self.chunker = chunker
        self.mode: ContextMode = mode
        self.context = context if mode == "late" else 0
        self.version = f"{chunker.embedder.model_id}:{mode}{self.context}:v1"

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
            context = context_turns(pool, target, self.context)
            ids, offsets = self.chunker.tokenize(SEPARATOR.join([*context, target.text]))
            plans.append(
                plan_in_context(context, target.text, ids, offsets, max_window=self.chunker.max_window)
            )
        real = [p for p in plans if p is not None]
        vectors = iter(self.chunker.embed_late(real))
        return [next(vectors)[0] if p is not None else None for p in plans]
