"""The frames of a rank's failure with their local variables, saved in its record
(``ranks/rank-<r>.json``, key ``frames``) so that ``jupyter-trainer show RUN --locals`` can say
what ``batch.shape`` and ``lr`` were on the rank that raised.

Each value is a ``repr`` cut to ``VALUE_CHARS`` characters (``reprlib``: long containers are
shortened, not expanded); an array or tensor is its type, shape, dtype and device, not its
numbers. Secrets are masked (``redact``): a variable or a field named like one at any depth
(a dict's key, an ``argparse.Namespace``'s or a dataclass's field), and a value shaped like
one (a URL's password, a bearer token). A module-level frame (a cell's top level) keeps its
variables and leaves out modules, functions and classes. Standard library only: copied into
every snapshot.
"""

from __future__ import annotations

import reprlib
import types
from collections.abc import Callable
from typing import Any

from ..redaction.redact import MASK, redact_object, redact_text, secret_name

VALUE_CHARS = 300  # at most this many characters of each value's repr
MAX_FRAMES = 20  # the innermost frames are kept
MAX_LOCALS = 40  # per frame; the rest are counted

_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxlist, _repr.maxtuple, _repr.maxdict, _repr.maxset = 2, 8, 8, 8, 8
_repr.maxstring, _repr.maxother, _repr.maxlong = VALUE_CHARS, VALUE_CHARS, 60
_SKIPPED = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)


def describe(value: Any, name: str | None = None) -> str:
    """One value (called ``name``) as the frames show it, its secrets masked; never raises."""
    try:
        shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
        if shape is not None and dtype is not None and not isinstance(value, type):
            device = getattr(value, "device", None)
            where = f" device={device}" if device is not None else ""
            return f"<{type(value).__name__} shape={tuple(shape)} dtype={dtype}{where}>"
        text = redact_text(_repr.repr(redact_object(value, name)))
    except Exception as exc:
        return f"<{type(value).__name__}: repr failed with {type(exc).__name__}>"
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 3] + "..."


def frame_locals(frame: Any) -> tuple[dict[str, str], int]:
    """A frame's variables as ``{name: text}`` and how many were left out."""
    names = frame.f_locals
    module_level = frame.f_code.co_name == "<module>"
    shown: dict[str, str] = {}
    left = 0
    for name in list(names):
        if name.startswith("__") or (module_level and name.startswith("_")):
            continue
        value = names[name]
        if module_level and isinstance(value, _SKIPPED):
            continue
        if len(shown) >= MAX_LOCALS:
            left += 1
            continue
        shown[name] = MASK if secret_name(name) else describe(value, name)
    return shown, left


def failure_frames(
    exc: BaseException, first_file: str | Callable[[str], bool], places: Any = None
) -> list[dict[str, Any]]:
    """The frames of ``exc``'s traceback from the first frame in ``first_file`` (the entry,
    or a test of a frame's file that says whether it is the entry's code; frames of the boot
    script before it are left out), innermost last, each with its file, line, function and
    variables. ``places(file, line)`` may rename a frame's place (a notebook cell's lines,
    say) and returns ``(file, line)``."""
    is_first = first_file.__eq__ if isinstance(first_file, str) else first_file
    tb = exc.__traceback__
    start = tb
    while start is not None and not is_first(start.tb_frame.f_code.co_filename):
        start = start.tb_next
    tb = start or tb
    frames = []
    while tb is not None:
        code = tb.tb_frame.f_code
        where = (code.co_filename, tb.tb_lineno)
        if places is not None:
            try:
                where = places(*where)
            except Exception:
                pass
        shown, left = frame_locals(tb.tb_frame)
        frame = {"file": where[0], "line": where[1], "function": code.co_name, "locals": shown}
        if left:
            frame["locals_left_out"] = left
        frames.append(frame)
        tb = tb.tb_next
    return frames[-MAX_FRAMES:]
