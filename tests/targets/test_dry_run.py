"""``--dry-run`` on the local, ssh and Slurm targets: what it prints is what a real run
starts, and it leaves nothing behind (no run, no process, nothing on the nodes or in the
queue). Real launchers, a real sshd pair and a real single-host Slurm; no mocks."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import HOSTILE as TARGET_VALUE  # the rc target's JT_TEST_VAR
from conftest import REPO
from support.jt_cli import CLI
from support.slurm_cluster import login  # noqa: F401 (fixture)
from support.ssh_hosts import ALIASES

from jupyter_trainer.api import runs as api
from jupyter_trainer.api.dry_run import DryRun
from jupyter_trainer.core.errors import EnvError, SpecError, TargetError
from jupyter_trainer.nodes.ssh import control_dir
from jupyter_trainer.rankside.host import procs
from jupyter_trainer.store import HOME_ENV
from jupyter_trainer.targets.registry import add_target

TRAIN = """
import torch.distributed as dist
from jupyter_trainer import runtime as jt
if jt.world_size > 1:
    dist.init_process_group()
jt.log(step=0, lr=lr, world=jt.world_size)
print("rank", jt.rank, "of", jt.world_size, "tag", jt.params.get("tag"))
if jt.world_size > 1:
    dist.destroy_process_group()
"""
HOSTILE = '\'; rm -rf ~; echo "$(touch PWNED)" `id`'


def _own_processes(home: Path, run_dir: str) -> list[str]:
    """Processes of this store (a supervisor) or of the run's folder (a launcher or rank)."""
    marks = (f"{HOME_ENV}={home}".encode(), f"JT_RUN_DIR={run_dir}".encode())
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(mark in env for mark in marks):
            found.append(procs.describe(int(name)))
    return found


def assert_nothing_created(home: Path, shown: DryRun) -> None:
    assert api.runs(home=home) == []
    runs = home / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []
    assert not (home / "staging").exists() or list((home / "staging").iterdir()) == []
    assert not Path(shown.run_dir).exists()  # the placeholder folder went with the dry run
    assert _own_processes(home, shown.run_dir) == []
    masters = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"ssh: {control_dir(home)}/" not in masters  # no ssh ControlMaster kept


def _materialise(shown: DryRun, real: api.Run) -> None:
    """The placeholder run folder, as the store makes a run's, with the real run's snapshot."""
    root = Path(shown.run_dir)
    shutil.copytree(real.path / "code", root / "code")
    shutil.copy(real.path / "spec.json", root / "spec.json")
    for sub in ("events", "logs", "ranks", "outputs"):
        (root / sub).mkdir()


