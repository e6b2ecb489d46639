"""A token counter's memory of short texts: a prompt build counts the same layer lines turn
after turn, and each is encoded once."""

from __future__ import annotations

from typing import Any

from vcm.hotpath.tokens import MEMO_CHARS, TokenCounter
from vcm.settings.context import TokenSettings


class CountedEncoding:
    """A tiktoken encoding that counts its encode calls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.encoded: list[str] = []

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        self.encoded.append(text)
        return list(self.inner.encode(text, **kwargs))


def test_a_short_text_is_encoded_once_and_a_long_one_every_time() -> None:
    counter = TokenCounter("gpt-4o", TokenSettings())
    encoding = CountedEncoding(counter.encoding)
    counter.encoding = encoding  # type: ignore[assignment]  # a stand-in that counts its calls
    line = "- [message m-17, Caroline, 8 May 2023] I went to the LGBTQ support group yesterday."
    first = counter.text(line)
    assert first == len(encoding.inner.encode(line)) > 0
    assert counter.text(line) == first
    assert counter.message(line) == first + TokenSettings().per_message
    assert encoding.encoded == [line]
    long = "word " * (MEMO_CHARS // 5 + 1)
    assert counter.text(long) == counter.text(long) == len(encoding.inner.encode(long))
    assert encoding.encoded == [line, long, long]  # not kept: a long text is rarely counted twice


def test_special_tokens_in_user_text_are_counted_not_refused_from_memory_too() -> None:
    counter = TokenCounter("gpt-4o", TokenSettings())
    text = "say <|endoftext|> twice"
    assert counter.text(text) == counter.text(text) == len(counter.encoding.encode(text, disallowed_special=()))
