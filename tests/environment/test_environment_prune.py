"""Pruning built environments with real uv builds: what a name's latest version or an
unfinished run uses stays, the rest goes, and a removed one is built again when needed."""

from __future__ import annotations

import fcntl
from pathlib import Path

from conftest import leftover, wait_for
from support.jt_cli import cli

from jupyter_trainer import environment
from jupyter_trainer.api import runs as api
from jupyter_trainer.environment.definition import EnvDefinition
from jupyter_trainer.environment.stages import venvs_dir


def define_and_build(home: Path, name: str, body: str) -> dict:
    environment.define(EnvDefinition.from_yaml(name, body), home=home, build=True)
    return environment.build_environment(name, home=home)


def rows_by_id(rows: list[dict]) -> dict[str, dict]:
    return {row["env_id"]: row for row in rows}


def test_prune_keeps_latest_versions_and_unfinished_runs(home, tmp_path):
    a1 = define_and_build(home, "alpha", "inherit: true\npip: [six==1.16.0]")
    a1_version = environment.Registry(home).get("alpha").version
    a2 = define_and_build(home, "alpha", "inherit: true\npip: [six==1.16.0, tomli==2.0.1]")
    b1 = define_and_build(home, "beta", "inherit: true\npip: [idna]")
    environment.define(
        EnvDefinition.from_yaml("beta", "inherit: true\npip: [idna, tomli==2.0.1]"), home=home
    )  # the latest beta is defined, not built
    assert len({a1["env_id"], a2["env_id"], b1["env_id"]}) == 3

    planned = rows_by_id(api.prune_environments(dry_run=True, home=home))
    assert planned[a2["env_id"]] == {
        **planned[a2["env_id"]],
        "removed": False,
        "why": "the latest version of alpha",
    }
    assert planned[a1["env_id"]]["removed"] and planned[b1["env_id"]]["removed"]
    assert all(Path(r["path"]).is_dir() for r in planned.values()), "a dry run removed something"
    text = environment.prune_text(list(planned.values()), dry_run=True)
    assert f"would remove {a1['env_id']} (alpha@{a1_version}, " in text
    assert "would remove 2 built environments" in text

    gate = tmp_path / "go"
    run = api.submit(
        f"import pathlib, time\nwhile not pathlib.Path({str(gate)!r}).exists(): "
        "time.sleep(0.05)\nimport six\nprint('six', six.__version__)",
        env=f"alpha@{a1_version}",
        name="holds-alpha-v1",
        home=home,
    )
    wait_for(lambda: run.status == "running", 60, what="the run to start")
    pruned = rows_by_id(api.prune_environments(home=home))
    assert pruned[a1["env_id"]]["why"] == f"used by run {run.id} (running)"
    assert not pruned[a1["env_id"]]["removed"] and Path(a1["path"]).is_dir()
    assert pruned[b1["env_id"]]["removed"] and not Path(b1["path"]).exists()
    assert Path(a2["path"]).is_dir()

    gate.touch()
    run.wait(timeout=60)
    assert "six 1.16.0" in run.logs(0)
    wait_for(lambda: leftover(run.id) == [], 15, what="the run's processes to end")
    assert rows_by_id(api.prune_environments(home=home))[a1["env_id"]]["removed"]
    assert sorted(p.name for p in venvs_dir(home).iterdir() if not p.name.startswith(".")) == [
        a2["env_id"]
    ]

    again = environment.build_environment(f"alpha@{a1_version}", home=home)  # from uv's cache
    assert again["built"] and again["env_id"] == a1["env_id"]


def test_an_environment_being_built_is_not_removed(home):
    built = define_and_build(home, "gamma", "inherit: true\npip: [six==1.16.0]")
    environment.define(EnvDefinition.from_yaml("gamma", "inherit: true\npip: [idna]"), home=home)
    with open(venvs_dir(home) / f".{built['env_id']}.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # what a build of the same id holds
        row = rows_by_id(api.prune_environments(home=home))[built["env_id"]]
    assert row["removed"] is False and row["why"] == "being built"
    assert Path(built["python"]).exists()
    assert rows_by_id(api.prune_environments(home=home))[built["env_id"]]["removed"]


def test_prune_from_the_cli_and_the_magic(home, ip, capsys):
    stale = define_and_build(home, "delta", "inherit: true\npip: [six==1.16.0]")
    environment.define(EnvDefinition.from_yaml("delta", "inherit: true\npip: [idna]"), home=home)

    out = cli("env", "prune", "--dry-run", timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"would remove {stale['env_id']} (" in out.stdout and Path(stale["path"]).is_dir()
    for bad, message in (
        (["show", "delta", "--dry-run"], "--dry-run goes with `env prune`"),
        (["prune", "delta"], "prune takes no NAME"),
    ):
        out = cli("env", *bad, timeout=60)
        assert out.returncode == 2 and message in out.stderr
    assert Path(stale["path"]).is_dir()

    result = ip.run_cell("%environment prune", store_history=True)
    assert result.success, result.error_in_exec
    printed = capsys.readouterr().out
    assert f"removed {stale['env_id']} (" in printed and "removed 1 built environment," in printed
    assert not Path(stale["path"]).exists()
    ip.run_cell("%environment prune", store_history=True)
    assert "nothing to remove" in capsys.readouterr().out
