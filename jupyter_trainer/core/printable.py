"""Text that users and their runs chose (file names, swept values, error messages) shown
on one line of a table or a terminal."""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` with each character that does not print (a newline, a tab, the ESC of an
    ANSI sequence, an undecodable byte of a file name) and each backslash written as
    ``repr`` writes it (``\\n``, ``\\x1b``, ``\\\\``), so that it shows on one line, cannot
    drive the terminal, and reads back unambiguously. Most text comes back unchanged."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(c if c.isprintable() and c != "\\" else _escaped(c) for c in text)


def _escaped(char: str) -> str:
    return "\\\\" if char == "\\" else repr(char)[1:-1]
