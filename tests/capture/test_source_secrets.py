"""Secrets by name stay out of ``--source`` snapshots, and every submit says what it took and
what it left out: in the snapshot's spec, the magic's output, the CLI and the run monitor."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import leftover
from support.browser_page import browser  # noqa: F401 (the fixture)
from support.jt_cli import CLI, cli

from jupyter_trainer.api import runs as api
from jupyter_trainer.capture import resolve_cell, source_summary, write_cell_snapshot
from jupyter_trainer.frontends.views.feed import RunFeed

SECRETS = [
    "creds.json",
    "secrets.yaml",
    "token.txt",
    "gcp-service-account.json",
    "kubeconfig",
    ".npmrc",
    ".htpasswd",
    "db_credentials.ini",
    "my-service_account.json",
    "store.p12",
    "cert.pfx",
    "release.keystore",
    "sub/api_token",
    "sub/.docker/config.json",
    "cluster.kubeconfig",
    ".env",
    "deploy.pem",
    "MY_SECRET.txt",
]
KEPT = [
    "train.py",
    "tokenizer.py",
    "tokenizer.json",
    "tokens/vocab.txt",
    "secrets_util.py",
    "docker/config.json",
    "config.json",
    "sub/notes.md",
]


def make_tree(root: Path, names: list[str]) -> Path:
    for rel in names:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"contents of {rel}\n")
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = make_tree(tmp_path / "project", SECRETS + KEPT + [".kube/config"])
    (root / "train.py").write_text("print('trained')\n")
    return root


def taken(dest: Path) -> set[str]:
    return {
        p.relative_to(dest).as_posix()
        for p in dest.rglob("*")
        if p.is_file() and not p.relative_to(dest).as_posix().startswith("_jt/")
    }


def test_every_secret_name_is_left_out_and_named(project, tmp_path):
    code = write_cell_snapshot(
        tmp_path / "code", "pass", resolve_cell("pass", {}), source_dir=project
    )
    assert taken(tmp_path / "code") == set(KEPT)
    assert set(code.excluded) == set(SECRETS) | {".kube/"}
    assert code.source_files == len(KEPT)
    line = source_summary(code)
    assert line.startswith(
        f"--source {project.resolve()}: took {len(KEPT)} files; left out as secrets by name: "
    )
    assert "\n" not in line and "by name: .env, .htpasswd, .kube/, .npmrc, MY_SECRET.txt, " in line
    assert f"and {len(SECRETS) + 1 - 8} more (spec.json lists them all)" in line
    assert f"add a line '!.env' to {project.resolve() / '.trainignore'}" in line


def test_trainignore_re_includes_a_secret(project, tmp_path):
    (project / ".trainignore").write_text("!creds.json\n!.kube/\n")
    code = write_cell_snapshot(
        tmp_path / "code", "pass", resolve_cell("pass", {}), source_dir=project
    )
    files = taken(tmp_path / "code")
    assert {"creds.json", ".kube/config", ".trainignore"} <= files
    assert (tmp_path / "code" / "creds.json").read_text() == "contents of creds.json\n"
    assert "creds.json" not in code.excluded and ".kube/" not in code.excluded
    assert "token.txt" in code.excluded
    assert "creds.json" not in source_summary(code)


def test_summary_without_secrets_and_without_source(tmp_path):
    src = make_tree(tmp_path / "src", ["a.py", "b.py"])
    code = write_cell_snapshot(tmp_path / "code", "pass", resolve_cell("pass", {}), source_dir=src)
    assert (
        source_summary(code)
        == f"--source {src.resolve()}: took 2 files; no secrets by name left out"
    )
    plain = write_cell_snapshot(tmp_path / "plain", "pass", resolve_cell("pass", {}))
    assert source_summary(plain) is None


def test_the_magic_says_what_it_took_and_left_out(ip, home, project, capsys):
    result = ip.run_cell(
        f"%%train --launcher python --source {project}\nprint(open('train.py').read().strip())\n",
        store_history=True,
    )
    assert result.success, result.error_in_exec
    run = result.result
    assert run.status == "completed" and leftover(run.id) == []
    out = capsys.readouterr().out
    line = source_summary(run.spec.code)
    assert out.count(line) >= 1 and out.index(line) < out.index(f"run {run.id} completed")
    assert f"took {len(KEPT)} files; left out as secrets by name: .env, .htpasswd, " in line
    assert run.logs(0) == "print('trained')\n"
    assert not (run.path / "code" / "creds.json").exists()
    # the notebook widget shows the same line
    assert RunFeed(run).info()["source"] == line


def test_the_cli_says_it_on_submit_and_show(home, project):
    done = subprocess.run(
        [
            *CLI,
            "submit",
            str(project / "train.py"),
            "--launcher",
            "python",
            "--source",
            str(project),
            "--wait",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    run = api.get_run(done.stdout.strip())
    line = source_summary(run.spec.code)
    assert line.startswith(f"--source {project.resolve()}: took {len(KEPT)} files")
    assert done.stderr.splitlines()[0] == line
    shown = cli("show", run.id, timeout=60)
    assert line in shown.stdout.splitlines()
    assert leftover(run.id) == []


def test_the_widget_shows_the_line_in_the_browser(browser, home, project):
    lab, page = browser
    lab.write_notebook(
        "source.ipynb",
        [
            "%load_ext jupyter_trainer",
            f"%%train --launcher python --source '{project}'\nprint('done')\n",
        ],
    )
    page.open("source.ipynb")
    page.run_all()
    page.page.wait_for_function(
        "(document.querySelector('[data-testid=jt-status]') || {}).textContent === 'completed'"
    )
    run = api.runs(home=home)[0]
    line = source_summary(run.spec.code)
    page.page.wait_for_selector("[data-testid=jt-source]:not([hidden])")
    assert page.text("[data-testid=jt-source]") == line
    page.shot("source-line")
    assert leftover(run.id) == []
