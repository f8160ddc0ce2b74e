"""Environments: describe (``%%environment``), lock (``uv pip compile``), build (``uv venv``
+ ``uv pip install``, cached by lock in the store) and check (pre-flight imports) the Python
a run's ranks use.

```
$JUPYTER_TRAINER_HOME/environments/
  definitions/<name>/<version>.json, LATEST    registry.py   what users defined, versioned
  locks/<lock-key>/                            lock.py       exact pins with hashes
  venvs/<env-id>/                              build.py      ready interpreters
```
In a workspace, locks and built interpreters are each member's own, under
``users/<name>/environments/`` (``places.py``), and a definition is run by its name alone
only when it passes the trust check (``registry.py``).
``build.py`` is standalone (standard library + uv) so the same lock-to-environment step
can run on a node without this package. Packages are downloaded through uv's own cache
(``UV_CACHE_DIR``, default ``~/.cache/uv``), shared by every store on the machine.
"""

from __future__ import annotations

from ..core.lazy import lazy_exports

# Loaded on first use (PEP 562), so the run supervisor, which needs only ``realize``, does
# not pay for the modules that define, lock, list and prune environments.
_HOMES = {
    "EnvDefinition": "definition",
    "Registry": "registry",
    **dict.fromkeys(
        (
            "build_environment",
            "define",
            "environments_table",
            "export_text",
            "from_line",
            "list_environments",
            "prune",
            "prune_text",
            "show_text",
        ),
        "manage",
    ),
    **dict.fromkeys(
        (
            "EnvDriftWarning",
            "Realization",
            "check_target",
            "current",
            "prepare",
            "preview",
            "realize",
            "resolve",
        ),
        "stages",
    ),
}
__all__ = sorted(_HOMES)  # noqa: PLE0605

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
