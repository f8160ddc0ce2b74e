"""Locks and builds with the real uv against the package registry, small packages only.

torch is never asked of uv (it would download a multi-GB CUDA build): layered environments
get it from the kernel, which is the point of ``inherit: true``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import uv

from jupyter_trainer import environment
from jupyter_trainer.core.errors import EnvError
from jupyter_trainer.environment import lock
from jupyter_trainer.environment.definition import EnvDefinition
from jupyter_trainer.environment.stages import build_locked, venvs_dir
from jupyter_trainer.rankside.programs import env_build as builder

KERNEL_SITE = Path(importlib.util.find_spec("six").origin).parent  # the kernel's site-packages


def define(home: Path, name: str, body: str) -> dict:
    return environment.define(EnvDefinition.from_yaml(name, body), home=home)


def env_python(python: str, code: str) -> str:
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def recording_uv(tmp_path: Path, *, sleep: float = 0.0, fail: bool = False) -> tuple[Path, Path]:
    """A uv stand-in that logs each call (and may sleep first, or fail), else runs the real uv."""
    log = tmp_path / "uv-calls.log"
    script = tmp_path / "uv-wrapper"
    tail = "exit 1" if fail else f'exec {uv.find_uv_bin()} "$@"'
    script.write_text(f'#!/bin/sh\necho "$1 $2" >> {log}\nsleep {sleep}\n{tail}\n')
    script.chmod(0o755)
    return script, log


def test_lock_is_reproducible_and_hashed(tmp_path):
    definition = EnvDefinition.from_yaml("rep", "pip: [tomli, 'six>=1.15']")
    texts = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        lock.compile_into(tmp_path / folder, definition, base=None)
        texts.append((tmp_path / folder / "requirements.lock").read_text())
    assert texts[0] == texts[1]
    pins = {e["name"]: e for e in builder.parse_lock(texts[0])}
    assert set(pins) == {"six", "tomli"} and all(
        e["version"] and e["hashed"] for e in pins.values()
    )
    meta = json.loads((tmp_path / "a" / "lock.json").read_text())
    assert meta["python"] == "%d.%d" % sys.version_info[:2] and meta["inherit"] is False


def test_layered_lock_prefers_what_the_kernel_has(tmp_path):
    """With inherit, a requirement the kernel already satisfies is pinned at the kernel's version."""
    base = builder.describe_self()
    definition = EnvDefinition.from_yaml("pref", "inherit: true\npip: [idna, six==1.16.0]")
    lock.compile_into(tmp_path, definition, base=base)
    pins = {
        e["name"]: e["version"]
        for e in builder.parse_lock((tmp_path / "requirements.lock").read_text())
    }
    assert pins == {"idna": importlib.metadata.version("idna"), "six": "1.16.0"}


def test_second_resolve_reuses_the_environment_without_uv_or_network(home, tmp_path, monkeypatch):
    define(home, "warm", "pip: [six==1.16.0]")
    first = environment.build_environment("warm", home=home)
    assert first["built"] and first["build_seconds"] > 0
    marker = Path(first["path"]) / builder.MARKER
    stamp = marker.stat().st_mtime_ns
    fake, calls = recording_uv(tmp_path, fail=True)
    monkeypatch.setenv(builder.UV_ENV, str(fake))  # any uv call would fail ...
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # ... and so would any download
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    timings = []
    for _ in range(3):
        start = time.perf_counter()
        spec = environment.resolve("warm", home=home)
        second = build_locked(spec, home)
        timings.append(time.perf_counter() - start)
    assert not calls.exists(), calls.read_text()
    assert second["built"] is False and second["python"] == first["python"]
    assert marker.stat().st_mtime_ns == stamp
    assert min(timings) < 0.2, timings
    assert env_python(second["python"], "import six; print(six.__version__)") == "1.16.0"


def test_a_deleted_environment_is_rebuilt_from_the_uv_cache_offline(home, monkeypatch):
    define(home, "again", "pip: [six==1.16.0]")
    first = environment.build_environment("again", home=home)
    shutil.rmtree(first["path"])
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    second = environment.build_environment("again", home=home)
    assert second["built"] and second["python"] == first["python"]
    assert env_python(second["python"], "import six; print(six.__version__)") == "1.16.0"


def test_inherit_layers_on_the_kernel_and_added_packages_win(home):
    kernel_six = importlib.metadata.version("six")
    assert kernel_six != "1.16.0"
    define(home, "layer", "inherit: true\npip: [six==1.16.0, idna]")
    built = environment.build_environment("layer", home=home)
    assert built["skipped"] == [f"idna=={importlib.metadata.version('idna')}"]  # the kernel's
    out = json.loads(
        env_python(
            built["python"],
            (
                "import importlib.util, json, sys, six, idna\n"
                "print(json.dumps([six.__version__, six.__file__, idna.__file__, sys.prefix,\n"
                "                  importlib.util.find_spec('torch').origin]))"
            ),
        )
    )
    six_version, six_file, idna_file, prefix, torch_origin = out
    assert six_version == "1.16.0" and six_file.startswith(built["path"])  # the environment's wins
    assert Path(idna_file).parent.parent == KERNEL_SITE  # the kernel's, not reinstalled
    assert Path(torch_origin).parent.parent == KERNEL_SITE  # torch from the kernel
    assert prefix == built["path"]


