"""``azureml check`` on files it cannot read as code: each is one clear finding of its own,
and the check of a folder goes on with the other files."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from support.jt_cli import cli

GOOD = "from azureml.core import Workspace\nws = Workspace.from_config()\n"
BAD = {
    "deep-parse.py": "x = " + "1+" * 200_000 + "1\n",  # deeper than the parser goes
    "deep-unary.py": "x = " + "-" * 200_000 + "1\n",
    "deep-visit.py": GOOD + "x = " + "1+" * 2_000 + "1\n",  # parses; deeper than a walk
    "nul.py": "x = 1\0\n",
    "list.ipynb": "[]",
    "cells.ipynb": json.dumps({"cells": ["x", 1]}),
    "source.ipynb": json.dumps({"cells": [{"cell_type": "code", "source": [1, 2]}]}),
    "nul.ipynb": json.dumps({"cells": [{"cell_type": "code", "source": "x = 1\0"}]}),
}


def check(path, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return cli("azureml", "check", str(path), *extra, timeout=timeout)


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "a-good.py").write_text(GOOD)
    for name, text in BAD.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "z-good.ipynb").write_text(
        json.dumps({"cells": [{"cell_type": "code", "source": GOOD.splitlines(True)}]})
    )
    os.mkfifo(tmp_path / "pipe.py")
    return tmp_path


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_file_that_is_not_code_is_a_finding_not_a_traceback(folder, name):
    done = check(folder / name, "--json")
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, (done.stdout, done.stderr)
    findings = json.loads(done.stdout)["findings"]
    assert any(f["verdict"] == "refused" and name in f["path"] for f in findings), findings


def test_a_folder_check_goes_on_past_the_files_it_cannot_read(folder):
    done = check(folder, "--json")
    assert "Traceback" not in done.stderr, done.stderr
    findings = json.loads(done.stdout)["findings"]
    seen = {f["path"].split(" ")[0] for f in findings}
    assert {"a-good.py", "z-good.ipynb", *BAD} <= seen, findings
    works = {f["path"].split(" ")[0] for f in findings if f["verdict"] == "works"}
    assert {"a-good.py", "z-good.ipynb", "deep-visit.py"} <= works, findings
    text = check(folder)
    assert "Traceback" not in text.stderr and "cannot be read" in text.stdout, text.stdout


def test_a_fifo_given_alone_is_refused_at_once(folder):
    done = check(folder / "pipe.py", timeout=30)
    assert "Traceback" not in done.stderr, done.stderr
    assert "not a regular file" in done.stdout, (done.stdout, done.stderr)
