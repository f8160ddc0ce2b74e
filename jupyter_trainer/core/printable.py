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


def terminal_safe(text: str) -> str:
    """Lines of text a run wrote (an error, a traceback) as they may reach a terminal: each
    character that does not print, but the newline and the tab, written as ``repr`` writes
    it, so the text cannot clear the screen, set a title or overwrite a line (``\\r``).
    Unlike ``printable`` it keeps the line breaks and the backslashes as they are, so a
    traceback still reads as one."""
    if all(c.isprintable() or c in "\n\t" for c in text):
        return text
    return "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in text)
