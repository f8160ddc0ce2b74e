"""A run's data input as a v1 script reads it: ``run.input_datasets[NAME]`` (see ``run.py``).
Standard library only: copied into every snapshot."""

from __future__ import annotations

import os
import shutil
from typing import Any


class InputDataset(str):
    """A data input's path on this node (a ``str``), with what v1's ``FileDataset`` offered a
    script that was given the dataset itself rather than its mount or download."""

    def _files(self) -> list[str]:
        if os.path.isfile(self):
            return [str(self)]
        return sorted(
            os.path.join(root, name) for root, _, names in os.walk(self) for name in names
        )

    def to_path(self) -> list[str]:
        """The input's files, relative to it, each with a leading ``/`` (as v1 gave them)."""
        if os.path.isfile(self):
            return ["/" + os.path.basename(self)]
        return ["/" + os.path.relpath(f, self).replace(os.sep, "/") for f in self._files()]

    def download(self, target_path: str | None = None, overwrite: bool = False) -> list[str]:
        """The input's files: where they are, or copied under ``target_path``."""
        if target_path is None:
            return self._files()
        copied = []
        for source, relative in zip(self._files(), self.to_path(), strict=True):
            dest = os.path.join(target_path, relative.lstrip("/"))
            if overwrite or not os.path.exists(dest):
                os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
                shutil.copy2(source, dest)
            copied.append(dest)
        return copied

    def mount(self, mount_point: str | None = None, **kwargs: Any) -> MountContext:
        """A context whose ``mount_point`` is the input's folder (nothing to mount here)."""
        return MountContext(str(self) if os.path.isdir(self) else os.path.dirname(self))


class MountContext:
    def __init__(self, mount_point: str) -> None:
        self.mount_point = mount_point

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def __enter__(self) -> MountContext:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass
