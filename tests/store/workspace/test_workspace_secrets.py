"""A run's secret params and environment variables: recorded redacted in ``spec.json`` (and so
in ``show``, ``diff`` and everything that reads it), kept in the run's owner-only
``secrets.json``, and given to the ranks at launch. In a shared workspace, a colleague can
read none of them from any file, and a rerun by him asks for them again."""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
from pathlib import Path

import pytest
from conftest import wait_for
from support.jt_cli import cli
from support.slurm_cluster import target
from support.workspace_team import PYTHON, state_at_end

from jupyter_trainer import environment
from jupyter_trainer.api import runs as api
from jupyter_trainer.environment.definition import EnvDefinition

TOKEN = "hf_" + "Q7w2E9r4T1y6U3i8O5p0" * 2
DB_PASSWORD = "pa/ss-S3CRET-db"
DATABASE_URL = f"postgresql+psycopg://trainer:{DB_PASSWORD}@db.example.org:5432/team"
CELL = (
    "import hashlib, os\n"
    "from jupyter_trainer import runtime as jt\n"
    "def sha(text):\n"
    "    return hashlib.sha256(text.encode()).hexdigest()\n"
    "print('cell', sha(hf_token), lr, max_tokens)\n"
    "print('params', sha(jt.params['hf_token']))\n"
    "print('env', sha(os.environ['DATABASE_URL']))\n"
)
SCRIPT = (
    "import hashlib\n"
    "from jupyter_trainer import runtime as jt\n"
    "print('params', hashlib.sha256(jt.params['hf_token'].encode()).hexdigest())\n"
)


PYTHON_CLI = (PYTHON, "-m", "jupyter_trainer")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def files_holding(root: Path, *needles: str) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and any(n.encode() in p.read_bytes() for n in needles)
    )


@pytest.mark.parametrize("launcher", ["python", "torchrun"])  # torchrun: a hot pool's fork
def test_a_cells_secrets_reach_the_ranks_and_no_record(home, launcher):
    environment.define(
        EnvDefinition.from_yaml(
            "with-db", f"inherit: true\nenv:\n  DATABASE_URL: '{DATABASE_URL}'\n  OMP: '1'\n"
        ),
        home=home,
    )
    namespace = {"hf_token": TOKEN, "lr": 0.25, "max_tokens": 512}
    run = api.submit(CELL, launcher=launcher, env="with-db", namespace=namespace, wait=True)
    log = run.logs(0)
    assert run.status == "completed", log
    assert f"cell {sha(TOKEN)} 0.25 512" in log  # the cell's own variable is the real one
    assert f"params {sha(TOKEN)}" in log and f"env {sha(DATABASE_URL)}" in log

    folder = home / "runs" / run.id
    spec = json.loads((folder / "spec.json").read_text())
    assert spec["params"] == {"hf_token": "***", "lr": 0.25, "max_tokens": 512}
    assert spec["env"]["variables"] == {
        "DATABASE_URL": "postgresql+psycopg://trainer:***@db.example.org:5432/team",
        "OMP": "1",
    }
    kept = folder / "secrets.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert files_holding(home / "runs", TOKEN, DB_PASSWORD) == [f"{run.id}/secrets.json"]

    again = api.rerun(run.id, wait=True)  # the owner's rerun gets the real values again
    assert f"params {sha(TOKEN)}" in again.logs(0) and f"env {sha(DATABASE_URL)}" in again.logs(0)
    shown = cli("show", run.id, "--json")
    diff = cli("diff", run.id, again.id)
    dry = cli("rerun", run.id, "--dry-run")
    for said in (shown, diff, dry):
        assert TOKEN not in said.stdout + said.stderr
        assert DB_PASSWORD not in said.stdout + said.stderr
    assert shown.returncode == 0 and '"hf_token": "***"' in shown.stdout, shown.stderr
    assert files_holding(home / "runs", TOKEN, DB_PASSWORD) == sorted(
        f"{r}/secrets.json" for r in (run.id, again.id)
    )


ARGS_SCRIPT = (
    "import hashlib, sys\n"
    "def sha(text):\n"
    "    return hashlib.sha256(text.encode()).hexdigest()\n"
    "command_line = open('/proc/self/cmdline', 'rb').read().decode()\n"
    "print('args', [sha(a) for a in sys.argv[1:]])\n"
    "print('command line clean', all(a not in command_line for a in sys.argv[1:] if 'S3CRET' in a "
    "or a.startswith('hf_')))\n"
)


