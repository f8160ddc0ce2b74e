"""``azureml.telemetry``: v1's opt-in diagnostics, which its samples' second cell turns on.

Nothing is collected or sent here, whatever is asked: the calls keep their v1 signatures so
that such a cell runs unchanged, and say so once.
"""

from __future__ import annotations

from typing import Any

_SAID = "jupyter_trainer collects no diagnostics: nothing is sent, whatever this cell asks"


def set_diagnostics_collection(
    send_diagnostics: bool = True, path: str | None = None, reset: bool = False
) -> None:
    """v1 turned the SDK's usage reports on or off; there are none here to turn."""
    print(_SAID)


def get_diagnostics_collection_info(path: str | None = None) -> dict[str, Any]:
    """What v1 reported of its diagnostics setting: here always off."""
    return {"send_diagnostics": False, "reason": _SAID}
