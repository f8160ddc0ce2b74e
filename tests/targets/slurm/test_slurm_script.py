"""The generated sbatch command and batch script, golden-tested with hostile values.

Regenerate with JT_UPDATE_GOLDEN=1 after a deliberate change.
"""

from __future__ import annotations

import dataclasses
import os
import random
import socket
import subprocess
import sys

import pytest
from support import GOLDEN

from jupyter_trainer.core.errors import TargetError
from jupyter_trainer.core.spec import CodeSpec, EnvSpec, LaunchSpec, RunSpec
from jupyter_trainer.launchers.table import LaunchPlan
from jupyter_trainer.targets.slurm.script import (
    SlurmConfig,
    batch_script,
    parse_job_id,
    render_for_golden,
    sbatch_argv,
)

HOSTILE = "/shared/we ird/'q\"s'/$(touch pwned)"
CONFIG = SlurmConfig.from_config(
    "cluster",
    {
        "partition": "gpu",
        "account": "proj42",
        "time": "02:00:00",
        "gpus_per_node": 4,
        "sbatch": ["--qos=high", "--constraint=a100"],
        "modules": ["cuda/12.4", "nccl; rm -rf ~"],
        "env": {"NCCL_SOCKET_IFNAME": "eth0", "HOSTILE": "$(id) `id` 'x'"},
    },
)


def spec(launcher: str, nodes: int = 2, procs: int = 4) -> RunSpec:
    return RunSpec(
        name="digits; rm -rf ~",
        code=CodeSpec(entry="_jt/cell.py", hash="sha256:0", args=("--lr", "'; echo hi'")),
        launch=LaunchSpec(launcher, nodes=nodes, procs=procs if launcher != "python" else 1)
        if launcher != "python"
        else LaunchSpec("python"),
        env=EnvSpec(python=f"{HOSTILE}/venv/bin/python"),
    )


def plan(run_spec: RunSpec) -> LaunchPlan:
    run_dir = f"{HOSTILE}/runs/digits-1"
    return LaunchPlan(
        run_id="digits-1",
        run_dir=run_dir,
        python=run_spec.env.python,
        boot=f"{run_dir}/code/_jt/boot.py",
        entry="_jt/cell.py",
        args=run_spec.code.args,
        backend="nccl",
        master_addr="",
        master_port=29123,
        run_as_root=True,
        extra_env=CONFIG.env,
    )


@pytest.mark.parametrize("launcher", ["torchrun", "mpirun", "horovod", "python"])
def test_sbatch_matches_golden(launcher):
    run_spec = spec(launcher) if launcher != "python" else spec("python", 1, 1)
    p = plan(run_spec)
    text = render_for_golden(
        sbatch_argv(CONFIG, run_spec, p, f"{p.run_dir}/job.sbatch"),
        batch_script(CONFIG, run_spec, p),
    )
    golden = GOLDEN / f"slurm_{launcher}.txt"
    if os.environ.get("JT_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text.splitlines() == golden.read_text().splitlines()


@pytest.mark.parametrize("launcher", ["torchrun", "mpirun", "horovod", "python"])
def test_script_is_valid_bash_and_quotes_hostile_values(launcher, tmp_path):
    run_spec = spec(launcher) if launcher != "python" else spec("python", 1, 1)
    script = batch_script(CONFIG, run_spec, plan(run_spec))
    (tmp_path / "job.sh").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "job.sh")]).returncode == 0
    assert "module load 'nccl; rm -rf ~'" in script
    assert "export HOSTILE='$(id) `id` '\"'\"'x'\"'\"''" in script


def test_container_image_uses_pyxis_or_is_refused():
    pyxis = SlurmConfig.from_config("c", {"container": "pyxis"})
    run_spec = spec("torchrun")
    script = batch_script(pyxis, run_spec, plan(run_spec), image="nvcr.io/nvidia/pytorch:24.05-py3")
    assert "--container-image=nvcr.io/nvidia/pytorch:24.05-py3" in script
    (GOLDEN / "slurm_pyxis.txt").write_text(script) if os.environ.get("JT_UPDATE_GOLDEN") else None
    assert script.splitlines() == (GOLDEN / "slurm_pyxis.txt").read_text().splitlines()
    with pytest.raises(TargetError, match="needs a cluster that runs containers"):
        batch_script(CONFIG, run_spec, plan(run_spec), image="nvcr.io/x")


@pytest.mark.parametrize(
    "config, match",
    [
        ({"partitoin": "gpu"}, r"unknown key\(s\) \['partitoin'\]"),
        ({"time": "two hours"}, "not a Slurm time limit"),
        ({"gpus_per_node": "4"}, "gpus_per_node must be a whole number"),
        ({"sbatch": "--qos=high"}, "sbatch must be a list of strings"),
        ({"container": "docker"}, 'container must be "pyxis"'),
    ],
)
def test_bad_target_config_is_refused(config, match):
    with pytest.raises(TargetError, match=match):
        SlurmConfig.from_config("cluster", config)


def test_job_id_parsing():
    assert parse_job_id("1234\n") == "1234" and parse_job_id("77;cluster") == "77"
    with pytest.raises(TargetError, match="did not return a job id"):
        parse_job_id("sbatch: error: Batch job submission failed")