@pytest.mark.parametrize("launcher", ["python", "torchrun"])
def test_a_scripts_secret_arguments_reach_it_and_no_record_nor_command_line(home, launcher):
    script = home.parent / "args_train.py"
    script.write_text(ARGS_SCRIPT)
    args = ["--hf-token", TOKEN, f"--db={DATABASE_URL}", "--lr", "0.1", DATABASE_URL, "--tag=x"]
    run = api.submit(script=str(script), args=args, launcher=launcher, wait=True)
    log = run.logs(0)
    assert run.status == "completed", log
    assert f"args {[sha(a) for a in args]}" in log and "command line clean True" in log, log
    folder = home / "runs" / run.id
    spec = json.loads((folder / "spec.json").read_text())
    assert spec["code"]["args"] == [
        "--hf-token", "${{secret.1}}", "--db=${{secret.2}}", "--lr", "0.1", "${{secret.5}}",
        "--tag=x",
    ]  # fmt: skip
    assert files_holding(home / "runs", TOKEN, DB_PASSWORD) == [f"{run.id}/secrets.json"]
    again = api.rerun(run.id, wait=True)  # the owner's rerun gets the real values again
    assert f"args {[sha(a) for a in args]}" in again.logs(0)
    shown = cli("show", run.id)
    assert shown.returncode == 0 and TOKEN not in shown.stdout and DB_PASSWORD not in shown.stdout


