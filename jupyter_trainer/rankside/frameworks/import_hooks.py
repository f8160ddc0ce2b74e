"""Patch a module once the rank's code imports it, never sooner.

``when_imported(name, patch)`` calls ``patch(module)`` right away when ``name`` is loaded
already (a warm pool may have preloaded it), and otherwise from a ``sys.meta_path`` finder
the moment the import has run the module's code. Nothing is imported on its behalf, so a
rank whose code never imports ``name`` pays nothing. Standard library only: copied into
every snapshot.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from typing import Any


def when_imported(name: str, patch: Callable[[Any], None]) -> None:
    loaded = sys.modules.get(name)
    if loaded is not None:
        patch(loaded)
        return
    for finder in sys.meta_path:  # one finder per module, so every patch asked for is made
        if isinstance(finder, PatchOnImport) and finder.name == name:
            finder.patches.append(patch)
            return
    sys.meta_path.insert(0, PatchOnImport(name, patch))


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Call each of ``patches`` on module ``name`` once it has been imported and run, in the
    order they were asked for."""

    def __init__(self, name: str, patch: Callable[[Any], None]) -> None:
        self.name, self.patches = name, [patch]

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run_module(module)
            for patch in self.patches:
                patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
