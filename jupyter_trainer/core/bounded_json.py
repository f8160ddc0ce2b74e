"""JSON read with a bound on its nesting, for files another user may have written.

Python's parser recurses once per level of nesting, so a file of ten thousand ``[`` (any
member of a workspace can put one in a folder of ``runs/``) raises ``RecursionError`` deep
in the parser, and a file just under the interpreter's limit parses, then breaks whatever
walks it next (``json.dumps``, a redaction, a view). The nesting is therefore counted
first, in one pass that only looks at brackets, quotes and backslashes, and a file nested
deeper than any record this package writes is refused with ``TooDeep`` (a ``ValueError``,
so every reader that already handles a file that is not JSON handles this one too).
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 100  # a record's deepest part, a spec's params, is bounded at 32 levels
_TOKENS = re.compile(r'[][{}"\\]')


class TooDeep(ValueError):
    """The JSON nests deeper than the reader allows."""


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON in ``text`` opens more than ``limit`` arrays or objects inside each
    other, counting only brackets outside strings; linear in the length of ``text``."""
    if text.count("[") + text.count("{") <= limit:
        return False  # too few to nest that deep: most texts stop here, at C's speed
    depth, in_string, escaped_at = 0, False, -1
    for match in _TOKENS.finditer(text):
        at, char = match.start(), match.group()
        if at == escaped_at:
            continue
        if in_string:
            if char == "\\":
                escaped_at = at + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def loads(text: str | bytes, *, limit: int = MAX_DEPTH) -> Any:
    """``json.loads(text)``, or ``TooDeep`` when it nests deeper than ``limit`` levels."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    if too_deep(text, limit):
        raise TooDeep(f"nests deeper than {limit} levels, which no record written here does")
    return json.loads(text)