def test_a_colleague_reads_no_secret_of_a_run_and_must_give_them_to_rerun_it(team):
    alice, bob = team.users
    script = team.root / alice / "train.py"
    script.write_text(SCRIPT)
    shutil.chown(script, alice)
    run_id = team.cli(
        alice, "submit", str(script), "--launcher", "python", "-p", f"hf_token={TOKEN}", "-p",
        "lr=0.1",
    ).stdout.strip()  # fmt: skip
    ended = state_at_end(team, run_id)
    log = (team.workspace / "runs" / run_id / "logs" / "rank-0.log").read_text()
    assert ended["status"] == "completed" and f"params {sha(TOKEN)}" in log, (ended, log)

    found = team.run(bob, "grep", "-rlsF", TOKEN, str(team.workspace), check=False)
    assert found.stdout == "", found.stdout  # in no file he can read
    hers = team.run(alice, "grep", "-rlsF", TOKEN, str(team.workspace), check=False)
    assert hers.stdout.split() == [str(team.workspace / "runs" / run_id / "secrets.json")]
    readable = team.run(bob, "find", str(team.workspace), "-type", "f", "-readable")
    assert f"runs/{run_id}/spec.json" in readable.stdout  # he does read the records
    assert f"runs/{run_id}/secrets.json" not in readable.stdout
    shown = team.cli(bob, "show", run_id, "--json")
    assert TOKEN not in shown.stdout and '"hf_token": "***"' in shown.stdout

    refused = team.cli(bob, "rerun", run_id, check=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "secret params hf_token" in refused.stderr
    assert "--param hf_token=VALUE" in refused.stderr, refused.stderr
    own = team.cli(bob, "rerun", run_id, "-p", "hf_token=bobs-own-token").stdout.strip()
    assert "bobs" not in own
    again = team.cli(alice, "rerun", run_id).stdout.strip()
    for new, token in ((own.split()[-1], "bobs-own-token"), (again.split()[-1], TOKEN)):
        assert state_at_end(team, new)["status"] == "completed"
        log = team.workspace / "runs" / new / "logs" / "rank-0.log"
        wait_for(lambda log=log: log.exists(), 30, what="the rank's log")
        assert f"params {sha(token)}" in log.read_text()
    found = team.run(bob, "grep", "-rlsF", TOKEN, str(team.workspace), check=False)
    assert found.stdout == "", found.stdout
    args_script = team.root / alice / "args_train.py"
    team.write(alice, args_script, ARGS_SCRIPT, 0o644)
    with_args = team.cli(
        alice, "submit", str(args_script), "--launcher", "python", "--", "--hf-token", TOKEN
    ).stdout.strip()
    assert state_at_end(team, with_args)["status"] == "completed"
    refused = team.cli(bob, "rerun", with_args, check=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "its secret script arguments (number 1)" in refused.stderr, refused.stderr
    found = team.run(bob, "grep", "-rlsF", TOKEN, str(team.workspace), check=False)
    assert found.stdout == "", found.stdout
    # diff compares the secrets it can read, and says which it cannot
    assert "params: same" in team.cli(alice, "diff", run_id, again.split()[-1]).stdout
    for user in (alice, bob):
        shown = team.cli(user, "diff", run_id, own.split()[-1]).stdout
        assert 'hf_token: "***" and "***": secret, and not compared' in shown, shown
        assert TOKEN not in shown and "bobs-own-token" not in shown


def test_a_sweep_keeps_no_database_password_and_its_trials_get_their_secrets(
    home, pg_url, monkeypatch, tmp_path
):
    import jupyter_trainer as jt
    from jupyter_trainer.store.sweeps import SweepStore

    password = "pw-S3CRET-sweep"
    with_password = pg_url.replace("://jt@", f"://jt:{password}@")  # the server trusts it
    assert with_password != pg_url
    monkeypatch.setenv("JUPYTER_TRAINER_INDEX", with_password)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT + "jt.log(step=0, score=jt.params['x'])\n")
    sweep = jt.sweep(
        script=script,
        space={"x": "choice(0.1, 0.3)"},
        params={"hf_token": TOKEN},
        metric="score",
        trials=2,
        sampler="grid",
        launcher="python",
    )
    sweep.wait(timeout=120)
    assert sweep.status == "completed"
    folder = SweepStore(home).paths(sweep.id).root
    state = json.loads((folder / "state.json").read_text())
    assert state["storage"].startswith("postgresql+psycopg://jt:***@127.0.0.1:")
    assert password in sweep.storage  # what optuna.load_study needs, asked for by its owner
    shown = cli("sweep", "show", sweep.id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["storage"] == state["storage"]
    trials = [t["run"] for t in state["trials"]]
    for run_id in trials:
        log = (home / "runs" / run_id / "logs" / "rank-0.log").read_text()
        assert f"params {sha(TOKEN)}" in log, log
    assert files_holding(home, TOKEN, password) == sorted(
        [f"sweeps/{sweep.id}/template/secrets.json"] + [f"runs/{r}/secrets.json" for r in trials]
    )


def test_an_ssh_nodes_ranks_get_the_secrets_in_an_owner_only_file(pair, home, tmp_path):
    code = CELL.replace("print('env', sha(os.environ['DATABASE_URL']))\n", "")
    namespace = {"hf_token": TOKEN, "lr": 0.5, "max_tokens": 8}
    run = api.submit(
        code, target="pair", nodes=2, procs=1, launcher="torchrun", hot=False, namespace=namespace
    )
    run.wait(timeout=180)
    for rank in range(2):
        assert f"params {sha(TOKEN)}" in run.logs(rank), run.logs(rank)
    remote = tmp_path / "remote" / "runs" / run.id
    kept = remote / "secrets.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert TOKEN not in (remote / "spec.json").read_text()


def test_a_frameworks_config_becomes_tags_without_its_secrets(home):
    code = (  # the secrets are made when the code runs: the code itself does not hold them
        "from argparse import Namespace\n"
        "from jupyter_trainer.rankside.frameworks import autolog\n"
        f"token = {TOKEN[:6]!r} + {TOKEN[6:]!r}\n"
        f"password = {DB_PASSWORD[:6]!r} + {DB_PASSWORD[6:]!r}\n"
        "autolog.tag_params('accelerate', {'hf_token': token, 'lr': 0.1})\n"
        "autolog.tag_params('lightning', {'cfg': Namespace(db={'password': password})})\n"
    )
    run = api.submit(code, launcher="python", wait=True)
    assert run.tags["accelerate.hf_token"] == "***" and run.tags["accelerate.lr"] == "0.1"
    assert DB_PASSWORD not in json.dumps(run.tags)
    assert files_holding(home / "runs", TOKEN, DB_PASSWORD) == []


def test_a_slurm_clusters_copy_of_the_run_folder_gets_the_secrets_owner_only(
    cluster, home, tmp_path
):
    shared = tmp_path / "shared"
    target(home, "apart", workdir=str(shared))  # run folders on the cluster, apart from home
    code = CELL.replace("print('env', sha(os.environ['DATABASE_URL']))\n", "")
    namespace = {"hf_token": TOKEN, "lr": 0.5, "max_tokens": 8}
    run = api.submit(code, target="apart", launcher="python", namespace=namespace)
    run.wait(timeout=120)
    assert f"params {sha(TOKEN)}" in run.logs(0), run.logs(0)
    remote = shared / "runs" / run.id
    assert stat.S_IMODE((remote / "secrets.json").stat().st_mode) == 0o600
    assert files_holding(shared, TOKEN) == [f"runs/{run.id}/secrets.json"]


def test_a_personal_runs_secrets_stay_its_owners_when_imported_into_the_workspace(team):
    alice, bob = team.users
    script = team.root / alice / "train.py"
    script.write_text(SCRIPT)
    shutil.chown(script, alice)
    personal = team.root / alice / ".jupyter_trainer"
    run_id = team.run(
        alice, *PYTHON_CLI, "submit", str(script), "--launcher", "python", "-p",
        f"hf_token={TOKEN}", "--wait", workspace=False,
    ).stdout.split()[0]  # fmt: skip
    assert (personal / "runs" / run_id / "secrets.json").exists()
    team.cli(alice, "workspace", "import", str(personal))
    kept = team.workspace / "runs" / run_id / "secrets.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    found = team.run(bob, "grep", "-rlsF", TOKEN, str(team.workspace), check=False)
    assert found.stdout == "", found.stdout


def test_a_train_cells_secrets_and_its_environments_reach_the_ranks_and_no_record(ip, home):
    from jupyter_trainer.store import Store

    ip.run_line_magic("environment", f"magic-db --inherit --var DATABASE_URL={DATABASE_URL}")
    ip.user_ns.update(hf_token=TOKEN, lr=0.25, max_tokens=512)
    done = ip.run_cell(f"%%train --launcher python --env magic-db\n{CELL}")
    assert done.success, done.error_in_exec
    [row] = Store(home).list_runs()
    folder = home / "runs" / row["id"]
    log = (folder / "logs" / "rank-0.log").read_text()
    assert f"cell {sha(TOKEN)} 0.25 512" in log and f"env {sha(DATABASE_URL)}" in log, log
    assert files_holding(folder, TOKEN, DB_PASSWORD) == ["secrets.json"]
    assert json.loads((folder / "spec.json").read_text())["secrets"] == [
        "params.hf_token",
        "variables.DATABASE_URL",
    ]