@pytest.mark.parametrize(
    "sacct,state,code,error",
    [
        ("COMPLETED|0:0", "COMPLETED", 0, None),
        ("FAILED|3:0", "FAILED", 3, None),
        ("CANCELLED by 0|0:15", "CANCELLED", 143, None),
        ("OUT_OF_MEMORY|0:125", "OUT_OF_MEMORY", 253, "ran out of memory (OUT_OF_MEMORY)"),
        ("NODE_FAIL|0:0", "NODE_FAIL", 1, "a node failed (NODE_FAIL)"),
        ("TIMEOUT|0:0", "TIMEOUT", 1, "time limit (TIMEOUT); raise `time`"),
        ("PREEMPTED|0:15", "PREEMPTED", 143, "preempted the job (PREEMPTED)"),
    ],
)
def test_final_state_from_sacct_lines(sacct, state, code, error):
    """How sacct's State|ExitCode becomes the run's exit code and failure reason (sacct's
    output as it prints it; the real sacct path runs in test_slurm_accounting.py)."""
    from jupyter_trainer.targets.slurm.queue import SCHEDULER_FAILURES, final_state

    asked = []

    def sacct_only(argv, timeout=30.0):
        asked.append(argv[0])
        return subprocess.CompletedProcess(argv, 0, stdout=sacct + "\n", stderr="")

    final = final_state("42", sacct_only)
    assert (final["state"], final["exit_code"], final["source"]) == (state, code, "sacct")
    assert asked == ["sacct"]
    if error is None:
        assert state not in SCHEDULER_FAILURES
    else:
        assert error in SCHEDULER_FAILURES[state]


def test_final_state_falls_back_to_scontrol_without_accounting():
    from jupyter_trainer.targets.slurm.queue import final_state

    def no_accounting(argv, timeout=30.0):
        if argv[0] == "sacct":
            return subprocess.CompletedProcess(
                argv,
                1,
                stdout="",
                stderr=("sacct: error: Problem talking to the database: Connection refused"),
            )
        return subprocess.CompletedProcess(
            argv,
            0,
            stderr="",
            stdout=(
                "JobId=42 JobName=jt-x JobState=OUT_OF_MEMORY Reason=OutOfMemory ExitCode=0:125 "
                "RunTime=00:00:03\n"
            ),
        )

    assert final_state("42", no_accounting) == {
        "job_id": "42",
        "state": "OUT_OF_MEMORY",
        "source": "scontrol",
        "exit_code": 253,
    }


@pytest.mark.parametrize("launcher", ["torchrun", "mpirun", "horovod"])
def test_one_node_runs_its_launcher_in_the_batch_step(launcher):
    """One node and no container: no srun step and no scontrol call (each a round trip to
    the controller); more nodes keep them (mpirun and horovodrun reach the nodes themselves),
    and so does a container image, which only srun can start."""
    one = batch_script(CONFIG, spec(launcher, nodes=1), plan(spec(launcher, nodes=1)))
    two = batch_script(CONFIG, spec(launcher), plan(spec(launcher)))
    assert "srun" not in one and "scontrol" not in one and "SLURMD_NODENAME" in one
    assert "scontrol show hostnames" in two
    assert ("exec srun " in two) == (launcher == "torchrun")
    pyxis = SlurmConfig.from_config("c", {"container": "pyxis"})
    assert "srun " in batch_script(
        pyxis, spec("torchrun", nodes=1), plan(spec("torchrun", nodes=1)), image="img"
    )


def hold_two_ports(family: int) -> list[socket.socket]:
    """Listeners on two ports in a row below the ephemeral range, the port after them free."""
    for base in random.sample(range(20000, 32000, 3), 50):
        held: list[socket.socket] = []
        try:
            for port in (base, base + 1, base + 2):
                s = socket.socket(family)
                held.append(s)
                s.bind(("::" if family == socket.AF_INET6 else "", port))
                s.listen()
        except OSError:
            for s in held:
                s.close()
            continue
        held.pop().close()
        return held
    raise AssertionError("no three free ports in a row")


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6], ids=["ipv4", "ipv6"])
def test_the_script_steps_past_a_port_that_a_socket_on_the_node_holds(family, tmp_path):
    """The run's port comes from its id; when another job on the first node listens on it
    (IPv4 or IPv6), the script takes the next port that no socket there uses, and that is
    the port the launcher gets."""
    held = hold_two_ports(family)
    port = held[0].getsockname()[1]
    run_spec = spec("mpirun", nodes=1)
    p = dataclasses.replace(plan(run_spec), master_port=port, python=sys.executable)
    script = batch_script(SlurmConfig.from_config("c", {}), run_spec, p)
    body = script[: script.index("\nexec ")] + '\nprintf "%s" "$(printenv MASTER_PORT)"\n'
    (tmp_path / "job.sh").write_text(body)
    try:
        done = subprocess.run(["bash", str(tmp_path / "job.sh")], capture_output=True, text=True)
    finally:
        for s in held:
            s.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout == str(port + 2)
