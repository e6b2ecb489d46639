"""A clock tests move by hand."""

from __future__ import annotations


class Clock:
    """Reads ``now``; ``step`` > 0 also advances it on every read."""

    def __init__(self, now: float = 1_700_000_000.0, step: float = 0.0) -> None:
        self.now = now
        self.step = step

    def __call__(self) -> float:
        t = self.now
        self.now += self.step
        return t

    def advance(self, seconds: float) -> None:
        self.now += seconds
