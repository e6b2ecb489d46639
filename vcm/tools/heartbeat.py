"""The heartbeat governor, as a pure function over a per-agent chain state.

A tool result with ``request_heartbeat=true`` asks to run inference again at once. Chains are
bounded (defaults in ``[heartbeat]``): depth 8, 60 s, a 256-token floor of free context, 3
requests/s per agent, and a 750 ms cooldown after a depth or duration stop. Every chain end has
a reason: ``depth``, ``duration``, ``tokens``, ``explicit_yield`` (the model stopped asking) or
``rate_limited``.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, replace
from typing import Literal

from vcm.settings.context import HeartbeatSettings

EndReason = Literal["depth", "duration", "tokens", "explicit_yield", "rate_limited"]
RATE_WINDOW_S = 1.0


@dataclass(frozen=True)
class ChainState:
    chain_id: str = ""  # "" = no chain running
    depth: int = 0  # heartbeats run in this chain
    started_at: float = 0.0
    cooldown_until: float = 0.0
    recent: tuple[float, ...] = ()  # times of recent heartbeat requests (rate window)


@dataclass(frozen=True)
class HeartbeatDecision:
    run: bool  # run inference again now
    state: ChainState
    chain_id: str
    depth: int  # depth of the heartbeat that runs, or the depth the chain reached
    ended: EndReason | None = None
    retry_after_ms: int = 0


def _end(
    state: ChainState, reason: EndReason, now: float, cooldown_ms: int, recent: tuple[float, ...]
) -> HeartbeatDecision:
    cooldown = now + cooldown_ms / 1000 if reason in ("depth", "duration") else state.cooldown_until
    return HeartbeatDecision(
        run=False,
        state=ChainState(cooldown_until=cooldown, recent=recent),
        chain_id=state.chain_id,
        depth=state.depth,
        ended=reason,
        retry_after_ms=max(0, math.ceil((cooldown - now) * 1000)),
    )


def decide(
    state: ChainState, *, requested: bool, now: float, free_tokens: int, settings: HeartbeatSettings
) -> HeartbeatDecision:
    """What to do with one tool result's ``request_heartbeat``."""
    if not requested:
        if state.chain_id:
            return _end(state, "explicit_yield", now, settings.cooldown_ms, state.recent)
        return HeartbeatDecision(False, state, "", 0)
    recent = tuple(t for t in state.recent if now - t < RATE_WINDOW_S)
    if now < state.cooldown_until:
        wait = math.ceil((state.cooldown_until - now) * 1000)
        return replace(_end(state, "rate_limited", now, settings.cooldown_ms, recent), retry_after_ms=wait)
    if len(recent) >= settings.rate_per_s * RATE_WINDOW_S:
        wait = math.ceil((recent[0] + RATE_WINDOW_S - now) * 1000)
        return replace(_end(state, "rate_limited", now, settings.cooldown_ms, recent), retry_after_ms=wait)
    recent = (*recent, now)
    if not state.chain_id:
        state = ChainState(chain_id=uuid.uuid4().hex[:16], started_at=now, cooldown_until=state.cooldown_until)
    if state.depth + 1 > settings.max_depth:
        return _end(state, "depth", now, settings.cooldown_ms, recent)
    if now - state.started_at > settings.max_duration_s:
        return _end(state, "duration", now, settings.cooldown_ms, recent)
    if free_tokens < settings.token_floor:
        return _end(state, "tokens", now, settings.cooldown_ms, recent)
    new_state = replace(state, depth=state.depth + 1, recent=recent)
    return HeartbeatDecision(True, new_state, state.chain_id, new_state.depth)
