"""Conversations in LoCoMo's JSON format: loading, and a deterministic generator for the demo.

The generator writes multi-session small talk between two people with planted facts, and
questions whose evidence ids point at the planting turns, so the demo needs nothing outside
the repository. Same seed, same conversation.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from vcm.errors import ValidationError


@dataclass(frozen=True)
class Turn:
    session: int
    dia_id: str
    speaker: str
    text: str
    date_time: str

    @property
    def content(self) -> str:
        """The turn as one line: speaker and text."""
        return f"{self.speaker}: {self.text}"

    @property
    def name(self) -> str:
        """The speaker as a message's ``name``: the summary's lines and recall's author anchoring
        read it (vcm refuses names with other characters than word characters and ``-``)."""
        return speaker_name(self.speaker)


def speaker_name(speaker: str) -> str:
    """A speaker as a message ``name``: other characters than word characters and ``-`` become
    ``_``, at most 64."""
    return re.sub(r"[^\w-]", "_", speaker)[:64]


@dataclass(frozen=True)
class Question:
    question: str
    answer: str
    evidence: tuple[str, ...]
    category: int


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


def parse_sample(sample: dict[str, Any]) -> Conversation:
    conv = sample["conversation"]
    turns: list[Turn] = []
    session_keys = sorted(
        (k for k in conv if k.startswith("session_") and not k.endswith("date_time")),
        key=lambda k: int(k.split("_")[1]),
    )
    for key in session_keys:
        number = int(key.split("_")[1])
        when = str(conv.get(f"{key}_date_time", ""))
        for raw in conv[key] or []:
            text = str(raw.get("text", ""))
            caption = raw.get("blip_caption")
            if caption:
                # An image turn: the caption is what a text-only memory can keep of it.
                text = f"{text} [shares a photo: {caption}]".strip()
            turns.append(Turn(number, str(raw["dia_id"]), str(raw["speaker"]), text, when))
    questions = tuple(
        Question(
            question=str(q["question"]),
            answer=str(q.get("answer", q.get("adversarial_answer", ""))),
            evidence=tuple(str(e) for e in q.get("evidence", []) or []),
            category=int(q.get("category", 0)),
        )
        for q in sample.get("qa", [])
    )
    return Conversation(
        sample_id=str(sample.get("sample_id", "sample")),
        speakers=(str(conv.get("speaker_a", "A")), str(conv.get("speaker_b", "B"))),
        turns=tuple(turns),
        questions=questions,
    )


def load(path: str | Path) -> list[Conversation]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValidationError(f"conversation file {path} does not exist", field="data") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValidationError(f"{path} is not a LoCoMo-format JSON file: {exc}", field="data") from None
    samples = data if isinstance(data, list) else [data]
    try:
        return [parse_sample(s) for s in samples]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValidationError(f"{path} is not in LoCoMo's format: missing or bad {exc}", field="data") from None


# --- the generator -------------------------------------------------------------------------

_NAMES = [("Nadia", "Tomas"), ("Priya", "Elliot"), ("Marta", "Kenji")]
_SMALL_TALK = [
    "How was your week?",
    "Pretty busy, but good. Work has been hectic and I barely had time to cook.",
    "I know the feeling. I've been trying to get to bed earlier, with mixed results.",
    "The weather finally turned, so I went for a long walk along the river yesterday.",
    "That sounds lovely. I mostly stayed in and caught up on a series everyone keeps talking about.",
    "Did you end up liking it?",
    "The first episodes were slow, but it got much better halfway through.",
    "I should try it. I need something to watch on the train.",
    "My commute has been longer lately because of the roadworks near the station.",
    "Ugh, that's annoying. Hopefully they finish soon.",
    "Anyway, how is your family doing?",
    "Everyone is well, thanks for asking. My parents send their regards.",
    "Tell them I said hi! We should all have dinner again sometime.",
    "Definitely. Let's find a date after the holidays.",
    "I've been reading a lot more this month, mostly on my phone before sleeping.",
    "Anything good?",
    "A couple of mystery novels. Nothing life-changing, but fun.",
    "I tried a new coffee place near the office; the pastries were great.",
    "You always find the best bakeries.",
    "It's a talent, honestly. Talk soon?",
    "Sure, have a good evening!",
]

# (fact statement by the speaker, question, answer) — slots filled from the pools below.
_FACTS = [
    ("My sister {sib} just adopted a {breed} named {pet}.", "What is the name of {sib}'s {breed}?", "{pet}"),
    (
        "I finally booked the trip: I'm flying to {city} on the {day} for a conference.",
        "Which city is {a} flying to for a conference?",
        "{city}",
    ),
    ("Big news, I got the job at {company} as a {role}!", "Which company hired {a}?", "{company}"),
    (
        "I started learning the {instrument}; my teacher is called {teacher}.",
        "Who teaches {a} the {instrument}?",
        "{teacher}",
    ),
    (
        "Our new apartment is on {street}, number {number}.",
        "What is the house number of {a}'s new apartment?",
        "{number}",
    ),
    (
        "I ran the {city2} half marathon in {minutes} minutes!",
        "How long did {a} take for the {city2} half marathon?",
        "{minutes} minutes",
    ),
    ("My favourite dish lately is {dish}, I cook it every Sunday.", "Which dish does {a} cook every Sunday?", "{dish}"),
    (
        "The project code name at work is {codename}, it's top secret.",
        "What is the code name of {a}'s project?",
        "{codename}",
    ),
]
_POOLS: dict[str, list[str]] = {
    "sib": ["Clara", "Ines", "Rosa", "Lena"],
    "breed": ["beagle", "corgi", "greyhound", "spaniel"],
    "pet": ["Biscuit", "Pepper", "Waffle", "Juniper"],
    "city": ["Lisbon", "Montreal", "Osaka", "Tallinn"],
    "day": ["12th", "3rd", "21st", "28th"],
    "company": ["Helioform", "Quarry Labs", "Norbridge", "Tessellate"],
    "role": ["data engineer", "product designer", "field biologist", "sound technician"],
    "instrument": ["cello", "banjo", "oboe", "harp"],
    "teacher": ["Mrs. Okafor", "Mr. Lindqvist", "Ms. Duarte", "Mr. Haruki"],
    "street": ["Juniper Lane", "Cobalt Street", "Mill Road", "Harbour Way"],
    "number": ["41", "117", "8", "263"],
    "city2": ["Porto", "Ghent", "Bergen", "Lyon"],
    "minutes": ["104", "97", "121", "133"],
    "dish": ["saffron risotto", "lentil dal", "shakshuka", "mushroom ramen"],
    "codename": ["BLUE-HERON-7", "ORCHID-42", "TIN-CAN-19", "NIMBUS-3"],
}


def generate(seed: int = 7, sessions: int = 12, turns_per_session: int = 24) -> list[dict[str, Any]]:
    """One sample in LoCoMo's JSON format (a list with one conversation)."""
    rng = random.Random(seed)
    a, b = _NAMES[seed % len(_NAMES)]
    start = datetime(2024, 1, 8, 18, 30)
    conversation: dict[str, Any] = {"speaker_a": a, "speaker_b": b}
    qa: list[dict[str, Any]] = []
    facts = list(_FACTS)
    rng.shuffle(facts)
    for s in range(1, sessions + 1):
        when = start + timedelta(days=9 * (s - 1) + rng.randint(0, 4))
        conversation[f"session_{s}_date_time"] = when.strftime("%-I:%M %p on %-d %B, %Y")
        turns: list[dict[str, Any]] = []
        planted_at = rng.randint(3, turns_per_session - 3) if facts else -1
        for t in range(1, turns_per_session + 1):
            speaker = a if t % 2 == 1 else b
            text = _SMALL_TALK[(t + rng.randint(0, len(_SMALL_TALK) - 1)) % len(_SMALL_TALK)]
            dia_id = f"D{s}:{t}"
            if t == planted_at and facts:
                stmt, question, answer = facts.pop()
                slots = {k: rng.choice(v) for k, v in _POOLS.items()}
                slots["a"] = speaker
                text = stmt.format(**slots)
                qa.append(
                    {
                        "question": question.format(**slots),
                        "answer": answer.format(**slots),
                        "evidence": [dia_id],
                        "category": 4,
                    }
                )
                if s > 1:
                    # A temporal question about the same fact: its evidence is the same turn.
                    qa.append(
                        {
                            "question": f"When did {speaker} mention: {stmt.format(**slots)[:40].rstrip()}...?",
                            "answer": when.strftime("%-d %B %Y"),
                            "evidence": [dia_id],
                            "category": 2,
                        }
                    )
            turns.append({"speaker": speaker, "dia_id": dia_id, "text": text})
        conversation[f"session_{s}"] = turns
    return [{"sample_id": f"vcm-demo-{seed}", "conversation": conversation, "qa": qa}]


def iter_turns(conv: Conversation) -> Iterator[Turn]:
    yield from conv.turns


def session_time(text: str) -> float | None:
    """LoCoMo's "1:56 pm on 8 May, 2023" as seconds since the epoch (UTC); None when unparsable."""
    try:
        return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def observations(sample: Mapping[str, Any]) -> list[tuple[str, frozenset[str]]]:
    """(fact, its evidence dia_ids) of every session's ``observation`` in a LoCoMo sample."""
    out = []
    for session in sample.get("observation", {}).values():
        for facts in session.values():
            for entry in facts:
                if len(entry) < 2:
                    continue
                ids = [entry[1]] if isinstance(entry[1], str) else list(entry[1])
                out.append((str(entry[0]), frozenset(str(i).strip() for i in ids)))
    return out


class FixedClock:
    """A clock a replay sets by hand (to each session's time)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now
