"""``jt.data``: each data input of the run as a path on this rank's node.

Standard library only (it runs inside the snapshot, next to runtime.py). The run's spec
lists the inputs (``--data NAME=PATH``): where the ranks share this machine's filesystem
each is used in place; where the target staged them into its node cache
(``JT_DATA_ROOT``, ``<workdir>/data``) each is ``<root>/<content hash>/<name of the file or
folder>``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


class DataPaths(Mapping):
    """Read-only ``{name: Path}``; an unknown name says which inputs the run has."""

    def __init__(self, inputs: list[dict[str, Any]], root: str | None) -> None:
        self._paths: dict[str, Path] = {}
        for item in inputs:
            local = str(item["path"]).rstrip("/")
            if root:
                leaf = local.rsplit("/", 1)[-1] or "data"
                self._paths[item["name"]] = Path(root, item["hash"], leaf)
            else:
                self._paths[item["name"]] = Path(local)

    def __getitem__(self, name: str) -> Path:
        try:
            return self._paths[name]
        except KeyError:
            given = ", ".join(sorted(self._paths)) or "none"
            raise KeyError(
                f"the run has no data input {name!r} (its inputs: {given}); start "
                f"it with --data {name}=PATH"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __repr__(self) -> str:
        return f"DataPaths({ {k: str(v) for k, v in self._paths.items()} })"


def node_root(run_dir: str | None) -> str | None:
    """``<workdir>/data`` where the target staged the inputs (``JT_DATA_STAGED``): the run
    folder on a node is ``<workdir>/runs/<id>``. None where they are used in place."""
    if not run_dir or not os.environ.get("JT_DATA_STAGED"):
        return None
    return os.path.join(os.path.dirname(os.path.dirname(run_dir.rstrip("/"))), "data")
