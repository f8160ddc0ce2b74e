"""Layer 8: the Python API, ``import jupyter_trainer as jt``.

``runs.py``: ``submit``, ``rerun``, ``resume``, ``get_run``, ``runs`` and ``Run``, with
``submission.py`` (a submission checked, and the function that captures its snapshot),
``start.py`` (the one path from a snapshot to a supervisor) and ``dry_run.py``; ``diff.py``:
two runs compared; ``models.py``: the model registry; ``stacks.py``: ranks' live stacks;
``sweeps/``: hyperparameter sweeps, a client of ``submit`` and ``Run`` like the magics.
The package exposes these names lazily (``jupyter_trainer.__init__``).
"""

from ..core.lazy import lazy_exports

# ``jupyter_trainer.api.submit`` and the rest, as before the API had a folder of its own.
# Not ``runs``: that name is the submodule the front ends import (``from jupyter_trainer.api
# import runs as api``); exported here, the function would take its place in the package
# once asked for. The function is ``jupyter_trainer.runs``.
__getattr__, __dir__ = lazy_exports(
    __name__,
    dict.fromkeys(
        (
            "submit",
            "rerun",
            "resume",
            "diff",
            "get_run",
            "doctor",
            "prune_environments",
            "Run",
            "RunFailed",
            "RunCanceled",
        ),
        "runs",
    ),
)
