"""What the run was given, read in a rank: its ``spec.json`` (params, data inputs) and the
notebook variables carried with the cell.

The runtime reads these when ``jt.params`` or ``jt.data`` is first asked for, and the cell's
script calls ``jt.load_carried(__file__)`` first. Standard library only (copied into every
run's snapshot with the runtime).
"""

from __future__ import annotations

import json
import os
from typing import Any


def from_spec(run_dir: str | None, key: str) -> Any:
    """``key`` of the run's ``spec.json``; None outside a run or without the file. The
    ``params`` it records redacted come from the run's owner-only ``secrets.json``."""
    if run_dir is None:
        return None
    path = os.path.join(run_dir, "spec.json")
    try:
        with open(path, encoding="utf-8") as f:
            found = json.loads(f.read()).get(key)
        if key == "params" and isinstance(found, dict):
            from . import run_secrets

            found.update(run_secrets.read(run_dir)["params"])
        return found
    except FileNotFoundError:
        return None
    except (ValueError, AttributeError) as exc:
        raise RuntimeError(f"jupyter_trainer: cannot read {key} from {path}: {exc}") from None


def load_carried(cell_file: str) -> dict[str, Any]:
    """The notebook values captured with a cell: ``carried.pkl`` beside ``cell_file``.

    That file holds ``{name: pickle bytes}``; each value is loaded on its own so the error
    names the variable that failed. cloudpickle output loads with plain pickle as long as
    cloudpickle is importable here.
    """
    import pickle
    from pathlib import Path

    path = Path(cell_file).resolve().parent / "carried.pkl"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    blobs = pickle.loads(raw)
    carried: dict[str, Any] = {}
    for name, blob in blobs.items():
        try:
            carried[name] = pickle.loads(blob)
        except Exception as exc:
            raise RuntimeError(
                f"jupyter_trainer: cannot load notebook variable {name!r} from {path}: "
                f"{type(exc).__name__}: {exc} (is the package that defines it, or cloudpickle, "
                f"installed in the run's environment?)"
            ) from exc
    return carried
