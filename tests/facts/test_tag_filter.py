"""Memory tags never reach a reader: ``shown`` for a whole reply, ``TagFilter`` for one that
arrives in pieces, cut anywhere (a tag split across stream deltas included)."""

from __future__ import annotations

import itertools

from vcm.facts.capture import TagFilter, capture, shown

REPLY = 'Noted. [MEMORY:preference] Ann likes tea [/MEMORY]See you [STATE:trip.city]"Porto"[/STATE]at 9 [ok].'


def filtered(pieces: list[str]) -> str:
    tags = TagFilter()
    return "".join(tags.feed(p) for p in pieces) + tags.end()


def test_a_tag_cut_anywhere_across_pieces_never_shows() -> None:
    want = REPLY
    for a, b in itertools.combinations(range(1, len(want)), 2):
        out = filtered([want[:a], want[a:b], want[b:]])
        assert out == "Noted. See you at 9 [ok].", (a, b, out)
    assert filtered(list(want)) == "Noted. See you at 9 [ok]."  # one character at a time


def test_text_is_held_only_while_it_may_be_a_tag() -> None:
    tags = TagFilter()
    assert tags.feed("Price [USD] is ") == "Price [USD] is "  # not a tag: shown at once
    assert tags.feed("low [MEM") == "low "  # may be a tag: held
    assert tags.feed("ORY:fact]Ann is 40") == ""  # inside a tag
    assert tags.feed("[/MEMORY] ok") == "ok"  # the blank after a dropped tag goes with it
    assert tags.feed(" [STATE:k") == " " and tags.end() == "[STATE:k"  # never closed: no tag, shown


def test_whole_replies_are_shown_as_capture_strips_them() -> None:
    assert shown(REPLY) == capture(REPLY).stripped == "Noted. See you at 9 [ok]."
    assert capture(REPLY).memories == (("preference", "Ann likes tea"),)
    assert shown("No tags  here [x]") == "No tags  here [x]"  # untouched when it holds none
