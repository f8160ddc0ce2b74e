"""Capture: turn a notebook cell (or a script) and what it needs into a run snapshot.

``free_names`` finds what a cell reads, ``resolve_cell`` resolves those names against the
notebook namespace into a ``CellContext``, and ``write_cell_snapshot`` /
``write_script_snapshot`` write the immutable snapshot folder and return its ``CodeSpec``.
Nothing here imports IPython: the caller passes the namespace and the transformed cell.
"""

from .context import DEFAULT_MAX_CARRY_BYTES, CellContext, resolve_cell
from .names import free_names
from .snapshot import (RESERVED_DIR, hash_snapshot, source_summary, write_cell_snapshot,
                       write_script_snapshot)

__all__ = [
    "free_names", "resolve_cell", "CellContext", "write_cell_snapshot", "write_script_snapshot",
    "DEFAULT_MAX_CARRY_BYTES", "RESERVED_DIR", "hash_snapshot", "source_summary",
]
