"""The JupyterLab extension: its TypeScript unit tests, and the built wheel installed into a
fresh environment without Node.js, as a user gets it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

from conftest import REPO

import jupyter_trainer
from jupyter_trainer.store import Store

LABEXT = REPO / "labextension"
NAME = "jupyter-trainer-labextension"


def test_typescript_data_layer_unit_tests():
    done = subprocess.run(
        ["npm", "test", "--silent"], cwd=LABEXT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    passed = re.search(r"^# pass (\d+)$", done.stdout, re.M)
    failed = re.search(r"^# fail (\d+)$", done.stdout, re.M)
    assert passed and int(passed.group(1)) >= 7 and failed and failed.group(1) == "0"


def test_front_end_and_python_versions_agree():
    package = json.loads((LABEXT / "package.json").read_text())
    assert package["version"] == jupyter_trainer.__version__, (
        "labextension/package.json and jupyter_trainer/core/version.py must give the same version"
    )
    built = REPO / "jupyter_trainer" / "frontends" / "labextension" / "package.json"
    assert json.loads(built.read_text())["version"] == jupyter_trainer.__version__


def test_the_panels_version_is_written_from_package_json(tmp_path):
    # src/version.ts is generated, never committed: a release changes package.json only
    assert "src/version.ts" in (LABEXT / ".gitignore").read_text().splitlines()
    copy = tmp_path / "labextension"
    (copy / "scripts").mkdir(parents=True)
    (copy / "src").mkdir()
    shutil.copy(LABEXT / "scripts" / "write-version.mjs", copy / "scripts")
    (copy / "package.json").write_text(json.dumps({"name": "x", "version": "9.8.7rc1"}))
    subprocess.run(["node", "scripts/write-version.mjs"], cwd=copy, check=True, timeout=60)
    assert 'export const VERSION = "9.8.7rc1";' in (copy / "src" / "version.ts").read_text()


def test_wheel_ships_the_prebuilt_extension_and_enables_both_sides(tmp_path, home):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    wheel = next(dist.glob("jupyter_trainer-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    data = f"jupyter_trainer-{jupyter_trainer.__version__}.data/data/"
    assert f"{data}share/jupyter/labextensions/{NAME}/package.json" in names
    assert any(n.startswith(f"{data}share/jupyter/labextensions/{NAME}/static/") for n in names)
    # the run view's bundle for the notebook widget, built with the extension
    assert {
        "jupyter_trainer/frontends/widgets/static/widget.js",
        "jupyter_trainer/frontends/widgets/static/widget.css",
    } <= set(names)
    assert f"{data}etc/jupyter/jupyter_server_config.d/jupyter_trainer.json" in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # JupyterLab and the other dependencies come from this environment, after the venv's
    # own site-packages, so the wheel's copy of jupyter_trainer is the one imported.
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "base_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = {"PATH": str(venv / "bin"), "HOME": str(tmp_path), "JUPYTER_PLATFORM_DIRS": "1"}
    assert shutil.which("node", path=env["PATH"]) is None  # nothing from Node.js is needed
    python = str(venv / "bin" / "python")
    labext = subprocess.run(
        [python, "-m", "jupyterlab.labextensions", "list"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    line = next(l for l in (labext.stdout + labext.stderr).splitlines() if NAME in l)
    assert "enabled" in line and "OK" in line, line
    server = subprocess.run(
        [python, "-m", "jupyter_server.extension.serverextension", "list"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    text = server.stdout + server.stderr
    assert re.search(r"jupyter_trainer\s+(\x1b\[\d+m)?enabled", text), text
    assert re.search(r"jupyter_trainer 0\.1\.0 (\x1b\[\d+m)?OK", text), text
    where = subprocess.run(
        [python, "-c", "import jupyter_trainer; print(jupyter_trainer.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    assert where.stdout.startswith(str(venv))  # the wheel's copy, not the checkout

    # the quickstart notebook, executed headless by papermill from that environment
    out = tmp_path / "quickstart.ipynb"
    done = subprocess.run(
        [
            python,
            "-m",
            "papermill",
            "--kernel",
            "python3",
            "--cwd",
            str(REPO / "notebooks"),
            str(REPO / "notebooks" / "quickstart.ipynb"),
            str(out),
            "-p",
            "epochs",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(env, JUPYTER_TRAINER_HOME=str(home)),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cells = json.loads(out.read_text())["cells"]
    text = "".join(
        o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"])
        for c in cells
        if c["cell_type"] == "code"
        for o in c.get("outputs", [])
    )
    assert ": completed, final test accuracy" in text, text[-2000:]
    runs = Store(home).list_runs()
    assert len(runs) == 1 and Store(home).read_spec(runs[0]["id"]).env.python.startswith(str(venv))
