"""The Slurm target against a real single-host Slurm (slurmctld + slurmd) started here."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from conftest import check_shared_modes, leftover, wait_for
from support.jt_cli import cli
from support.sessions import check_a_session_on
from support.workloads import DIST_STEPS, SLEEPER

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import RunFailed
from jupyter_trainer.frontends.views.text import progress_line


def test_two_task_torchrun_gloo_training(cluster, home):
    run = api.submit(
        DIST_STEPS, namespace={"steps": 5}, target="cluster", procs=2, name="slurm-ddp"
    )
    run.wait(timeout=120)
    state = run.state
    assert state["status"] == "completed"
    assert state["launcher"]["job_id"].isdigit()
    assert state["scheduler"]["state"] == "COMPLETED"
    assert {"preparing", "queued", "running", "finalizing"} <= set(state["stages"])
    for rank in (0, 1):
        assert f"rank {rank} of 2 sum 3.0" in run.logs(rank)
    assert [s for s, _ in run.metrics(rank=1)["loss"]] == [0, 1, 2, 3, 4]
    assert leftover(run.id) == []


def test_mpirun_inside_the_allocation(cluster, home):
    code = (
        "import os, torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
        "t = torch.ones(1)\ndist.all_reduce(t)\n"
        "print('mpi rank', os.environ['OMPI_COMM_WORLD_RANK'], 'sum', t.item(), "
        "'job', os.environ['SLURM_JOB_ID'])\n"
    )
    run = api.submit(code, target="cluster", procs=2, launcher="mpirun", name="slurm-mpi")
    run.wait(timeout=120)
    job = run.state["launcher"]["job_id"]
    for rank in (0, 1):
        assert f"mpi rank {rank} sum 2.0 job {job}" in run.logs(rank)


def test_cancel_while_pending_shows_the_reason(cluster, home):
    blocker = cluster.run(
        "sbatch",
        "--parsable",
        "-c",
        "2",
        "--time=10",
        "--output=/dev/null",
        "--wrap",
        "sleep 300",
    ).stdout.strip()
    wait_for(lambda: f"{blocker} RUNNING" in cluster.queue(), what="the blocker to run")
    run = api.submit(SLEEPER, target="cluster", procs=2, name="slurm-pending")
    queued = wait_for(
        lambda: run.state.get("queue", {}).get("reason") in ("Resources", "Priority") and run.state,
        timeout=30,
        what="a queue reason",
    )
    assert queued["status"] == "queued" and queued["queue"]["state"] == "PENDING"
    job = queued["launcher"]["job_id"]
    # the backfill scheduler's estimate: when the blocker reaches its 10 minute limit
    queue = wait_for(
        lambda: run.state["queue"] if "start_at" in run.state.get("queue", {}) else None,
        timeout=30,
        what="an expected start",
    )
    assert 480 <= queue["start_at"] - time.time() <= 610, queue
    assert (queue["position"], queue["pending"], queue["partition"]) == (1, 1, "debug"), queue
    follower = run.follower()
    follower.poll()
    line = progress_line(follower)
    assert re.search(
        rf"job {job} waiting: (Resources|Priority); expected to start at \d\d:\d\d "
        r"\(in \d+:\d\d\); 1st of 1 pending in partition debug",
        line,
    ), line
    shown = cli("show", run.id, timeout=60)
    assert re.search(
        r"\n" + re.escape(f"job {job} waiting: ") + r".*; 1st of 1 pending", shown.stdout
    ), shown.stdout
    # the Lab panel's list row says the same (views.health.list_fields, in REST's rows)
    from jupyter_trainer.frontends.views.health import list_fields

    waiting = list_fields(run.state, run.spec, time.time())["waiting"]
    assert waiting.startswith(f"job {job} waiting: ") and "1st of 1 pending" in waiting
    run.cancel(timeout=30)
    assert run.status == "canceled"
    assert not any(line.startswith(job + " ") for line in cluster.queue())
    assert run.state["scheduler"]["state"] == "CANCELLED"


def test_cancel_while_running_ends_every_task(cluster, home):
    run = api.submit(SLEEPER, target="cluster", procs=2, name="slurm-running")
    wait_for(
        lambda: all(run.store.read_events(run.id, r)[0] for r in (0, 1)),
        timeout=60,
        what="both ranks to log",
    )
    assert run.status == "running" and leftover(run.id)
    run.cancel(timeout=30)
    assert run.status == "canceled" and leftover(run.id) == []
    job = run.state["launcher"]["job_id"]
    assert cluster.run("squeue", "-h", "-s", "-j", job, check=False).stdout.strip() == ""


def test_failing_task_names_its_rank(cluster, home):
    code = (
        "import time, torch.distributed as dist\nfrom jupyter_trainer import runtime as jt\n"
        "dist.init_process_group()\nif jt.rank == 1:\n    raise KeyError('missing column')\n"
        "time.sleep(600)\n"
    )
    run = api.submit(code, target="cluster", procs=2, name="slurm-fail")
    with pytest.raises(RunFailed) as info:
        run.wait(timeout=120)
    assert info.value.failed_rank == 1 and "KeyError: 'missing column'" in str(info.value)
    assert leftover(run.id) == []


def test_time_limit_is_a_clear_timeout(cluster, home):
    (home / "targets.toml").write_text('[targets.short]\nkind = "slurm"\ntime = "1"\n')
    run = api.submit(SLEEPER, target="short", procs=1, launcher="python", name="slurm-timeout")
    with pytest.raises(RunFailed, match="TIMEOUT"):
        run.wait(timeout=200)
    assert run.state["scheduler"]["state"] == "TIMEOUT" and leftover(run.id) == []


def test_node_failure_is_a_clear_node_fail_and_not_requeued(cluster, home):
    run = api.submit(SLEEPER, target="cluster", procs=1, launcher="python", name="slurm-node-fail")
    wait_for(lambda: run.store.read_events(run.id, 0)[0], timeout=60, what="the task to log")
    node = cluster.run(
        "squeue", "-h", "-o", "%N", "-j", run.state["launcher"]["job_id"]
    ).stdout.strip()
    try:
        cluster.run("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=jt-test")
        with pytest.raises(RunFailed, match="a node failed \\(NODE_FAIL\\)"):
            run.wait(timeout=60)
    finally:  # slurmctld may refuse RESUME while the node is still ending the job

        def idle() -> bool:
            return cluster.run("sinfo", "-h", "-o", "%t", "-n", node).stdout.strip() == "idle"

        wait_for(
            lambda: (
                idle()
                or cluster.run(
                    "scontrol", "update", f"NodeName={node}", "State=RESUME", check=False
                ).returncode
                == 0
            ),
            timeout=30,
            what="slurmctld to take RESUME",
        )
        wait_for(idle, timeout=30, what=f"{node} back in service")
    assert run.state["scheduler"]["state"] == "NODE_FAIL"
    assert leftover(run.id) == []


def test_reattach_after_the_submitter_is_gone(cluster, home, tmp_path):
    script = tmp_path / "submit.py"
    script.write_text(
        "import jupyter_trainer as jt\n"
        "run = jt.submit('import time\\nfrom jupyter_trainer import runtime as jt\\n"
        "for i in range(20):\\n    jt.log(step=i, x=i)\\n    time.sleep(0.2)', target='cluster',"
        " launcher='python', name='slurm-reattach')\n"
        "print(run.id, flush=True)\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
    run = api.get_run(out.stdout.strip())
    wait_for(lambda: run.state.get("launcher", {}).get("job_id"), what="the job id")
    shown = cli("show", run.id, "--json")
    assert shown.returncode == 0 and '"job_id"' in shown.stdout, shown.stderr
    run.wait(timeout=120)
    assert [s for s, _ in run.metrics()["x"]] == list(range(20))


def test_named_environment_runs_on_the_cluster(cluster, home):
    from jupyter_trainer.environment import EnvDefinition, define

    define(
        EnvDefinition.from_yaml(
            "extra",
            'python: "3.11"\ninherit: true\npip:\n  - six==1.16.0\nenv:\n  EXTRA_VAR: from-env\n',
        ),
        home=home,
    )
    code = "import os, six\nprint('six', six.__version__, os.environ['EXTRA_VAR'])\n"
    run = api.submit(code, target="cluster", launcher="python", env="extra", name="slurm-env")
    run.wait(timeout=180)
    assert "six 1.16.0 from-env" in run.logs(0)
    assert run.state["environment"]["name"] == "extra"


def test_a_notebook_cell_runs_on_the_cluster(cluster, home):
    from IPython.testing import globalipapp

    globalipapp.start_ipython()
    shell = globalipapp.get_ipython()
    shell.run_cell("%load_ext jupyter_trainer")
    shell.run_cell("steps = 3")
    result = shell.run_cell("%%train --target cluster --procs 2 --name slurm-cell\n" + DIST_STEPS)
    assert result.success, result.error_in_exec
    run = result.result
    assert run.status == "completed" and run.spec.target.name == "cluster"
    assert run.spec.params == {"steps": 3}
    assert "slurm job" in summary_text_of(run)


def summary_text_of(run) -> str:
    from jupyter_trainer.frontends.views.text import summary_text

    follower = run.follower()
    follower.poll()
    return summary_text(follower, run.spec, run.outputs)


def test_what_the_cluster_writes_in_a_shared_workspace_keeps_its_modes(
    cluster, home, pg_url, monkeypatch
):
    """The ranks of a Slurm job write the run's files under the job's umask: in a shared
    workspace, the group reads them and nobody else."""
    import os

    monkeypatch.setenv("JUPYTER_TRAINER_INDEX", pg_url)
    old = os.umask(0o002)  # a user whose umask would let the group write
    try:
        run = api.submit(
            DIST_STEPS, namespace={"steps": 2}, target="cluster", procs=2, name="shared"
        )
    finally:
        os.umask(old)
    run.wait(timeout=120)
    assert run.status == "completed", run.logs()
    checked = check_shared_modes(run.path)
    assert checked > 10 and (run.path / "logs" / "rank-1.log").exists()


def test_a_live_session_on_slurm(cluster, home, capsys):
    """A session's ranks in a Slurm allocation, driven from here, on the filesystem they
    share with this machine."""
    check_a_session_on("cluster", nodes=1, procs=2, capsys=capsys)
