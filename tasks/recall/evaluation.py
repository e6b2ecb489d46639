"""LoCoMo retrieval evaluation, the pure part: session documents, chunk-to-turn maps, recall@k.

The metric follows the LoCoMo paper (see ``shared/data/DATA.md``): for each question, the
fraction of its evidence ``dia_id``s found among the turns of the top-k retrieved chunks,
averaged over questions; a question without evidence counts as 1.0; an evidence id that is
malformed or names no turn is a miss (it stays in the denominator and can never be found).
Each conversation is its own corpus. No I/O and no model here; ``scripts/eval_late_chunking.py``
does the embedding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from vcm.tasks.ingest.chunking import ChunkSpan


@dataclass(frozen=True)
class Turn:
    dia_id: str
    char_start: int
    char_end: int


@dataclass(frozen=True)
class SessionDoc:
    """One session as a document: turns as ``Speaker: text`` lines, each turn's characters known."""

    conversation: str
    session: int
    text: str
    turns: tuple[Turn, ...]

    @property
    def turn_starts(self) -> list[int]:
        """Chunk break positions: the start of every turn but the first."""
        return [t.char_start for t in self.turns[1:]]


@dataclass(frozen=True)
class Question:
    conversation: str
    text: str
    evidence: tuple[str, ...]
    category: int


def turn_line(turn: Mapping[str, Any]) -> str:
    """``Speaker: text``; an image turn adds its caption, as LoCoMo's own retrieval baselines do."""
    line = f"{turn.get('speaker', '')}: {turn.get('text', '')}"
    caption = turn.get("blip_caption")
    return f"{line} [shared {caption}]" if caption else line


def session_doc(conversation: str, session: int, turns: Sequence[Mapping[str, Any]]) -> SessionDoc:
    parts: list[str] = []
    spans: list[Turn] = []
    at = 0
    for turn in turns:
        line = turn_line(turn)
        spans.append(Turn(str(turn.get("dia_id", "")), at, at + len(line)))
        parts.append(line)
        at += len(line) + 1  # the "\n" joining turns
    return SessionDoc(conversation, session, "\n".join(parts), tuple(spans))


def _session_numbers(conv: Mapping[str, Any]) -> list[int]:
    found = []
    for key, value in conv.items():
        suffix = key.removeprefix("session_")
        if key.startswith("session_") and suffix.isdigit() and isinstance(value, list) and value:
            found.append(int(suffix))
    return sorted(found)


def load_locomo(samples: Sequence[Mapping[str, Any]]) -> dict[str, tuple[list[SessionDoc], list[Question]]]:
    """Per conversation (``sample_id``): its session documents and its questions, data unedited."""
    out: dict[str, tuple[list[SessionDoc], list[Question]]] = {}
    for sample in samples:
        name = str(sample["sample_id"])
        conv = sample["conversation"]
        docs = [session_doc(name, n, conv[f"session_{n}"]) for n in _session_numbers(conv)]
        questions = [
            Question(
                name,
                str(q.get("question", "")),
                tuple(str(e) for e in q.get("evidence") or ()),
                int(q.get("category", 0)),
            )
            for q in sample.get("qa", ())
        ]
        out[name] = (docs, questions)
    return out


def chunk_turns(doc: SessionDoc, chunks: Iterable[ChunkSpan]) -> list[frozenset[str]]:
    """The dia_ids each chunk covers (a turn whose characters the chunk's characters meet)."""
    return [
        frozenset(t.dia_id for t in doc.turns if t.char_start < c.char_end and c.char_start < t.char_end)
        for c in chunks
    ]


def top_k(scores: npt.NDArray[np.floating[Any]], k: int) -> list[int]:
    """Indices of the k highest scores, best first; ties keep corpus order (deterministic)."""
    order = np.argsort(-scores, kind="stable")
    return [int(i) for i in order[:k]]


def recall_at_k(evidence: Sequence[str], ranked: Sequence[frozenset[str]], k: int) -> float:
    """Share of distinct evidence ids among the turns of the first ``k`` ranked chunks.

    No evidence -> 1.0 (nothing to find). An id matching no turn is simply never found.
    """
    wanted = set(evidence)
    if not wanted:
        return 1.0
    found: set[str] = set()
    for turns in ranked[:k]:
        found |= turns
    return len(wanted & found) / len(wanted)


def mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else float("nan")


def conversation_turns(sample: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every turn of a sample's conversation, session by session, in order (data unedited)."""
    conv = sample["conversation"]
    return [turn for n in _session_numbers(conv) for turn in conv[f"session_{n}"]]


def recall_of_ranked_ids(evidence: Sequence[str], ranked: Sequence[str], ks: Sequence[int]) -> dict[int, float]:
    """LoCoMo recall@k of one question for each k, from a ranked list of retrieved dia_ids
    (one turn per hit; an unknown hit is just a miss)."""
    as_sets = [frozenset({d}) for d in ranked]
    return {k: recall_at_k(evidence, as_sets, k) for k in ks}


def aggregate(rows: Sequence[tuple[int, Mapping[int, float]]], ks: Sequence[int]) -> dict[str, dict[str, float | int]]:
    """Mean recall@k (percent, 1 decimal) over all questions and per category; ``rows`` are
    (category, {k: recall}) per question. Each entry also says how many questions it averages."""
    groups: dict[str, list[Mapping[int, float]]] = {"all": [r for _, r in rows]}
    for category, r in rows:
        groups.setdefault(str(category), []).append(r)
    out: dict[str, dict[str, float | int]] = {}
    for name in ["all", *sorted(g for g in groups if g != "all")]:
        values = groups[name]
        entry: dict[str, float | int] = {"n": len(values)}
        for k in ks:
            entry[f"R@{k}"] = round(100 * mean([v[k] for v in values]), 1)
        out[name] = entry
    return out
