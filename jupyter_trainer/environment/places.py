"""Where a store keeps environments: the definitions every member reads, and the state each
user makes from them (locks, built interpreters).

```
environments/definitions/<name>/                 the team's: a name is its definer's
users/<name>/environments/locks, venvs/         in a workspace: each member's own
environments/locks, venvs/                       in a personal store
```
A lock says which packages (and which files, by hash) are installed, and a built
environment is the interpreter a run executes, so in a workspace neither is taken from a
folder any member could have filled: each member locks and builds their own, from the
definition, with uv's own download cache (``~/.cache/uv``) making a second build quick.
"""

from __future__ import annotations

from pathlib import Path

from ..core.workspace import Settings, settings


def store_settings(home: Path) -> Settings:
    return settings(Path(home))


def own_environments(home: Path) -> Path:
    """The folder of this user's locks and built environments in the store at ``home``."""
    found = store_settings(home)
    return (found.user_dir() if found.shared else Path(home)) / "environments"
