"""A store's settings, read where every layer can reach them: ``core/workspace.py``."""

from __future__ import annotations

from ..core.workspace import ADMIN_GROUP_ENV, CONFIG, INDEX_ENV, Settings, settings

__all__ = ["ADMIN_GROUP_ENV", "CONFIG", "INDEX_ENV", "Settings", "settings"]
