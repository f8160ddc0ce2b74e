"""The shared workspace: ``import_store`` copies a personal store into it."""

from __future__ import annotations

import os
from pathlib import Path

from ..store import Store
from ..store.importing import ImportReport
from ..store.importing import import_store as _import


def import_store(
    source: str | os.PathLike[str], *, home: str | os.PathLike[str] | None = None
) -> ImportReport:
    """Copy the runs, sweeps and model versions of the store at ``source`` that the
    workspace at ``home`` (default ``$JUPYTER_TRAINER_HOME``) lacks, keeping their ids,
    version numbers and lineage; what was copied, found already there, and skipped (with
    why). Running it again changes nothing."""
    return _import(Store(home), Path(source))
