"""What the runtime and boot tests share: a clean environment for real interpreters, a run
folder, the boot script started as the supervisor starts it, and readers of what a rank left."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jupyter_trainer.capture.snapshot import runtime_files
from jupyter_trainer.rankside.host import procs

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "jupyter_trainer"
PY = sys.executable
MPIRUN = shutil.which("mpirun")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="Open MPI's mpirun is not installed")

_LAUNCHER_VARS = ("JT_", "OMPI_", "PMI", "SLURM_", "HOROVOD_")
_RANK_VARS = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "PYTHONPATH",
}


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any run, launcher or rank variable, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_LAUNCHER_VARS) and k not in _RANK_VARS
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env


def read_events(run: Path, rank: int = 0, system: bool = False) -> list[dict]:
    """The rank's events in order; its system figures, which it samples on a clock of their
    own (at its start, its exit and every interval), only with ``system``."""
    path = run / "events" / f"rank-{rank}.jsonl"
    text = path.read_text()
    assert text == "" or text.endswith("\n"), "a partial line was written"
    events = [json.loads(line) for line in text.splitlines()]
    return [e for e in events if system or e.get("kind") != "system"]


def wait_for(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


free_port = procs.free_port


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run directory holding the snapshot layout the supervisor ships."""
    run = tmp_path / "run"
    for rel, data in runtime_files().items():  # what every snapshot carries
        path = run / "code" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (run / "spec.json").write_text(json.dumps({"params": {"lr": 0.1, "epochs": 3}}))
    return run


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def boot(
    run: Path, entry: str, *args: str, site: bool = False, wait: bool = True, **env: str
) -> subprocess.CompletedProcess | subprocess.Popen:
    """Start ``code/_jt/boot.py ENTRY ARGS`` the way a launcher does (cwd outside the repo)."""
    argv = [
        PY,
        *([] if site else ["-S"]),
        "-u",
        str(run / "code" / "_jt" / "boot.py"),
        entry,
        *args,
    ]
    env = clean_env(**{"JT_RUN_DIR": str(run), "JT_RUN_ID": "r-test", **env})
    if not wait:
        return subprocess.Popen(
            argv,
            cwd=run.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    return subprocess.run(argv, cwd=run.parent, env=env, capture_output=True, text=True, timeout=60)


def python(script: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """Run a script that imports the runtime from the repo (no boot)."""
    return subprocess.run(
        [PY, "-u", str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(PYTHONPATH=str(REPO), **env),
    )


def rank_record(run: Path, rank: int = 0) -> dict:
    return json.loads((run / "ranks" / f"rank-{rank}.json").read_text())
