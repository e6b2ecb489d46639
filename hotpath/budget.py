"""The budget policy, as pure functions: no I/O, no clock.

This module is the specification the Lua scripts in :mod:`vcm.hotpath.lua` implement in one round
trip; property tests replay random operations through both and compare.

Rules (all thresholds are shares of the window, turned into whole tokens once per agent):

* ``max = window - output_reserve - memory_reserve``; nothing may push the main context above it.
  The context builder's injected layers use the room the main context leaves below
  ``window - output_reserve`` (their budgets are ceilings), so the built prompt stays within it
  too. With the default memory reserve of 0, max is 90 % of the window and equals the flush line;
  a memory reserve keeps a floor of room for the layers and moves max and the flush line down.
* The flush line is ``min(flush, max)``.
* The batches still pending (begun, not yet finished) share ONE placeholder in the main context,
  naming their total message count: its cost is ``placeholder_tokens(base, count)``, at most
  ``base + 4`` for any count below 10**12, however many batches wait on the cold path. (One
  placeholder per batch grew without bound while the cold path lagged, and pushed the context
  past ``max``.) Each batch keeps its own count, so a finishing batch recomputes the placeholder.
* Growth that ends above ``flush`` evicts the oldest unpinned FIFO messages (never the message
  being appended) until the total, placeholder included, is at most ``target``. If the evictable
  messages run out first, the plan says ``target_unreachable``.
* A change is refused (``TOKEN_BUDGET_EXCEEDED``) when, after the best eviction, the total still
  exceeds ``max``; and a change that grows the *unevictable* parts (system, working blocks,
  pinned messages, summary) is refused when those parts plus the room the summary may still grow
  into (``summary_cap - summary``) plus the largest placeholder (``base + 4``) exceed ``max``.
  That reserve is what lets a later summary install (which is never refused) fit by evicting,
  and it covers the placeholder whole, so what it holds now does not enter the check.
* An eviction the agent asks for (``evict_fifo``) must free room: it takes the oldest ``count``
  unpinned messages, and more of the oldest when those free no more tokens than the placeholder
  grows by; when all unpinned messages together cannot pay for it, it is refused.
* Growth that crosses ``warning`` upward (and not ``flush``) injects one memory-pressure message;
  the flag re-arms once the total falls below ``warning``.
* Pinned blocks and pinned messages together stay within ``pinned_cap`` (``PIN_LIMIT_EXCEEDED``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from vcm.errors import PinLimitExceeded, TokenBudgetExceeded
from vcm.hotpath.render import placeholder_tokens
from vcm.settings import BudgetSettings


@dataclass(frozen=True)
class Budget:
    """One agent's thresholds in tokens."""

    window: int
    max_tokens: int
    warning_at: int
    flush_at: int
    target: int
    pinned_cap: int
    summary_cap: int

    @classmethod
    def for_window(cls, window: int, settings: BudgetSettings) -> Budget:
        max_tokens = window - math.ceil(window * (settings.output_reserve + settings.memory_reserve))
        return cls(
            window=window,
            max_tokens=max_tokens,
            warning_at=math.floor(window * settings.warning),
            # Reserves above (1 - flush) make max the effective flush line.
            flush_at=min(math.floor(window * settings.flush), max_tokens),
            target=math.floor(window * settings.target),
            pinned_cap=math.floor(window * settings.pinned_cap),
            summary_cap=math.floor(window * settings.summary_cap),
        )


@dataclass(frozen=True)
class Parts:
    """Token counts of the main context's parts, as the hot state stores them."""

    system: int  # system prompt + tool schemas + reply priming
    working: int  # all working blocks
    pinned_blocks: int
    pinned_fifo: int  # pinned FIFO messages (part of `fifo` too)
    summary: int
    placeholders: int  # the one placeholder of all pending batches (0 when none is pending)
    fifo: int
    placeholder_count: int = 0  # messages of all pending batches, named by that placeholder

    @property
    def total(self) -> int:
        return self.system + self.working + self.summary + self.placeholders + self.fifo

    @property
    def pinned(self) -> int:
        return self.pinned_blocks + self.pinned_fifo

    @property
    def unevictable(self) -> int:
        return self.system + self.working + self.pinned_fifo + self.placeholders + self.summary


@dataclass(frozen=True)
class FifoEntry:
    message_id: str
    tokens: int
    pinned: bool = False


@dataclass(frozen=True)
class EvictionPlan:
    message_ids: tuple[str, ...]  # oldest first
    tokens: int  # tokens leaving the FIFO
    placeholder: int  # tokens the (merged) placeholder grows by (0 when nothing is evicted)
    total_after: int
    target_unreachable: bool


@dataclass(frozen=True)
class Decision:
    action: Literal["ok", "warning", "flush"]
    total_after: int
    warned_after: bool
    eviction: EvictionPlan | None = None


def placeholder_part(placeholder_base: int, count: int) -> int:
    """Tokens of the one placeholder standing for ``count`` pending messages (0 for none)."""
    return placeholder_tokens(placeholder_base, count) if count > 0 else 0


def plan_eviction(
    fifo: Sequence[FifoEntry],
    total: int,
    target: int,
    placeholder_base: int,
    exclude: str = "",
    *,
    pending: int = 0,
    placeholders: int = 0,
) -> EvictionPlan:
    """Oldest unpinned first, until ``total - evicted + placeholder growth <= target``.

    ``pending`` messages already stand behind the placeholder, which costs ``placeholders`` now.
    """
    chosen: list[str] = []
    evicted = 0
    current = total
    for entry in fifo:
        if current <= target:
            break
        if entry.pinned or entry.message_id == exclude:
            continue
        chosen.append(entry.message_id)
        evicted += entry.tokens
        current = total - evicted + placeholder_part(placeholder_base, pending + len(chosen)) - placeholders
    grown = placeholder_part(placeholder_base, pending + len(chosen)) - placeholders if chosen else 0
    return EvictionPlan(
        message_ids=tuple(chosen),
        tokens=evicted,
        placeholder=grown,
        total_after=current,
        target_unreachable=current > target,
    )


