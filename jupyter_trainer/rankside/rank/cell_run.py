"""Run a notebook cell's script, ``_jt/cell.py``, as ``__main__``, each part of it under the
name of the notebook cell it came from.

Capture writes the script and, beside it, ``cell_parts.json``: which of its lines are the
cell itself and which are notebook definitions from earlier cells, with each one's cell
number and first line (``capture/cellscript.py``). Here each part is compiled as the file
``Cell In [n]`` with the line numbers the notebook's editor shows, and its lines are put in
``linecache`` under that name, as IPython does for a cell. The code objects themselves then
carry the cell's name and lines, so a traceback, ``py-spy dump`` (which reads them from the
process) and pdb all agree on ``Cell In [4], line 3``. The generated lines between the parts
(parameters, imports) keep the script's own name and lines.

Standard library only: copied into every snapshot.
"""

from __future__ import annotations
import __future__ as future_flags

import json
import linecache
import os
import re
import sys
import types
from typing import Any

PARTS_FILE = "cell_parts.json"  # capture.snapshot.PARTS_FILE, beside the script
PARTS_VERSION = 1  # capture.cellscript.PARTS_VERSION
UNNAMED = "the cell"  # the name of a cell whose number the run's origin does not say
_FUTURE = 0
for _feature in future_flags.all_feature_names:
    _FUTURE |= getattr(future_flags, _feature).compiler_flag

_names: set[str] = set()  # the names the running script's parts were compiled under


def parts_of(entry: str) -> list[dict[str, Any]] | None:
    """The parts of the script ``entry`` as ``cell_parts.json`` beside it lists them, or
    None when there is no such map (not a cell's script, or an older snapshot)."""
    try:
        with open(os.path.join(os.path.dirname(entry), PARTS_FILE), encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or found.get("version") != PARTS_VERSION:
        return None
    parts = [
        p
        for p in found.get("parts") or ()
        if isinstance(p, dict)
        and all(type(p.get(k)) is int and p[k] > 0 for k in ("start", "end", "line"))
        and p["end"] >= p["start"]
        and (p.get("cell") is None or type(p.get("cell")) is int)
    ]
    return sorted(parts, key=lambda p: p["start"])


def cell_name(cell: Any) -> str:
    """``Cell In [7]`` for cell 7, as IPython names a cell; ``the cell`` when not known."""
    return f"Cell In [{cell}]" if type(cell) is int else UNNAMED


def origin_cell(run_dir: str | None) -> Any:
    """The number of the cell the run was started from, as its ``spec.json`` says."""
    try:
        with open(os.path.join(run_dir or "", "spec.json"), encoding="utf-8") as f:
            return (json.load(f).get("origin") or {}).get("cell")
    except (OSError, ValueError, AttributeError):
        return None


def run(entry: str, run_dir: str | None, parts: list[dict[str, Any]]) -> None:
    """Run the script ``entry`` as ``python entry`` would (``runpy.run_path`` as
    ``__main__``), each of ``parts`` compiled under its cell's name (see the module's
    docstring). Every part is compiled before any runs, as Python compiles a file."""
    codes = compile_parts(entry, parts, cell_name(origin_cell(run_dir)))
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=entry, __cached__=None, __loader__=None, __package__="", __spec__=None
    )
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        for code in codes:
            exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def compile_parts(entry: str, parts: list[dict[str, Any]], own: str) -> list[types.CodeType]:
    """The code objects of the script ``entry``, in order: each of ``parts`` compiled under
    its cell's name (the cell itself under ``own``), the lines between them under the
    script's, and every name's lines put in ``linecache``."""
    with open(entry, encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    pieces = _pieces(len(lines), parts, entry, own)
    shown: dict[str, list[str]] = {}
    for start, end, name, line in pieces:
        if name != entry:
            text = shown.setdefault(name, [])
            text += ["\n"] * (line + end - start - len(text))
            text[line - 1 : line + end - start] = lines[start - 1 : end]
    for name, text in shown.items():
        linecache.cache[name] = (sum(map(len, text)), None, text, name)
    _names.update(shown)
    codes, flags = [], 0
    for start, end, name, line in pieces:
        source = "\n" * (line - 1) + "".join(lines[start - 1 : end])
        code = compile(source, name, "exec", flags, dont_inherit=True)
        flags |= code.co_flags & _FUTURE  # the script's __future__ imports hold for every part
        codes.append(code)
    return codes


def _pieces(
    count: int, parts: list[dict[str, Any]], entry: str, own: str
) -> list[tuple[int, int, str, int]]:
    """``(start, end, name, line)`` of each run of the script's lines, in order: the parts
    under their cells' names, the lines between them under the script's."""
    out, at = [], 1
    for part in parts:
        start, end = part["start"], min(part["end"], count)
        if start < at or start > count:
            continue  # overlapping or past the end: left to the script's own name
        if start > at:
            out.append((at, start - 1, entry, at))
        cell = part.get("cell")
        out.append((start, end, own if cell is None else cell_name(cell), part["line"]))
        at = end + 1
    if at <= count:
        out.append((at, count, entry, at))
    return out


def is_part(filename: str, entry: str) -> bool:
    """Whether code of ``filename`` is the script's: its own lines or one of its parts."""
    return filename == entry or filename in _names


def is_cell(filename: str) -> bool:
    """Whether ``filename`` is the name a part of the running script was compiled under."""
    return filename in _names


def cited(text: str) -> str:
    """A formatted traceback's ``File "Cell In [4]", line 3`` as IPython writes it,
    ``Cell In [4], line 3``."""
    if not _names:
        return text
    names = "|".join(re.escape(name) for name in sorted(_names, key=len, reverse=True))
    return re.sub(r'File "(%s)", line (\d+)' % names, r"\1, line \2", text)
