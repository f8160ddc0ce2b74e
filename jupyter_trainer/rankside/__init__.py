"""The rank side: what runs in a rank or on a node, standard library only.

A rank's node may have no jupyter_trainer installed, or another version, so everything this
machine sends elsewhere is a file of this folder, read through ``source()``, and those files
import only the standard library and each other (``tests/rankside/test_shipped.py`` checks
both).
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
- ``CHECK``: the program of ``jupyter-trainer check``, sent as a run's script;
- ``AZURE_COMMAND``: the entry script of an Azure ML SDK v2 command job, sent as its script.

Some of these import a third-party package inside a function, where the node has it by
definition (torch in the runtime, ray in the Ray actor, uv in the environment builder).

The folder's rooms, each with an ``__init__.py`` that says what it holds:

- ``rank/``: a rank's boot and runtime, what every rank of a run executes;
- ``observe/``: what a rank observes about itself (system figures, GPUs, its death);
- ``frameworks/``: framework capture (autolog, the transformers and Lightning hooks, ONNX);
- ``debug/``: a rank's debugger, its relay on the node, and a failure's saved locals;
- ``redaction/``: secrets kept out of every record and message;
- ``host/``: atomic writes, process facts and the store's home, used by every program here;
- ``programs/``: programs sent on their own (the pod program, the Ray actor, the check, the
  data unpacker, the environment builder);
- ``agent/``: the node agent; ``hotstart/``: the hot-start pool;
- ``azureml_v1/``: the script side of Azure ML SDK v1.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent

BOOT = "rank/boot.py"
SNAPSHOT = (
    "__init__.py",
    "rank/__init__.py",
    "host/__init__.py",
    "observe/__init__.py",
    "frameworks/__init__.py",
    "debug/__init__.py",
    "redaction/__init__.py",
    "rank/runtime.py",
    "rank/cell_run.py",
    "rank/session_loop.py",
    "rank/session_holder.py",
    "host/atomic.py",
    "rank/event_lines.py",
    "rank/run_inputs.py",
    "rank/script_args.py",
    "rank/stderr_tail.py",
    "rank/launcher_env.py",
    "frameworks/import_hooks.py",
    "debug/frame_locals.py",
    "redaction/redact.py",
    "redaction/secret_names.py",
    "redaction/url_secrets.py",
    "rank/run_secrets.py",
    "debug/debugger.py",
    "frameworks/autolog.py",
    "frameworks/hf_hooks.py",
    "frameworks/accelerate_state.py",
    "frameworks/lightning_hooks.py",
    "frameworks/trackers.py",
    "frameworks/mlflow_hooks.py",
    "frameworks/wandb_hooks.py",
    "rank/rank_files.py",
    "rank/rank_outputs.py",
    "rank/dcp_checkpoint.py",
    "rank/preemption.py",
    "rank/dcp_complete.py",
    "frameworks/onnx_export.py",
    "rank/data.py",
    "rank/workdir.py",
    "observe/death_watch.py",
    "observe/system.py",
    "observe/gpu_read.py",
    "observe/flight_recorder.py",
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
    "host/__init__.py",
    "host/atomic.py",
    "host/procs.py",
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
    "host/__init__.py",
    "host/atomic.py",
    "host/procs.py",
    "host/home.py",
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
DATA_UNPACK = "programs/data_unpack.py"
ENV_BUILD = "programs/env_build.py"
KUBE_POD = "programs/kube_pod.py"
RAY_ACTOR = "programs/ray_actor.py"
DEBUG_RELAY = "debug/debug_relay.py"  # joins a debugger client to a rank's socket on its node
CHECK = "programs/collective_check.py"  # the program of ``jupyter-trainer check``, a run's script
AZURE_COMMAND = "programs/azure_command.py"  # the entry of an Azure ML SDK v2 command job
# The one file of this folder that stays here: the programs are sent one file at a time.
STAYS = ("programs/__init__.py",)

# The snapshot's stand-in for the package: ``jupyter_trainer`` with this folder and the
# public name ``jupyter_trainer.runtime``, so the cell's ``from jupyter_trainer import
# runtime as jt`` works on a node without jupyter_trainer.
SHIM_INIT = '"""Stand-in for jupyter_trainer inside a run snapshot: only the rank side."""\n'
SHIM_RUNTIME = (
    '"""``from jupyter_trainer import runtime as jt``: the rank side\'s runtime by '
    'its public name."""\n\n'
    "import sys\n\nfrom .rankside.rank import runtime as _runtime\n\n"
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
                AZURE_COMMAND,
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
