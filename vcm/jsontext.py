"""JSON read from outside vcm (a file, a model's answer or tool call, a stream's frame, a
command line): every way a document can fail to be read is a :class:`json.JSONDecodeError`;
and JSON written one document a line (:func:`line_safe`).

``json.loads`` raises ``RecursionError`` for a document nested past the interpreter's recursion
limit (about a thousand levels) and a plain ``ValueError`` for an integer of over 4 300 digits;
callers that catch ``JSONDecodeError`` (or ``ValueError``) to report bad input met a traceback, or
a failed job, instead. Imports nothing from vcm.
"""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``; unreadable JSON of any kind raises ``json.JSONDecodeError``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        reason = "nested too deeply to read (about 1000 levels at most)"
    except ValueError as exc:  # an integer over sys.get_int_max_str_digits() digits
        reason = str(exc)
    raise json.JSONDecodeError(reason, text if isinstance(text, str) else "", 0) from None


# Line breaks to Python's str.splitlines (and so httpx's iter_lines) that JSON written with
# ensure_ascii=False leaves raw inside strings; json.dumps escapes every other one it knows.
_SPLITTERS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def line_safe(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) with the characters that readers
    splitting on more than ``\\n`` take for line ends escaped, as JSON allows inside strings: a
    message holding U+2028 written raw into a JSON Lines file or a server-sent event was cut in
    two by such a reader. The document read back is the same."""
    for char, escaped in _SPLITTERS.items():
        if char in text:
            text = text.replace(char, escaped)
    return text


__all__ = ["line_safe", "loads"]
