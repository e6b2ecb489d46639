"""JSON read from outside vcm (a file, a model's answer or tool call, a stream's frame, a
command line): every way a document can fail to be read is a :class:`json.JSONDecodeError`.

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


__all__ = ["loads"]
