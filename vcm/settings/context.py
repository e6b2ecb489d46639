"""Settings of the hot path's context window: token counting, the budget, chat, the heartbeat
governor and context building.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TokenSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    encoding: str = ""
    download: bool = False
    per_message: int = Field(3, ge=0, le=64)
    per_name: int = Field(1, ge=0, le=64)
    reply_priming: int = Field(3, ge=0, le=64)


class BudgetSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    output_reserve: float = Field(0.10, ge=0.0, lt=0.9)
    # A floor of room for the memory the context builder injects per call (state header, sticky
    # facts, relevant memory, skills): it lowers max, and the flush line with it, like
    # output_reserve. 0 keeps the flush line at `flush`; the layers then use what the hot context
    # leaves below window - output_reserve.
    memory_reserve: float = Field(0.0, ge=0.0, lt=0.5)
    warning: float = Field(0.70, gt=0.0, lt=1.0)
    flush: float = Field(0.90, gt=0.0, le=1.0)
    target: float = Field(0.50, gt=0.0, lt=1.0)
    pinned_cap: float = Field(0.25, ge=0.0, lt=1.0)
    summary_cap: float = Field(0.15, gt=0.0, lt=1.0)
    max_content_chars: int = Field(400_000, gt=0, le=50_000_000)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.output_reserve + self.memory_reserve >= 1.0 - self.target:
            raise ValueError("output_reserve + memory_reserve must leave room above target")
        if not self.target < self.warning < self.flush:
            raise ValueError(f"need target < warning < flush, got {self.target} / {self.warning} / {self.flush}")
        if self.pinned_cap + self.summary_cap >= self.target:
            # Otherwise a flush could never bring occupancy down to target.
            raise ValueError(
                f"pinned_cap + summary_cap ({self.pinned_cap} + {self.summary_cap}) "
                f"must stay below target ({self.target})"
            )
        return self


class ChatSettings(BaseModel):
    """The OpenAI-compatible model vcm calls for chat and /v1/chat/completions, and the
    Anthropic-compatible one behind /v1/messages."""

    model_config = ConfigDict(extra="forbid")

    # e.g. http://127.0.0.1:8000/v1 ; "" = no model: the chat routes answer LLM_UNAVAILABLE.
    base_url: str = ""
    # Sent upstream; "" = the model the request names (/v1/chat/completions) or the agent's.
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = Field(120.0, gt=0.0, le=3600.0)
    max_retries: int = Field(2, ge=0, le=10)
    max_message_chars: int = Field(100_000, ge=1, le=10_000_000)
    # One turn at a time per agent: a second waits this long for the first, then gets CONFLICT.
    turn_wait_s: float = Field(15.0, ge=0.0, le=3600.0)
    # The turn lock's lifetime, renewed while the turn runs: frees an agent whose process died.
    turn_hold_s: float = Field(60.0, ge=1.0, le=86400.0)
    # The Anthropic-compatible Messages endpoint behind POST /v1/messages, e.g.
    # https://api.anthropic.com ("" = none: that route answers LLM_UNAVAILABLE); same timeout
    # and retries as above.
    anthropic_base_url: str = ""
    # Sent upstream; "" = the model the request names.
    anthropic_model: str = ""
    anthropic_api_key_env: str = "ANTHROPIC_API_KEY"
    anthropic_version: str = Field("2023-06-01", min_length=1, max_length=32)


class HeartbeatSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_depth: int = Field(8, ge=1, le=1000)
    max_duration_s: float = Field(60.0, gt=0.0, le=86400.0)
    token_floor: int = Field(256, ge=0)
    rate_per_s: float = Field(3.0, gt=0.0, le=10_000.0)
    cooldown_ms: int = Field(750, ge=0, le=3_600_000)


class ContextSettings(BaseModel):
    """The context builder's layers (vcm.prompt.layers): token budgets as shares of the window."""

    model_config = ConfigDict(extra="forbid")

    identity: bool = True  # a line with today's date, the agent and the user's name
    # Time in the FIFO (vcm.hotpath.timeline): "day" a date where the day changes (with the gap
    # when long), "message" a date and time on every message, "off" none. Counted on append.
    time: Literal["day", "message", "off"] = "day"
    user_name: str = Field("", max_length=200)
    tools_hint: float = Field(0.01, ge=0.0, le=0.2)
    state: float = Field(0.04, ge=0.0, le=0.3)
    sticky: float = Field(0.03, ge=0.0, le=0.3)
    # Relevant memory is what lifts the prompt above its FIFO and summary: at 0.2 of the window and
    # 20 messages the built prompt holds answer words for 84.6 % (mean) of LoCoMo's questions
    # against 74.4 % at 0.08 and 5 (docs/benchmarks.md, eval_answers.py); it is the uncached
    # part of each turn, so it costs prefix-cache reuse (82.0 against 85.6 % at 8k).
    memory: float = Field(0.2, ge=0.0, le=0.5)
    skills: float = Field(0.04, ge=0.0, le=0.3)
    # The room a prompt keeps for the per-turn layers (state header, relevant memory, skills, ...):
    # when the hot context leaves less (near the flush line), the prompt leaves the FIFO's oldest
    # messages out (vcm.prompt.room; the hot state keeps them). 0 gives the layers only what the
    # hot context leaves. At 0.15 the prompt holds 83.2 % of LoCoMo's answer words instead of
    # 72.0 % (the dev file at a 4k window; docs/benchmarks.md, "Answers in the prompt"); 0.25
    # holds 83.6 % but costs 3-5 more points of prefix-cache reuse.
    turn_room: float = Field(0.15, ge=0.0, le=0.5)
    # In how many cuts an eviction cycle may reach that room: each cut frees turn_room / steps
    # more, so fewer steps break the cached prefix less often and leave more of the room unused.
    turn_room_steps: int = Field(1, ge=1, le=16)
    # Relevant memory: at most this many facts and recalled messages (hybrid search on the latest
    # user message; messages still in the FIFO and facts already shown are left out).
    memory_facts: int = Field(5, ge=0, le=100)
    memory_messages: int = Field(20, ge=0, le=100)
    # A fact enters relevant memory only from this fused search score (half the share of the
    # question's words it holds, half its cosine; vcm.store.fact_rank): below it, a fact is as
    # unlike the question as an unrelated one, and its line would take a recalled message's room.
    memory_fact_min_score: float = Field(0.3, ge=0.0, le=1.0)
    # A directory of skill files (.md with YAML front matter); "" = none.
    skills_dir: str = ""
