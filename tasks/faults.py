"""Fault injection points of the cold path, for tests. Production runs with no rules (a no-op).

Tasks call :meth:`Faults.point` at named steps (``evict.before_summarize``,
``evict.after_summarize``, ``evict.after_commit``, ``spool.before_write``,
``spool.before_embed``) and hand :meth:`Faults.store_hook` to the store, whose own points
(``commit_eviction.after_recall_append``, ``commit_eviction.before_commit``, ...) then obey
the same rules. A rule makes a point raise
:class:`vcm.errors.InjectedFailure` or sleep, for agents whose id starts with a prefix, a
number of times. In-process tests build rules directly; worker subprocesses read them from the
``VCM_TEST_FAULTS`` environment variable (a JSON list of rule objects).
"""

from __future__ import annotations

import contextvars
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from vcm.errors import ConfigError, InjectedFailure

ENV = "VCM_TEST_FAULTS"
_agent: contextvars.ContextVar[str] = contextvars.ContextVar("vcm_fault_agent", default="")


@dataclass(frozen=True)
class Rule:
    point: str
    action: Literal["raise", "sleep"] = "raise"
    agent_prefix: str = ""  # "" matches every agent
    times: int = -1  # how often it fires per agent; -1 = always
    seconds: float = 0.0  # for "sleep"

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Rule:
        try:
            rule = cls(**data)
        except TypeError as exc:
            raise ConfigError(f"bad fault rule {dict(data)!r}: {exc}", setting=ENV) from None
        if rule.action not in ("raise", "sleep"):
            raise ConfigError(f"fault action must be raise or sleep, not {rule.action!r}", setting=ENV)
        return rule


class Faults:
    """Thread-safe; counts how often each rule fired for each agent."""

    def __init__(self, rules: Sequence[Rule] = ()) -> None:
        self.rules = tuple(rules)
        self._fired: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Faults:
        raw = environ.get(ENV, "")
        if not raw:
            return cls()
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{ENV} is not JSON: {exc}", setting=ENV) from None
        if not isinstance(data, list):
            raise ConfigError(f"{ENV} must be a JSON list of rules", setting=ENV)
        return cls([Rule.of(item) for item in data])

    def __bool__(self) -> bool:
        return bool(self.rules)

    def point(self, name: str, agent_id: str | None = None) -> None:
        if not self.rules:
            return
        agent = _agent.get() if agent_id is None else agent_id
        for index, rule in enumerate(self.rules):
            if rule.point != name or not agent.startswith(rule.agent_prefix):
                continue
            with self._lock:
                fired = self._fired.get((index, agent), 0)
                if rule.times >= 0 and fired >= rule.times:
                    continue
                self._fired[(index, agent)] = fired + 1
            if rule.action == "sleep":
                time.sleep(rule.seconds)
            else:
                raise InjectedFailure(f"injected failure at {name}", point=name, agent_id=agent)

    def store_hook(self, name: str) -> None:
        """The store's ``fault_hook``: same rules, for the agent set by :meth:`scope`."""
        self.point(name)

    def fired(self, point: str, agent_id: str) -> int:
        with self._lock:
            return sum(n for (i, a), n in self._fired.items() if a == agent_id and self.rules[i].point == point)

    @contextmanager
    def scope(self, agent_id: str) -> Iterator[None]:
        """Store points reached inside this block are attributed to ``agent_id``."""
        token = _agent.set(agent_id)
        try:
            yield
        finally:
            _agent.reset(token)


NO_FAULTS = Faults()
