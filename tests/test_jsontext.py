"""JSON from outside vcm: past the decoder's recursion limit, or with an integer over 4 300
digits, ``json.loads`` raised RecursionError or a bare ValueError, and the readers that catch
``JSONDecodeError`` to report bad input raised a traceback instead (or failed a job)."""

from __future__ import annotations

import hashlib
import json
import zlib

import pytest

from vcm import jsontext, snapshots
from vcm.cli.agents import _json_value
from vcm.cli.appending import read_messages
from vcm.errors import SnapshotCorrupt, ValidationError
from vcm.facts.capture import capture
from vcm.service import portable_format

DEEP = "[" * 5000 + "]" * 5000
LONG_INT = '{"n": ' + "7" * 5000 + "}"


@pytest.mark.parametrize(
    ("text", "reason"), [(DEEP, "nested too deeply"), (LONG_INT, "4300 digits"), ("{x", "Expecting property name")]
)
def test_unreadable_json_is_always_a_decode_error(text: str, reason: str) -> None:
    for given in (text, text.encode()):
        with pytest.raises(json.JSONDecodeError, match=reason):
            jsontext.loads(given)
    assert jsontext.loads('{"a": [1, "b", null]}') == {"a": [1, "b", None]}
    assert jsontext.loads("[" * 500 + "]" * 500) is not None  # deep, but within the limit


def test_readers_of_outside_json_report_it_as_bad_input() -> None:
    for text in (DEEP, LONG_INT):
        with pytest.raises(ValidationError, match="line 2 is not JSON"):
            read_messages(b'{"role": "user", "content": "hi"}\n' + text.encode())
        with pytest.raises(ValidationError, match="line 1"):
            portable_format.parse([text])
        assert _json_value(text) == text  # `vcm state set k VALUE`: not JSON, so the text itself
        reply = f"Noted. [STATE:plan]{text}[/STATE]"
        assert capture(reply).states == (("plan", text),)
        payload = zlib.compress(text.encode())
        with pytest.raises(SnapshotCorrupt, match="cannot be read"):
            snapshots.decode(payload, hashlib.sha256(payload).hexdigest())
