"""Retry delays: exponential backoff with full jitter. Pure.

Full jitter (a uniform draw between 0 and the exponential step) spreads the retries of many
tasks that failed together, e.g. when the store was briefly down, instead of retrying in waves.
"""

from __future__ import annotations

import random


def delay_s(attempt: int, base_s: float, cap_s: float, rand: random.Random | None = None) -> float:
    """Seconds to wait before retry number ``attempt + 1`` (``attempt`` counts from 0)."""
    step = min(cap_s, base_s * (2 ** min(attempt, 62)))
    return (rand or random).uniform(0.0, step)
