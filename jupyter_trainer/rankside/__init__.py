"""The rank side: what runs in a rank or on a node, standard library only.

A rank's node may have no jupyter_trainer installed, or another version, so everything this
machine sends elsewhere is a file of this folder, read through ``source()``, and those files
import only the standard library and each other (``tests/test_shipped.py`` checks both).
What is sent, and how:

- ``SNAPSHOT``: the boot script and the runtime, copied into every run's snapshot
  (``code/_jt/``), beside the snapshot's own ``jupyter_trainer`` stand-in package;
- ``AZUREML_V1``: the ``azureml`` package a v1 training script imports, in every snapshot
  too (``code/_jt/azureml_v1/``);
- ``AGENT``: the node agent and what it imports, sent to ssh, Ray and Slurm nodes as one zip
  application (``nodes/agent_zip.py``) whose package is ``_jt_agent``;
- ``POOL``: the hot-start pool, its forked child and the node launcher, sent to a node as
  the package ``_jt_node_pool``;
- ``DATA_UNPACK``: sent with ``python -c`` to unpack a data input on a node;
- ``ENV_BUILD``: sent in a tar with an environment's lock to build it on a node;
- ``KUBE_POD``: the program every pod of a Kubernetes run starts;
- ``RAY_ACTOR``: the shell that runs as a Ray actor on the nodes of a Ray cluster;
- ``DEBUG_RELAY``: sent with ``python -c`` to reach a rank's debugger on its node;
- ``CHECK``: the program of ``jupyter-trainer check``, sent as a run's script.

Some of these import a third-party package inside a function, where the node has it by
definition (torch in the runtime, ray in the Ray actor, uv in the environment builder).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent

BOOT = "boot.py"
SNAPSHOT = (
    "__init__.py",
    "runtime.py",
    "cell_run.py",
    "atomic.py",
    "event_lines.py",
    "run_inputs.py",
    "script_args.py",
    "stderr_tail.py",
    "launcher_env.py",
    "import_hooks.py",
    "frame_locals.py",
    "redact.py",
    "secret_names.py",
    "url_secrets.py",
    "run_secrets.py",
    "debugger.py",
    "autolog.py",
    "hf_hooks.py",
    "accelerate_state.py",
    "lightning_hooks.py",
    "rank_files.py",
    "rank_outputs.py",
    "onnx_export.py",
    "data.py",
    "workdir.py",
    "death_watch.py",
    "system.py",
    "gpu_read.py",
)
# The script side of Azure ML SDK v1 (``azureml.core.run.Run``), copied into every run's
# snapshot as ``code/_jt/azureml_v1/azureml/``; boot puts ``_jt/azureml_v1`` on the path.
AZUREML_V1 = (
    "azureml_v1/azureml/__init__.py",
    "azureml_v1/azureml/core/__init__.py",
    "azureml_v1/azureml/core/run.py",
    "azureml_v1/azureml/core/_inputs.py",
    "azureml_v1/azureml/core/model.py",
    "azureml_v1/azureml/core/workspace.py",
    "azureml_v1/azureml/core/dataset.py",
    "azureml_v1/azureml/core/datastore.py",
    "azureml_v1/azureml/core/experiment.py",
)
AGENT = (
    "__init__.py",
    "atomic.py",
    "procs.py",
    "agent/__init__.py",
    "agent/main.py",
    "agent/frames.py",
    "agent/processes.py",
    "agent/preflight.py",
    "agent/session.py",
    "agent/snapshot.py",
    "agent/environment.py",
    "agent/start.py",
    "agent/follow.py",
    "agent/ending.py",
)
POOL = (
    "__init__.py",
    "atomic.py",
    "procs.py",
    "home.py",
    "hotstart/__init__.py",
    "hotstart/__main__.py",
    "hotstart/client.py",
    "hotstart/server.py",
    "hotstart/warm.py",
    "hotstart/child.py",
    "hotstart/records.py",
    "hotstart/left_behind.py",
    "hotstart/node_launch.py",
    "hotstart/keeper.py",
)
DATA_UNPACK = "data_unpack.py"
ENV_BUILD = "env_build.py"
KUBE_POD = "kube_pod.py"
RAY_ACTOR = "ray_actor.py"
DEBUG_RELAY = "debug_relay.py"  # joins a debugger client to a rank's socket on its node
CHECK = "collective_check.py"  # the program of ``jupyter-trainer check``, a run's script

# The snapshot's stand-in for the package: ``jupyter_trainer`` with this folder and the
# public name ``jupyter_trainer.runtime``, so the cell's ``from jupyter_trainer import
# runtime as jt`` works on a node without jupyter_trainer.
SHIM_INIT = '"""Stand-in for jupyter_trainer inside a run snapshot: only the rank side."""\n'
SHIM_RUNTIME = (
    '"""``from jupyter_trainer import runtime as jt``: the rank side\'s runtime by '
    'its public name."""\n\n'
    "import sys\n\nfrom .rankside import runtime as _runtime\n\n"
    "sys.modules[__name__] = _runtime\n"
)


def shipped() -> tuple[str, ...]:
    """Every file of this folder that leaves this machine, by any of the ways above."""
    return tuple(
        sorted(
            {
                BOOT,
                *SNAPSHOT,
                *AZUREML_V1,
                *AGENT,
                *POOL,
                DATA_UNPACK,
                ENV_BUILD,
                KUBE_POD,
                RAY_ACTOR,
                CHECK,
                DEBUG_RELAY,
            }
        )
    )


def source(name: str) -> bytes:
    """The bytes of ``name``, a file of this folder named as in ``shipped()``."""
    if name not in shipped():
        raise ValueError(f"{name!r} is not a file the rank side ships")
    return (HERE / name).read_bytes()


def text(name: str) -> str:
    return source(name).decode("utf-8")
