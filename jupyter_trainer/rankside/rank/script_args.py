"""A run's script arguments as the rank passes them to its script: the placeholders the
submitting side wrote in them (``${{data.NAME}}``, ``${{params.NAME}}``, ``${{env.NAME}}``,
and ``${{secret.N}}`` for a secret argument, kept in the run's owner-only ``secrets.json``)
replaced by what they stand for on this rank, in the rank itself: so the command lines every
user of the machine can read (``ps``) hold no secret. Standard library only: copied into every
snapshot.
"""

from __future__ import annotations

import os
import re
from typing import Any

_PLACEHOLDER = re.compile(r"\$\{\{(data|params|env|secret|checkpoint)\.([A-Za-z0-9_.-]+)\}\}")
# Azure ML v1 set these on its nodes, and v1 jobs name them in their arguments
# ($AZ_BATCHAI_JOB_MASTER_NODE_IP): each is read from what the launcher set instead
_V1_ENV = {
    "AZ_BATCHAI_JOB_MASTER_NODE_IP": lambda env: env.get("MASTER_ADDR"),
    "AZ_BATCHAI_MPI_MASTER_NODE": lambda env: env.get("MASTER_ADDR"),
    "AZ_BATCH_MASTER_NODE": lambda env: (
        f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
        if env.get("MASTER_ADDR") and env.get("MASTER_PORT")
        else None
    ),
    "AZ_BATCHAI_TASK_INDEX": lambda env: env.get("GROUP_RANK") or env.get("NODE_RANK"),
    "AZUREML_CR_NODE_RANK": lambda env: env.get("GROUP_RANK") or env.get("NODE_RANK"),
    "NODE_RANK": lambda env: env.get("GROUP_RANK"),
}


def _secret(number: str, run_dir: Any) -> str:
    """Script argument ``number``'s real value, from the run's owner-only file."""
    from . import run_secrets

    found = run_secrets.read(run_dir).get("args", {}).get(number)
    if found is None:
        raise KeyError(
            f"script argument {number} is a secret, and the run's {run_secrets.FILE} holds no "
            "value for it (only the run's owner can start it with its secrets)"
        )
    return str(found)


def _from_environment(name: str) -> str:
    """``$NAME`` in a v1 job's arguments, as the shell on v1's node expanded it."""
    found = os.environ.get(name)
    if found is None and name in _V1_ENV:
        found = _V1_ENV[name](os.environ)
    if found is None:
        raise KeyError(
            f"the script's arguments name ${name}, which is not set on this rank; set it "
            "in the run's environment (%environment or the target's env) or leave it out"
        )
    return found


def resolved(args: list[str], runtime: Any) -> list[str]:
    """The script's arguments with each ``${{data.NAME}}`` replaced by the path of the data
    input NAME on this node (``jt.data[NAME]``), each ``${{params.NAME}}`` by the value of
    the param NAME (``jt.params[NAME]``: a sweep's trial value, say), and each
    ``${{env.NAME}}`` (a v1 job's ``$NAME``) by the rank's environment variable NAME, and
    ``${{checkpoint.latest}}`` by the path of this run's newest checkpoint, "" on a first
    start: a script that resumes from the folder its ``--resume_from_checkpoint`` names goes
    on from its own newest state after a restart."""
    if not any("${{" in a for a in args):
        return args

    def value(match: re.Match) -> str:
        kind, name = match.group(1), match.group(2)
        if kind == "data":
            return str(runtime.data[name])
        if kind == "env":
            return _from_environment(name)
        if kind == "secret":
            return _secret(name, runtime.run_dir)
        if kind == "checkpoint":  # check_placeholders let only "latest" through
            from . import rank_files

            return rank_files.newest_checkpoint(str(runtime.checkpoint_dir))
        params = runtime.params
        if name not in params:
            given = ", ".join(sorted(params)) or "none"
            raise KeyError(f"the run has no param {name!r} (its params: {given})")
        return str(params[name])

    return [_PLACEHOLDER.sub(value, a) for a in args]
