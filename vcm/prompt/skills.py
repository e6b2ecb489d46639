"""Skills (seed 003): ``.md`` files with YAML front matter, injected when the latest user message
triggers them. Parsing and scoring are pure; :func:`load` reads a directory.

Front matter::

    ---
    slug: refunds
    name: Refund policy
    triggers:
      keywords: [refund, money back]
      patterns: ['order\\s+#?\\d{5,}']
    ---
    (the body: what the model should know or do)

score = keyword matches (whole words or phrases, any case) + pattern matches (regular
expressions, any case); a skill is injected only when its score is above zero. An invalid file is
reported (path and reason) and skipped: one bad skill never stops the others or the service.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

MAX_FILE_BYTES = 256_000
_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class Skill:
    slug: str
    name: str
    body: str
    keywords: tuple[str, ...]
    patterns: tuple[re.Pattern[str], ...]
    path: str = ""


@dataclass(frozen=True)
class Problem:
    path: str
    reason: str


def parse(text: str, path: str = "") -> Skill:
    """One skill file; ValueError saying what is wrong."""
    if not text.startswith("---"):
        raise ValueError("no YAML front matter (the file must start with ---)")
    parts = text.split("\n---", 1)
    if len(parts) != 2:
        raise ValueError("the front matter is not closed by a --- line")
    try:
        meta = yaml.safe_load(parts[0][3:])
    except yaml.YAMLError as exc:
        raise ValueError(f"the front matter is not valid YAML: {exc}") from None
    if not isinstance(meta, dict):
        raise ValueError("the front matter must be a mapping")
    slug = meta.get("slug")
    if not isinstance(slug, str) or not _SLUG.match(slug):
        raise ValueError("slug must be 1-64 characters of a-z, 0-9, - and _")
    name = meta.get("name", slug)
    triggers = meta.get("triggers") or {}
    if not isinstance(name, str) or not isinstance(triggers, dict):
        raise ValueError("name must be text and triggers a mapping")
    keywords = _strings(triggers.get("keywords"), "triggers.keywords")
    patterns = []
    for p in _strings(triggers.get("patterns"), "triggers.patterns"):
        try:
            patterns.append(re.compile(p, re.IGNORECASE))
        except re.error as exc:
            raise ValueError(f"pattern {p!r} is not a valid regular expression: {exc}") from None
    if not keywords and not patterns:
        raise ValueError("a skill needs at least one trigger keyword or pattern")
    body = parts[1].split("\n", 1)[1].strip() if "\n" in parts[1] else ""
    if not body:
        raise ValueError("the skill has no body")
    return Skill(slug, name, body, tuple(k.lower() for k in keywords), tuple(patterns), path)


def _strings(value: object, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{name} must be a list of non-empty strings")
    return [v.strip() for v in value]


def score(skill: Skill, message: str) -> int:
    text = message.lower()
    hits = sum(1 for k in skill.keywords if re.search(rf"(?<!\w){re.escape(k)}(?!\w)", text))
    return hits + sum(1 for p in skill.patterns if p.search(message))


def triggered(skills: Sequence[Skill], message: str) -> list[tuple[int, Skill]]:
    """Skills with a score above zero, best first (ties: by slug)."""
    scored = [(score(s, message), s) for s in skills]
    return sorted([(n, s) for n, s in scored if n > 0], key=lambda x: (-x[0], x[1].slug))


def load(directory: str | Path) -> tuple[list[Skill], list[Problem]]:
    """Every ``*.md`` of the directory (sorted), and what was wrong with those left out."""
    root = Path(directory)
    skills: list[Skill] = []
    problems: list[Problem] = []
    if not root.is_dir():
        return [], [Problem(str(root), "not a directory")]
    seen: set[str] = set()
    for path in sorted(root.glob("*.md")):
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
            skill = parse(path.read_text(encoding="utf-8"), str(path))
            if skill.slug in seen:
                raise ValueError(f"slug {skill.slug!r} is used by another file")
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            problems.append(Problem(str(path), str(exc)))
            continue
        seen.add(skill.slug)
        skills.append(skill)
    return skills, problems
