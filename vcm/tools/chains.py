"""Heartbeat chains in Redis: the pure governor (:mod:`vcm.tools.heartbeat`) plus atomic storage.

Each agent's :class:`~vcm.tools.heartbeat.ChainState` lives in one hash (``keys.HEARTBEAT``) with
a version, behind the hot state's named operations (:class:`vcm.hotpath.heartbeats.HeartbeatStore`).
:meth:`HeartbeatGovernor.decide` reads state and version, runs the pure ``heartbeat.decide`` and
writes the new state by compare-and-set (``lua.HEARTBEAT_CAS``). If another call for the same
agent wrote in between, nothing is written and the decision is taken again on the fresh state, so
two concurrent requests can never both pass the rate limit or both take the same depth.

The governor only keeps state; the caller records chain ends (``heartbeat_end`` events), because
it knows who asked (see ``vcm.tools.executor.ToolExecutor.govern``).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vcm.hotpath.heartbeats import HeartbeatStore
from vcm.obs import metrics
from vcm.settings.context import HeartbeatSettings
from vcm.tools.heartbeat import ChainState, EndReason, HeartbeatDecision, decide

log = logging.getLogger(__name__)

# Attempts before giving up under contention; each lost attempt means another call for the same
# agent just took a decision, so refusing this one errs on the side of fewer inference runs.
MAX_ATTEMPTS = 32


@dataclass(frozen=True)
class HeartbeatOutcome:
    """What became of one ``request_heartbeat`` (reported with every tool result)."""

    requested: bool
    run: bool  # run inference again now
    depth: int  # depth of the heartbeat that runs, or the depth the chain reached
    chain_id: str | None
    ended: EndReason | None = None
    retry_after_ms: int = 0
    governed: bool = True  # False: the caller decides this request later (one decision per step)

    def as_dict(self) -> dict[str, Any]:
        return {
            "governed": self.governed,
            "requested": self.requested,
            "run": self.run,
            "depth": self.depth,
            "chain_id": self.chain_id,
            "ended": self.ended,
            "retry_after_ms": self.retry_after_ms,
        }

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> HeartbeatOutcome:
        """The outcome :meth:`as_dict` wrote (a recorded chat turn read back)."""
        return cls(
            requested=bool(d["requested"]), run=bool(d["run"]), depth=int(d["depth"]), chain_id=d["chain_id"],
            ended=d["ended"], retry_after_ms=int(d["retry_after_ms"]), governed=bool(d["governed"]),
        )  # fmt: skip


NOT_GOVERNED = HeartbeatOutcome(requested=False, run=False, depth=0, chain_id=None, governed=False)


@dataclass(frozen=True)
class ChainEnd:
    """A chain that ended (or a heartbeat refused before one started: ``chain_id`` "")."""

    chain_id: str
    depth: int
    reason: EndReason
    duration_s: float
    retry_after_ms: int
    at: float

    def payload(self) -> dict[str, Any]:
        return {
            "chain_id": self.chain_id or None,
            "depth": self.depth,
            "reason": self.reason,
            "duration": round(self.duration_s, 3),
            "retry_after_ms": self.retry_after_ms,
        }


# --- state codec (pure) ------------------------------------------------------------------------
def dump_state(state: ChainState) -> str:
    return json.dumps(
        {
            "chain_id": state.chain_id,
            "depth": state.depth,
            "started_at": state.started_at,
            "cooldown_until": state.cooldown_until,
            "recent": list(state.recent),
        },
        separators=(",", ":"),
    )


def load_state(raw: str | None) -> ChainState:
    if not raw:
        return ChainState()
    data: Mapping[str, Any] = json.loads(raw)
    return ChainState(
        chain_id=str(data.get("chain_id", "")),
        depth=int(data.get("depth", 0)),
        started_at=float(data.get("started_at", 0.0)),
        cooldown_until=float(data.get("cooldown_until", 0.0)),
        recent=tuple(float(t) for t in data.get("recent", ())),
    )


def outcome_of(decision: HeartbeatDecision, requested: bool) -> HeartbeatOutcome:
    return HeartbeatOutcome(
        requested=requested,
        run=decision.run,
        depth=decision.depth,
        chain_id=decision.chain_id or None,
        ended=decision.ended,
        retry_after_ms=decision.retry_after_ms,
    )


def end_of(before: ChainState, decision: HeartbeatDecision, now: float) -> ChainEnd | None:
    """The chain end a decision represents, if any; its duration runs from the chain's start."""
    if decision.ended is None:
        return None
    started = before.started_at if before.chain_id and before.chain_id == decision.chain_id else now
    return ChainEnd(
        chain_id=decision.chain_id,
        depth=decision.depth,
        reason=decision.ended,
        duration_s=max(0.0, now - started),
        retry_after_ms=decision.retry_after_ms,
        at=now,
    )


# --- storage -------------------------------------------------------------------------------------
class HeartbeatGovernor:
    """Per-agent heartbeat chains. Thread-safe; guard numbers come from ``[heartbeat]`` settings."""

    def __init__(
        self,
        chains: HeartbeatStore,
        settings: HeartbeatSettings,
        *,
        clock: Callable[[], float] = time.time,
        max_attempts: int = MAX_ATTEMPTS,
    ) -> None:
        self.chains = chains  # the hot state's (``service.hot.heartbeats``)
        self.settings = settings
        self.clock = clock
        self.max_attempts = max_attempts

    def _read(self, agent_id: str) -> tuple[ChainState, int]:
        raw, version = self.chains.read(agent_id)
        return load_state(raw), version

    def state(self, agent_id: str) -> ChainState:
        return self._read(agent_id)[0]

    def decide(self, agent_id: str, *, requested: bool, free_tokens: int) -> tuple[HeartbeatOutcome, ChainEnd | None]:
        """Decide one ``request_heartbeat`` and store the new chain state atomically."""
        for _ in range(self.max_attempts):
            before, version = self._read(agent_id)
            now = self.clock()
            decision = decide(before, requested=requested, now=now, free_tokens=free_tokens, settings=self.settings)
            if decision.state != before and not self.chains.write_if(agent_id, version, dump_state(decision.state)):
                continue  # another call decided first; decide again on what it wrote
            end = end_of(before, decision, now)
            if end is not None:  # counted once: only the decision whose state was written gets here
                metrics.chain_end(end.reason, end.depth, end.duration_s, chain=bool(end.chain_id))
            return outcome_of(decision, requested), end
        log.warning("heartbeat state of %s kept changing under %d attempts; refusing", agent_id, self.max_attempts)
        metrics.chain_end("rate_limited", 0, 0.0, chain=False)
        wait = math.ceil(1000 / self.settings.rate_per_s)
        return HeartbeatOutcome(requested, False, 0, None, "rate_limited", wait), None
