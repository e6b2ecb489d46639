"""vcm.validation.storable: a model's words, which someone has already been shown, as memory's own
checks (vcm.validation.text) accept them."""

from __future__ import annotations

import pytest

from vcm import validation


@pytest.mark.parametrize("limit", [10, 60, 61, 100, 1_000])
def test_storable_words_pass_the_check_memory_keeps_them_by(limit: int) -> None:
    words = "Tea\x00time, " * 20  # 220 characters, two NULs every 22
    kept = validation.storable(words, limit)
    assert validation.text(kept, "content", limit) == kept
    assert "\x00" not in kept
    if len(words) <= limit:
        assert kept == words.replace("\x00", "\ufffd")
    elif limit < 60:  # no room for the note
        assert kept == words.replace("\x00", "\ufffd")[:limit]
    else:
        assert len(kept) <= limit
        cut = kept.index("\n[vcm: ")
        assert words.replace("\x00", "\ufffd").startswith(kept[:cut])
        assert kept.endswith(f"[vcm: {len(words) - cut} more characters of this reply were not kept]")


def test_words_memory_accepts_are_kept_as_they_are() -> None:
    words = "An answer with ünïcödé, a tab\tand a newline\n."
    assert validation.storable(words, 1_000) == words
