"""Sizes and values as people read them, in messages of every layer."""

from __future__ import annotations

import re

_SCALES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def format_bytes(size: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def parse_bytes(text: str) -> int | None:
    """``"20G"``, ``"500 MiB"``, ``"1.5g"``, ``"1048576"`` -> bytes; None when it is not a
    size. K, M, G and T count in 1024s, as curl's ``--max-filesize`` reads them."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text, re.I)
    if not match:
        return None
    return int(float(match.group(1)) * _SCALES[match.group(2).lower()])


def fmt_value(value: float) -> str:
    """A metric's value as people read it: four significant digits, or an exponent."""
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.4e}"


def fmt_duration(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on."""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def fmt_seconds(seconds: float) -> str:
    """ "42 s" under a minute, else a clock ("1:02")."""
    return f"{seconds:.0f} s" if seconds < 59.5 else fmt_duration(seconds)


def fmt_clock(t: float) -> str:
    """``13:05:42``, this machine's local time."""
    import time

    return time.strftime("%H:%M:%S", time.localtime(t))
