"""Capture: turn a notebook cell (or a script) and what it needs into a run snapshot.

``free_names`` finds what a cell reads, ``resolve_cell`` resolves those names against the
notebook namespace into a ``CellContext``, and ``write_cell_snapshot`` /
``write_script_snapshot`` write the immutable snapshot folder and return its ``CodeSpec``.
Nothing here imports IPython: the caller passes the namespace and the transformed cell.
"""

from ..core.lazy import lazy_exports

# Loaded on first use (PEP 562): the run supervisor only hashes a snapshot.
_HOMES = {
    **dict.fromkeys(("DEFAULT_MAX_CARRY_BYTES", "CellContext", "resolve_cell"), "context"),
    "free_names": "names",
    **dict.fromkeys(
        (
            "RESERVED_DIR",
            "hash_snapshot",
            "source_summary",
            "write_cell_snapshot",
            "write_script_snapshot",
        ),
        "snapshot",
    ),
}
__all__ = sorted(_HOMES)  # noqa: PLE0605

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