@pytest.mark.parametrize("launcher", ["torchrun", "mpirun", "horovod", "python"])
def test_local_dry_run_is_the_command_a_real_run_starts(home, launcher):
    procs = 1 if launcher == "python" else 2
    asked = dict(namespace={"lr": 0.5}, launcher=launcher, procs=procs, params=[f"tag={HOSTILE}"])
    shown = api.submit(TRAIN, dry_run=True, **asked)
    assert isinstance(shown, DryRun) and (shown.kind, shown.target) == ("local", "local")
    assert shown.run_id == "cell-dry-run"
    assert_nothing_created(home, shown)
    lines = shown.text.splitlines()
    assert lines[0] == f"cd {shlex.quote(shown.run_dir)}"
    assert shlex.split(lines[-1]) == list(shown.argv)
    for name, value in shown.env.items():
        assert f"export {name}={shlex.quote(value)}" in lines
    assert shown.env["JT_RUN_ID"] == "cell-dry-run" and shown.env["JT_LAUNCHER"] == launcher
    assert json.dumps(HOSTILE) in shown.header  # the params, quoted as JSON

    real = api.submit(TRAIN, wait=True, **asked)
    recorded = real.state["launcher"]["argv"]
    expected = [
        a.replace(shown.run_dir, str(real.path)).replace(shown.run_id, real.id) for a in shown.argv
    ]
    assert recorded == expected
    assert f"tag {HOSTILE}" in real.logs(0)

    if launcher not in ("torchrun", "python"):
        return
    # The printed lines, run by hand in a shell, run the same job.
    _materialise(shown, real)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JT_")}
        done = subprocess.run(
            ["bash", "-c", shown.text], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        events = (Path(shown.run_dir) / "events" / "rank-0.jsonl").read_text()
        metric = [
            json.loads(line) for line in events.splitlines() if json.loads(line)["kind"] == "metric"
        ]
        assert metric[0]["values"] == {"lr": 0.5, "world": procs}
        assert not Path("PWNED").exists()
    finally:
        shutil.rmtree(Path(shown.run_dir).parent, ignore_errors=True)


def test_hostile_script_args_and_target_variables_are_quoted(home, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint(sys.argv[1:])\n")
    add_target("here", "local", home=home, env={"JT_TEST_VALUE": HOSTILE})
    shown = api.submit(
        script=script,
        args=[HOSTILE, "$(touch PWNED)", "a b"],
        target="here",
        launcher="python",
        dry_run=True,
    )
    assert shown.argv[-3:] == (HOSTILE, "$(touch PWNED)", "a b")
    assert shown.env["JT_TEST_VALUE"] == HOSTILE
    # What bash makes of the printed lines is exactly those values.
    probe = shown.text.replace(
        shlex.join(shown.argv), 'printf "%s\\n" "$JT_TEST_VALUE" ' + shlex.join(shown.argv[-3:])
    )
    probe = probe.split("\n", 1)[1]  # not the cd: the placeholder folder is gone
    out = subprocess.run(
        ["bash", "-c", probe], capture_output=True, text=True, cwd=tmp_path, check=True
    ).stdout
    assert out.splitlines() == [HOSTILE, HOSTILE, "$(touch PWNED)", "a b"]
    assert not (tmp_path / "PWNED").exists()
    assert_nothing_created(home, shown)


def test_cli_prints_only_the_command_on_stdout(home, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [
            *CLI,
            "submit",
            str(script),
            "--procs",
            "2",
            "--dry-run",
            "-p",
            f"tag={HOSTILE}",
            "--",
            HOSTILE,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    shown = api.submit(
        script=script, procs=2, params=[f"tag={HOSTILE}"], args=[HOSTILE], dry_run=True
    )
    placeholder = shlex.split(done.stdout.splitlines()[0])[1]  # cd FOLDER: its own temporary one
    assert done.stdout.replace(placeholder, shown.run_dir) == shown.text
    assert shlex.split(done.stdout.splitlines()[-1])[-1] == HOSTILE
    assert done.stderr.startswith("# dry run on target 'local' (local): nothing was started")
    assert "train-dry-run" in done.stderr and json.dumps(HOSTILE) in done.stderr
    assert_nothing_created(home, shown)


def test_cli_bad_input_fails_as_a_real_submit_does(home, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import no_such_module_here\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    outs = [
        subprocess.run(
            [*CLI, "submit", str(script), *extra],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        for extra in (["--dry-run"], [])
    ]
    assert [o.returncode for o in outs] == [2, 2]
    assert outs[0].stdout == outs[1].stdout == ""
    assert outs[0].stderr == outs[1].stderr and "no_such_module_here" in outs[0].stderr
    assert api.runs(home=home) == []


def test_bad_input_raises_the_real_errors_and_creates_nothing(home):
    cases = [
        (dict(nodes=2), TargetError, "--nodes must be 1"),
        (dict(env="no-such-env"), EnvError, "no-such-env"),
        (dict(backend="nccl"), TargetError, "needs CUDA GPUs"),
        (dict(params=["lr"]), SpecError, "lr"),
    ]
    for kwargs, error, words in cases:
        with pytest.raises(error, match=words):
            api.submit("print(1)", dry_run=True, **kwargs)
        with pytest.raises(error, match=words):
            api.submit("print(1)", **kwargs)
    with pytest.raises(EnvError, match="not_a_module_anywhere"):
        api.submit("import not_a_module_anywhere", dry_run=True)
    assert api.runs(home=home) == []
    assert not (home / "runs").exists() or list((home / "runs").iterdir()) == []


def test_magic_cell_and_script_dry_runs(ip, home, tmp_path, capsys):
    ip.user_ns["lr"] = 0.25
    result = ip.run_cell(
        f"%%train --dry-run --procs 2 -p {shlex.quote('tag=' + HOSTILE)}\nprint(lr, tag)\n",
        store_history=True,
    )
    assert result.success, result.error_in_exec
    shown = result.result
    assert isinstance(shown, DryRun) and "torch.distributed.run" in shown.text
    assert '"lr": 0.25' in shown.header and json.dumps(HOSTILE) in shown.header
    out = capsys.readouterr().out
    assert shown.text in out and "nothing was started" in out
    html = shown._repr_html_()
    assert "<pre>" in html and "&#x27;" in html  # the text, escaped
    assert_nothing_created(home, shown)

    script = tmp_path / "job.py"
    script.write_text("print('job')\n")
    result = ip.run_cell(
        f"%train {shlex.quote(str(script))} --dry-run --launcher python -- x", store_history=True
    )
    assert result.success, result.error_in_exec
    assert result.result.argv[-2:] == ("job.py", "x") and result.result.run_id == "job-dry-run"

    for line in (
        "%%train --dry-run --form\nprint(1)\n",
        "%%train --dry-run --sweep lr=choice(1,2)\nprint(lr)\n",
    ):
        result = ip.run_cell(line, store_history=True)
        assert isinstance(result.error_in_exec, SpecError)
    assert api.runs(home=home) == []


@pytest.mark.parametrize(
    "line",
    [
        "--procs 2 --bogus",
        "--launcher deepspeed",
        "--procs two",
        "--backend nccl",
        "--nodes 2",
        "-p 1x=3",
        "--target nowhere",
        "--source /does/not/exist",
        "--env missing",
    ],
)
def test_magic_bad_input_gives_the_real_submit_error(ip, home, line):
    ip.user_ns["fh"] = open(os.devnull)
    try:
        errors = [
            ip.run_cell(
                f"%%train {flags}\nprint('should not run', fh)", store_history=True
            ).error_in_exec
            for flags in (f"--dry-run {line}", line, "--dry-run")
        ]
    finally:
        ip.user_ns["fh"].close()
    dry, real, uncarriable = errors
    assert type(dry) is type(real) and str(dry).replace("--dry-run ", "") == str(real)
    assert "fh" in str(uncarriable) and "open file" in str(uncarriable)
    assert api.runs(home=home) == []
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


# -- ssh -----------------------------------------------------------------------------------
def test_ssh_dry_run_prints_each_node_and_leaves_the_nodes_alone(pair, home, tmp_path):
    workdir = tmp_path / "remote"
    shown = api.submit(TRAIN, namespace={"lr": 0.1}, target="pair", nodes=2, procs=2, dry_run=True)
    assert (shown.kind, len(shown.nodes)) == ("ssh", 2)
    for index, node in enumerate(shown.nodes):
        run_dir = f"{workdir}/runs/cell-dry-run"
        assert node["host"] == ALIASES[index] and node["run_dir"] == run_dir
        argv = node["argv"]
        assert argv[1:3] == ["-m", "torch.distributed.run"] and "--nnodes=2" in argv
        assert f"--node-rank={index}" in argv
        assert node["env"]["JT_NODE_RANK"] == str(index)
        assert node["env"]["GLOO_SOCKET_IFNAME"] == "lo"
        assert f"# node {index}: {ALIASES[index]}" in shown.text
        assert shlex.join(argv) in shown.text.splitlines()
    rendezvous = {a for n in shown.nodes for a in n["argv"] if a.startswith("--rdzv-endpoint=")}
    assert len(rendezvous) == 1  # node 0's address and the port its pre-flight found free
    assert not workdir.exists()  # no agent installed, no folder made, no snapshot sent
    assert_nothing_created(home, shown)

    mpi = api.submit(
        TRAIN, namespace={"lr": 0.1}, target="pair", nodes=2, launcher="mpirun", dry_run=True
    )
    assert mpi.nodes[1]["argv"] is None and "-H" in mpi.nodes[0]["argv"]
    assert "# file " in mpi.text and "ssh_config" in mpi.text
    assert not workdir.exists()

    with pytest.raises(TargetError, match="cannot import no_module_on_the_nodes"):
        api.submit("import no_module_on_the_nodes", target="pair", nodes=2, dry_run=True)
    assert not workdir.exists() and api.runs(home=home) == []


# -- slurm ---------------------------------------------------------------------------------
def test_slurm_dry_run_prints_the_script_and_submits_nothing(cluster, home):
    before = cluster.queue()
    shown = api.submit(
        TRAIN,
        namespace={"lr": 0.1},
        target="cluster",
        procs=2,
        params=[f"tag={HOSTILE}"],
        dry_run=True,
    )
    assert shown.kind == "slurm" and shown.argv[0] == "sbatch"
    assert "--partition=debug" in shown.argv and "--time=10:00" in shown.argv
    assert shown.argv[-1] == f"{shown.run_dir}/job.sbatch"
    assert shlex.join(shown.argv) in shown.text.splitlines()
    assert shown.script is not None and shown.script.startswith("#!/bin/bash")
    assert shown.text.endswith(shown.script)
    assert "exec " in shown.script and "torch.distributed.run" in shown.script
    assert "sbatch --test-only: " in shown.header
    assert cluster.queue() == before == []
    assert_nothing_created(home, shown)

    (home / "targets.toml").write_text(
        '[targets.nowhere]\nkind = "slurm"\npartition = "no-such-partition"\n'
    )
    with pytest.raises(TargetError, match="sbatch --test-only refused the job"):
        api.submit(TRAIN, namespace={"lr": 0.1}, target="nowhere", dry_run=True)
    assert cluster.queue() == [] and api.runs(home=home) == []


# -- ray -----------------------------------------------------------------------------------
def test_ray_dry_run_prints_each_node_and_reserves_nothing(rc, home, tmp_path):
    shown = api.submit(TRAIN, namespace={"lr": 0.1}, target="rc", nodes=2, procs=1, dry_run=True)
    assert (shown.kind, len(shown.nodes)) == ("ray", 2)
    assert len({node["host"] for node in shown.nodes}) == 2
    for index, node in enumerate(shown.nodes):
        assert node["run_dir"].startswith(str(tmp_path / "nodes"))
        assert node["run_dir"].endswith("/runs/cell-dry-run")
        assert f"--node-rank={index}" in node["argv"] and "--nnodes=2" in node["argv"]
        assert node["env"]["JT_TEST_VAR"] == TARGET_VALUE
        assert f"export JT_TEST_VAR={shlex.quote(TARGET_VALUE)}" in shown.text.splitlines()
    assert "Ray places the run's bundles when it starts" in shown.header
    assert not (tmp_path / "nodes").exists()  # no actor, agent or folder on the nodes
    assert_nothing_created(home, shown)


def test_slurm_dry_run_through_a_login_node_leaves_the_cluster_folder_alone(login, home, tmp_path):
    shown = api.submit(TRAIN, namespace={"lr": 0.1}, target="hpc", procs=2, dry_run=True)
    remote = f"{tmp_path / 'shared'}/runs/cell-dry-run"
    assert shown.run_dir == remote and f"--chdir={remote}" in shown.argv
    assert "sbatch --test-only: " in shown.header  # asked on the login node, over ssh
    assert f"{remote}/code/_jt/boot.py" in shown.script
    assert not (tmp_path / "shared").exists()
    assert login.queue() == []
    assert_nothing_created(home, shown)


# -- environments --------------------------------------------------------------------------
def test_a_named_environment_is_shown_unbuilt_then_checked_once_built(home):
    from jupyter_trainer import environment

    environment.define(
        environment.from_line("dryenv", pip=["six==1.16.0"], inherit=True), home=home
    )
    venvs = home / "environments" / "venvs"
    code = "import six\nprint(six.__version__)\n"
    shown = api.submit(code, env="dryenv", launcher="python", dry_run=True)
    python = shown.argv[0]
    assert python.startswith(f"{venvs}/") and not Path(python).exists()
    assert "environment 'dryenv' is not built yet" in shown.header
    assert not venvs.exists() or not any(p.name[0] != "." for p in venvs.iterdir())
    assert_nothing_created(home, shown)

    real = api.submit(code, env="dryenv", launcher="python", wait=True)
    assert real.state["launcher"]["argv"][0] == python  # the interpreter the dry run named
    again = api.submit(code, env="dryenv", launcher="python", dry_run=True)
    assert again.argv[0] == python and "not built yet" not in again.header
    with pytest.raises(EnvError, match="not_in_dryenv"):
        api.submit("import not_in_dryenv\n", env="dryenv", dry_run=True)
