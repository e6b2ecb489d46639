"""The offline extractor's shadow facts: a question states no fact, a statement does."""

from __future__ import annotations

import pytest

from vcm.tasks.facts.extraction import asks, extract
from vcm.types import Message


def said(i: int, name: str, content: str) -> Message:
    return Message(id=f"m{i}", seq=i, role="user", content=content, tokens=10, created_at=1.7e9 + i, name=name)


@pytest.mark.parametrize(
    ("sentence", "question"),
    [
        ("What was your favorite part?", True),
        ("How'd they like it?", True),
        ("Have you ever been to Rome?", True),
        ("What kind of counseling and mental health services do you want to pursue?", True),
        ("Sunflowers mean warmth and happiness, right?", False),  # a statement with a tag
        ("Did you know I moved to Lund?", False),  # it tells of the speaker
        ("What do you think of my painting?", False),
        ("I love hiking in the Alps.", False),
    ],
)
def test_asks(sentence: str, question: bool) -> None:
    assert asks(sentence) is question


def test_a_question_with_a_liking_is_no_preference_fact() -> None:
    messages = [
        said(1, "Caroline", "What was your favorite part of the Rome trip?"),
        said(2, "Melanie", "My favorite part was the Colosseum at night. Do you love Rome too?"),
    ]
    values = [c.value for c in extract(messages) if c.type not in ("entity", "relation")]
    assert any("Colosseum" in v for v in values)
    assert not any("?" in v for v in values), values


def test_each_sentence_is_made_a_unit_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fact candidates and entity candidates read the same units: each sentence is compressed,
    dated and scanned once per batch (twice was a third of a 128k window's extraction)."""
    from vcm.tasks.summary import units

    made: list[str] = []
    real = units.unit_of

    def counted(speaker: str, sentence: str, *args: object, **kwargs: object) -> units.Unit | None:
        made.append(sentence)
        return real(speaker, sentence, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(units, "unit_of", counted)
    messages = [
        said(1, "Caroline", "My sister Maya moved to Lund in May. What was your favorite part?"),
        said(2, "Melanie", "I love pottery with Caroline. We went camping at Lake Tahoe!"),
    ]
    found = extract(messages)
    assert sorted(made) == sorted(set(made)) and len(made) == 4
    assert {c.type for c in found} >= {"entity", "preference"}
    assert any(c.value == "Maya" or c.key == "maya" for c in found)
