"""Diff of two runs: params, launch, environment, code and metrics, from the API, the CLI and
%train (with the overlaid charts), over real runs on the local target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output
from support.jt_cli import cli

import jupyter_trainer as jt
from jupyter_trainer import environment
from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import InvalidRunId, RunNotFound
from jupyter_trainer.environment.definition import EnvDefinition
from jupyter_trainer.frontends.views.charts import metric_figures
from jupyter_trainer.store.follow import RunFollower

CELL = """\
from jupyter_trainer import runtime as jt
scale = 2
for step in range(4):
    jt.log(step=step, loss=lr * scale / (step + 1))
"""

TRAIN = """\
import math
from jupyter_trainer import runtime as jt
from helper import values
for step, (loss, acc) in enumerate(values()):
    jt.log(step=step, loss=loss, **({"acc": acc} if acc is not None else {}))
"""


def source(folder: Path, files: dict[str, str | bytes]) -> Path:
    folder.mkdir()
    for name, data in files.items():
        path = folder / name
        path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data)
    return folder


def test_secret_params_are_compared_by_their_values_and_never_shown(ip, home):
    a = api.submit(CELL, params={"lr": 0.1, "api_key": "sk-first-0123456789"}, wait=True)
    b = api.submit(CELL, params={"lr": 0.1, "api_key": "sk-second-0123456789"}, wait=True)
    c = api.submit(CELL, params={"lr": 0.1, "api_key": "sk-first-0123456789"}, wait=True)
    found = jt.diff(a.id, b.id)
    assert found.params == {"added": {}, "removed": {}, "changed": {"api_key": ["***", "***"]}}
    assert 'api_key: "***" → "***" (secret values that differ)' in found.text()
    assert "sk-" not in found.text() and "sk-" not in json.dumps(found.to_dict())
    assert jt.diff(a.id, c.id).params == {"added": {}, "removed": {}, "changed": {}}


def test_diff_shows_exactly_the_changed_param_and_line(ip, home):
    a = api.submit(CELL, params={"lr": 0.1}, wait=True)
    b = api.submit(CELL.replace("scale = 2", "scale = 3"), params={"lr": 0.2}, wait=True)
    found = jt.diff(a.id, b.id)
    assert found.params == {"added": {}, "removed": {}, "changed": {"lr": [0.1, 0.2]}}
    assert found.code["changed"] == ["_jt/cell.py"]
    assert (found.code["added"], found.code["removed"], found.code["binary"]) == ([], [], [])
    changes = [
        line
        for line in found.code["diff"].splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changes == ["-scale = 2", "+scale = 3"]
    assert found.launch == {} and found.environment["a"] == found.environment["b"]
    loss_a, loss_b = a.metrics()["loss"], b.metrics()["loss"]
    assert found.metrics == {
        "loss": {
            "a": {"final": loss_a[-1][1], "min": loss_a[-1][1], "max": loss_a[0][1]},
            "b": {"final": loss_b[-1][1], "min": loss_b[-1][1], "max": loss_b[0][1]},
        }
    }
    text = found.text()
    assert text.splitlines()[:4] == [f"A = {a.id}", f"B = {b.id}", "params:", "  lr: 0.1 → 0.2"]
    assert "launch and target: same\nenvironment: same (the kernel's own Python" in text
    assert "no lock" in text and "  -scale = 2\n  +scale = 3" in text
    assert "A final" in text and "B final" in text and "0.15" in text  # B's final, 0.2*3/4

    shown = cli("diff", a.id, b.id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == json.loads(json.dumps(found.to_dict()))
    assert cli("diff", a.id, b.id).stdout.strip() == text

    same = jt.diff(a.id, a.id)
    assert same.same and not found.same
    assert same.text().splitlines()[2:] == [
        "params: same",
        "launch and target: same",
        f"environment: same ({found.environment['a']})",
        "code: same",
        "metrics (rank 0): same (final, min and max of every metric)",
    ]

    with capture_output() as shown_in_notebook:
        assert ip.run_line_magic("train", f"diff {a.id} {b.id}") is None
    assert shown_in_notebook.stdout.strip() == text
    images = [o.data["image/png"] for o in shown_in_notebook.outputs if "image/png" in o.data]
    assert len(images) == 1
    figure = found.chart_figure()
    assert [ax.get_title() for ax in figure.axes] == ["loss"]
    assert [t.get_text() for t in figure.axes[0].get_legend().get_texts()] == [a.id, b.id]
    assert [list(line.get_ydata()) for line in figure.axes[0].get_lines()] == [
        [v for _, v in loss_a],
        [v for _, v in loss_b],
    ]
    # steps are whole numbers: the x axis is ticked at whole steps only, never 0.25
    ticks = figure.axes[0].get_xticks()
    assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks
    # and so are the charts a papermill notebook keeps of a run
    follower = RunFollower(a.store, a.id)
    follower.poll()
    [chart] = metric_figures(follower).values()
    ticks = chart.axes[0].get_xticks()
    assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks


def test_diff_of_files_launch_and_non_finite_metrics(home, tmp_path):
    helper_a = (
        "def values():\n"
        "    return [(2.0, None), (float('nan'), None), (float('inf'), None), (0.5, None)]\n"
    )
    helper_b = "def values():\n    return [(3.0, 0.1), (1.0, 0.5), (0.25, 0.9)]\n"
    src_a = source(
        tmp_path / "a",
        {
            "train.py": TRAIN,
            "helper.py": helper_a,
            "weights.bin": b"\x00\x01\x02",
            "old.txt": "gone\n",
        },
    )
    src_b = source(
        tmp_path / "b",
        {
            "train.py": TRAIN,
            "helper.py": helper_b,
            "weights.bin": b"\x00\x01\x03",
            "new.txt": "new\n",
        },
    )
    a = api.submit(
        script=src_a / "train.py",
        source=src_a,
        launcher="python",
        params={"lr": 0.1, "note": "x"},
        wait=True,
    )
    b = api.submit(
        script=src_b / "train.py",
        source=src_b,
        args=["--fast"],
        procs=1,
        params={"lr": 0.1, "extra": [1, 2]},
        max_restarts=2,
        wait=True,
    )
    found = jt.diff(a.id, b.id)
    assert found.params == {"added": {"extra": [1, 2]}, "removed": {"note": "x"}, "changed": {}}
    assert found.launch == {"launcher": ["python", "torchrun"], "max_restarts": [0, 2]}
    assert found.code["settings"] == {"args": [[], ["--fast"]]}
    assert (found.code["added"], found.code["removed"]) == (["new.txt"], ["old.txt"])
    assert found.code["changed"] == ["helper.py", "weights.bin"]
    assert found.code["binary"] == ["weights.bin"] and "weights.bin" not in found.code["diff"]
    assert found.environment["note"] == (
        "both run on the kernel's own Python: no lock, packages not recorded"
    )
    assert found.metrics["loss"]["a"] == {"final": 0.5, "min": 0.5, "max": 2.0}
    assert found.metrics["acc"] == {"a": None, "b": {"final": 0.9, "min": 0.1, "max": 0.9}}
    text = found.text()
    for line in (
        "  extra: only in B ([1, 2])",
        '  note: only in A ("x")',
        '  launcher: "python" → "torchrun"',
        "  max_restarts: 0 → 2",
        '  args: [] → ["--fast"]',
        "  only in B: new.txt",
        "  only in A: old.txt",
        "  changed (binary): weights.bin",
        "+++ B/helper.py",
    ):
        assert line in text, line
    acc_row = next(line for line in text.splitlines() if line.startswith("  acc "))
    assert acc_row.split()[1:] == ["-", "-", "-", "0.9", "0.1", "0.9"]
    data = json.loads(cli("diff", a.id, b.id, "--json").stdout)  # valid JSON: no bare NaN
    assert data["metrics"]["loss"]["a"] == {"final": 0.5, "min": 0.5, "max": 2.0}
    assert data["same"] is False

    nan_last = source(
        tmp_path / "c",
        {"train.py": TRAIN, "helper.py": helper_a.replace("(0.5, None)]", "(float('nan'), None)]")},
    )
    c = api.submit(script=nan_last / "train.py", source=nan_last, launcher="python", wait=True)
    row = jt.diff(a.id, c.id).to_dict()["metrics"]["loss"]["b"]
    assert row == {"final": "nan", "min": 2.0, "max": 2.0}
    assert jt.diff(a.id, c.id).chart_png().startswith(b"\x89PNG")


def test_diff_of_environment_locks(home):
    environment.define(EnvDefinition.from_yaml("pinned", "inherit: true\npip:\n  - six==1.16.0\n"))
    a = api.submit("print(1)", env="pinned", launcher="python", wait=True)
    environment.define(
        EnvDefinition.from_yaml(
            "pinned", "inherit: true\npip:\n  - six==1.16.0\n  - tomli==2.0.1\n"
        )
    )
    b = api.submit("print(1)", env="pinned", launcher="python", wait=True)
    kernel = api.submit("print(1)", launcher="python", wait=True)
    found = jt.diff(a.id, b.id)
    assert found.environment["packages"] == {
        "added": {"tomli": "2.0.1"},
        "removed": {},
        "changed": {},
    }
    text = found.text()
    assert f"  A: environment pinned@{a.spec.env.version} (lock {a.spec.env.lock})" in text
    assert "  tomli: only in B (2.0.1)" in text
    assert "code: same" in text and "params: same" in text
    mixed = jt.diff(a.id, kernel.id)
    assert mixed.environment["packages"] is None
    assert "run B runs on the kernel's own Python and has no lock" in mixed.text()


def test_diff_of_unknown_runs_is_refused(home):
    a = api.submit("print(1)", launcher="python", wait=True)
    with pytest.raises(InvalidRunId):
        jt.diff(a.id, "../x")
    with pytest.raises(RunNotFound, match="no run 'gone-20260101-000000-000000'"):
        jt.diff("gone-20260101-000000-000000", a.id)
    done = cli("diff", a.id, "../../etc/passwd")
    assert done.returncode == 2 and "invalid run id" in done.stderr
