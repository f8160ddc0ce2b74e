"""``jupyter-trainer doctor``: where the store's record disagrees with itself.

The folders are the truth; doctor compares the indexes and the records with them and
reports one finding per problem, each naming what it is about:

- ``runs``: ``runs.db``, the run folders, lost runs and changed snapshots;
- ``stale``: unfinished runs whose supervisor is stopped or hung;
- ``models``: ``models.db``, the version folders, their ``lineage.json`` and files, and
  what a registration or deletion cut short left;
- ``data``: the data input caches under ``cache/``;
- ``workspace``: in a workspace, the modes and owners of its root and top folders.

Nothing changes unless ``fix`` is given; then what can be repaired is (``report``).
"""

from __future__ import annotations

from .. import Store
from .data import check_data
from .models import check_models
from .report import Finding, Report
from .runs import check_runs
from .stale import check_stale
from .workspace import check_workspace

__all__ = ["Finding", "Report", "examine"]


def examine(store: Store, *, fix: bool = False, hashes: bool = True) -> Report:
    """Check ``store``, its model registry and its data caches; with ``fix``, repair what
    can be repaired. ``hashes``: also hash every snapshot and every model version's files
    (reads every file of every run's code and of the registry)."""
    report = Report(home=store.home, fix=fix)
    if store.settings.shared:
        check_workspace(store.home, store.settings.trust(), report)
    check_runs(store, report, hashes=hashes)
    check_stale(store, report)
    check_models(store.home, report, hashes=hashes)
    check_data(store.home, report)
    return report