def test_a_standalone_environment_does_not_see_the_kernel(home):
    define(home, "alone", "pip: [six==1.16.0, pygments]")
    built = environment.build_environment("alone", home=home)
    assert built["skipped"] == [] and built["inherit"] is False
    out = env_python(
        built["python"],
        "import importlib.util as u, six\n"
        "print(six.__version__, u.find_spec('torch'), u.find_spec('idna'))",
    )
    assert out == "1.16.0 None None"
    # Built in a temporary folder and renamed: its console scripts still run.
    script = subprocess.run(
        [str(Path(built["path"]) / "bin" / "pygmentize"), "-V"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert script.returncode == 0 and "Pygments" in script.stdout, script.stderr


def test_a_python_that_is_not_here_is_named(home, monkeypatch):
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS", "never")
    define(home, "old", "python: '3.9'\npip: [six==1.16.0]")
    with pytest.raises(
        EnvError,
        match=r"could not be built: no Python 3\.9 was found on this "
        r"machine \(the base interpreter is 3\.11",
    ):
        environment.build_environment("old", home=home)
    assert [p for p in venvs_dir(home).iterdir() if not p.name.endswith(".lock")] == []


def test_two_processes_building_at_once_get_one_good_environment(home, tmp_path):
    define(home, "race", "inherit: true\npip: [tomli, six==1.16.0]")
    slow, calls = recording_uv(tmp_path, sleep=1.0)  # widen the window in which both build
    code = (
        "import json; from jupyter_trainer import environment as e; "
        "print(json.dumps(e.build_environment('race')))"
    )
    env = {**os.environ, builder.UV_ENV: str(slow)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = []
    for child in children:
        out, err = child.communicate(timeout=240)
        assert child.returncode == 0, err
        results.append(json.loads(out))
    assert results[0]["python"] == results[1]["python"]
    assert sorted(r["built"] for r in results) == [False, True]
    assert calls.read_text().splitlines().count("venv --relocatable") == 1
    entries = sorted(p.name for p in venvs_dir(home).iterdir())
    assert entries == sorted([results[0]["env_id"], f".{results[0]['env_id']}.lock"])
    assert env_python(results[0]["python"], "import tomli, six; print(six.__version__)") == "1.16.0"


def test_a_failed_build_leaves_no_environment_behind(home, tmp_path):
    folder = tmp_path / "lock"
    folder.mkdir()
    (folder / "lock.json").write_text(
        json.dumps(
            {"format": builder.FORMAT, "inherit": False, "python": "%d.%d" % sys.version_info[:2]}
        )
    )
    (folder / "requirements.lock").write_text(
        "six==1.16.0 \\\n    --hash=sha256:" + "0" * 64 + "\n"
    )
    venvs = tmp_path / "venvs"
    plan = builder.plan(str(folder), builder.describe_self())
    stale = venvs / f".{plan['env_id']}.tmp-killed"  # as if an earlier build was killed
    (stale / "env" / "bin").mkdir(parents=True)
    with pytest.raises(builder.BuildError, match="(?i)hash"):
        builder.build(str(folder), str(venvs))
    assert sorted(p.name for p in venvs.iterdir()) == [f".{plan['env_id']}.lock"]
    assert builder.existing(str(folder), str(venvs), builder.describe_self()) is None


def test_build_script_runs_on_a_node_without_the_package(home, tmp_path):
    """The lock folder plus build.py is all a node needs: standard library and uv."""
    info = define(home, "node", "pip: [six==1.16.0]")
    node = tmp_path / "node"
    node.mkdir()
    shutil.copy(builder.__file__, node / "build.py")
    shutil.copytree(lock.locks_dir(home) / info["lock"], node / "lock")
    out = subprocess.run(
        [
            sys.executable,
            "-S",
            "-E",
            str(node / "build.py"),
            str(node / "lock"),
            str(node / "venvs"),
            "--uv",
            uv.find_uv_bin(),
        ],
        capture_output=True,
        text=True,
        cwd=node,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["built"] and record["python"].startswith(str(node / "venvs"))
    assert env_python(record["python"], "import six; print(six.__version__)") == "1.16.0"


def test_unresolvable_requirements_are_not_stored(home):
    with pytest.raises(EnvError) as info:
        define(home, "nope", "pip: [six==99.1]")
    message = str(info.value)
    assert "environment 'nope': uv could not resolve its requirements" in message
    assert "six==99.1" in message
    assert environment.Registry(home).names() == []
    with pytest.raises(EnvError, match="cannot layer on the notebook kernel's Python"):
        define(home, "mismatch", "python: '3.9'\ninherit: true")