def decide_requested_eviction(
    parts: Parts,
    fifo: Sequence[FifoEntry],
    budget: Budget,
    *,
    count: int,
    warned: bool,
    placeholder_base: int,
) -> Decision:
    """An eviction the agent asked for (``evict_fifo``): the oldest ``count`` unpinned messages.

    When those free no more tokens than the placeholder grows by (short messages, no batch
    pending), the next oldest are taken too until they do. The caller asked for room: refusing
    would cost an agent another model turn to ask again with a larger count for the same result,
    and the extra messages are the ones the next eviction would take anyway, kept in recall and
    the summary; the batch says exactly which left. When even every unpinned message together
    cannot pay for the placeholder, evicting would only grow the context: refused
    (``TOKEN_BUDGET_EXCEEDED``), changing nothing. ``action`` is ``ok`` when nothing is evictable.
    """
    chosen: list[FifoEntry] = []
    freed = 0
    for entry in fifo:
        if len(chosen) >= count and freed > _growth(parts, placeholder_base, len(chosen)):
            break
        if entry.pinned:
            continue
        chosen.append(entry)
        freed += entry.tokens
    if not chosen:
        return Decision("ok", parts.total, warned and parts.total >= budget.warning_at)
    grown = _growth(parts, placeholder_base, len(chosen))
    if freed <= grown:
        raise TokenBudgetExceeded(
            f"evicting would free no room: the {len(chosen)} unpinned messages in the queue hold "
            f"{freed} tokens, and the placeholder replacing them adds {grown}; free room by "
            "shrinking or deleting working blocks instead",
            required_headroom=grown - freed,
            max_tokens=budget.max_tokens,
            placeholder_tokens=grown,
            freed_tokens=freed,
        )
    total = parts.total - freed + grown
    plan = EvictionPlan(tuple(e.message_id for e in chosen), freed, grown, total, False)
    return Decision("flush", total, warned and total >= budget.warning_at, plan)


def _growth(parts: Parts, placeholder_base: int, count: int) -> int:
    """Tokens the placeholder grows by when ``count`` more messages stand behind it."""
    return placeholder_part(placeholder_base, parts.placeholder_count + count) - parts.placeholders


def check_pinned(parts: Parts, budget: Budget, added_pinned: int) -> None:
    if added_pinned > 0 and parts.pinned + added_pinned > budget.pinned_cap:
        raise PinLimitExceeded(
            f"pinning {added_pinned} more tokens would exceed the pinned cap of "
            f"{budget.pinned_cap} tokens ({parts.pinned} pinned already); unpin or shorten a block",
            pinned=parts.pinned,
            requested=added_pinned,
            cap=budget.pinned_cap,
        )


# Room kept for the placeholder: its count has at most 12 digits (4 tokens).
PLACEHOLDER_ALLOWANCE_DIGIT_TOKENS = 4


def decide_growth(
    parts: Parts,
    fifo: Sequence[FifoEntry],
    budget: Budget,
    *,
    added: int,
    added_unevictable: int = 0,
    added_pinned: int = 0,
    warned: bool,
    pressure_tokens: int,
    placeholder_base: int,
    exclude: str = "",
    admit: bool = True,
) -> Decision:
    """Decide what a change of ``added`` tokens does. ``fifo`` already holds any new message.

    ``admit=False`` is for changes that already happened elsewhere (installing a committed
    summary): they are never refused, only rebalanced.
    """
    if admit:
        check_pinned(parts, budget, added_pinned)
        if added_unevictable > 0:
            # The placeholder's tokens are left out: the allowance below reserves the largest
            # placeholder whole, whatever batches are pending now.
            fixed = (
                parts.unevictable
                - parts.placeholders
                + added_unevictable
                + max(budget.summary_cap - parts.summary, 0)
                + placeholder_base
                + PLACEHOLDER_ALLOWANCE_DIGIT_TOKENS
            )
            if fixed > budget.max_tokens:
                raise _exceeded(fixed - budget.max_tokens, budget)
    total = parts.total + added
    if total > budget.flush_at or (
        not warned and total > budget.warning_at and total + pressure_tokens > budget.flush_at
    ):
        plan = plan_eviction(
            fifo,
            total,
            budget.target,
            placeholder_base,
            exclude,
            pending=parts.placeholder_count,
            placeholders=parts.placeholders,
        )
        if admit and plan.total_after > budget.max_tokens:
            raise _exceeded(plan.total_after - budget.max_tokens, budget)
        warned_after = warned and plan.total_after >= budget.warning_at
        return Decision("flush", plan.total_after, warned_after, plan)
    if not warned and total > budget.warning_at:
        return Decision("warning", total + pressure_tokens, True)
    return Decision("ok", total, warned and total >= budget.warning_at)


def _exceeded(headroom: int, budget: Budget) -> TokenBudgetExceeded:
    return TokenBudgetExceeded(
        f"this change needs {headroom} more tokens than the window allows even after evicting "
        f"every unpinned message (max {budget.max_tokens}); shorten it, or unpin/shrink blocks",
        required_headroom=headroom,
        max_tokens=budget.max_tokens,
    )
